"""What discovery asks the Kafka cluster, through confluent-kafka's admin client.

The calls block: discovery runs them in a worker thread. A view is complete or
not made at all (KafkaUnavailableError, or ClusterAccessDeniedError when the
cluster refuses a read): a partial answer read as "these topics are gone" would
stop their copying and mark their remote data deleted.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from remotelog.core.errors import KafkaUnavailableError, PermissionDeniedError
from remotelog.core.kafka_client import uuid_of

# The topic configs discovery reads: which topics to tier, and their retention.
RETENTION_CONFIGS = (
    "retention.ms",
    "retention.bytes",
    "local.retention.ms",
    "local.retention.bytes",
)
TOPIC_CONFIGS = ("remote.storage.enable", "cleanup.policy", *RETENTION_CONFIGS)
_LOG = logging.getLogger("remotelog.scheduler.librdkafka")
# Answers that mean the cluster refused this principal, not that it is away.
_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)


class ClusterAccessDeniedError(PermissionDeniedError):
    """The cluster answered and refused a read discovery needs: its ACLs must change,
    no retry alone will do."""


@dataclass(frozen=True)
class PartitionView:
    leader: int  # -1 while the partition has none
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class TopicView:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionView]
    # The TOPIC_CONFIGS the broker reports (an older broker lacks some); read only
    # for topics with a replica on the broker the view is made for.
    configs: Mapping[str, str]

    def hosted_on(self, broker_id: int) -> bool:
        return any(broker_id in p.replicas for p in self.partitions.values())


@dataclass(frozen=True)
class ClusterView:
    topics: Mapping[str, TopicView]

    def topic_ids(self) -> set[uuid.UUID]:
        return {topic.topic_id for topic in self.topics.values()}


def _unknown_topic(error: BaseException) -> bool:
    return (
        isinstance(error, KafkaException)
        and error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    )


class KafkaCluster:
    """One admin client, kept for the process: librdkafka cancels the requests of a
    client that is dropped before their answers arrive."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        timeout_s: float,
        principal: str = "discovery's principal",
    ) -> None:
        self.bootstrap_servers = client_config["bootstrap.servers"]
        self.timeout_s = timeout_s
        # Who needs the ACLs a refusal names.
        self.principal = principal
        config: dict[str, Any] = {**client_config, "logger": _LOG}
        self._admin = AdminClient(config)

    def view(self, broker_id: int) -> ClusterView:
        """Every topic with its id, leaders and replicas; the configs of those hosted on
        `broker_id`."""
        with self._answering("Metadata"):
            # Topics listed with an error (no leader now) too: DescribeTopics decides.
            names = list(self._admin.list_topics(timeout=self.timeout_s).topics)
        with self._answering("DescribeTopics"):
            described = self._describe(names)
        hosted = [t.name for t in described if t.hosted_on(broker_id)]
        with self._answering("DescribeConfigs"):
            configs = self._configs(hosted)
        return ClusterView(
            {
                topic.name: TopicView(
                    topic.name, topic.topic_id, topic.partitions, configs.get(topic.name, {})
                )
                for topic in described
            }
        )

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """Every topic's id, by name."""
        with self._answering("Metadata"):
            names = list(self._admin.list_topics(timeout=self.timeout_s).topics)
        with self._answering("DescribeTopics"):
            return {topic.name: topic.topic_id for topic in self._describe(names)}

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name` now; None when there is no such topic."""
        with self._answering("DescribeTopics"):
            described = self._describe([name])
        return described[0].topic_id if described else None

    @contextlib.contextmanager
    def _answering(self, request: str) -> Iterator[None]:
        """A Kafka client failure as the cluster refusing `request` or unavailable,
        naming where it was asked."""
        try:
            yield
        except KafkaException as error:
            kafka_error = error.args[0]
            if kafka_error.code() in _DENIED:
                raise ClusterAccessDeniedError(
                    f"Kafka at {self.bootstrap_servers} refused {request}: "
                    f"{kafka_error.str()}; {self.principal} needs Describe and "
                    "DescribeConfigs on the topics (and the cluster's metadata)",
                    metadata={"request": request},
                ) from error
            raise KafkaUnavailableError(
                f"Kafka at {self.bootstrap_servers}: {kafka_error.str()}"
            ) from error

    def _describe(self, names: list[str]) -> list[TopicView]:
        """Topics as DescribeTopics answers; one deleted since it was listed is left out,
        any other failure raises."""
        if not names:
            return []
        futures = self._admin.describe_topics(
            TopicCollection(names), request_timeout=self.timeout_s
        )
        found = []
        for future in futures.values():
            try:
                description = future.result()
            except KafkaException as error:
                if _unknown_topic(error):
                    continue
                raise
            partitions = {
                p.id: PartitionView(
                    p.leader.id if p.leader is not None else -1,
                    tuple(node.id for node in p.replicas),
                )
                for p in description.partitions
            }
            found.append(TopicView(description.name, uuid_of(description.topic_id), partitions, {}))
        return found

    def _configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = self._admin.describe_configs(resources, request_timeout=self.timeout_s)
        found = {}
        for resource, future in futures.items():
            try:
                entries = future.result()
            except KafkaException as error:
                if _unknown_topic(error):
                    continue
                raise
            found[resource.name] = {
                key: entry.value
                for key, entry in entries.items()
                if key in TOPIC_CONFIGS and entry.value is not None
            }
        return found
