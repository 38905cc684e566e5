"""Discovery's rules on their own: which directories are partitions, which topics are
tiered, what a look at the cluster and the log dirs hands the scheduler, and its
settings as `remotelog config check` shows and refuses them."""

import re
import uuid
from pathlib import Path
from types import SimpleNamespace

from remotelog.cli.main import main
from remotelog.coordination.lease import InProcessLeases
from remotelog.core.errors import KafkaUnavailableError
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.kafka.state_files import leader_epoch_checkpoint_text, partition_metadata_text
from remotelog.scheduler.cluster import ClusterView, PartitionView, TopicView
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.discovery import (
    PartitionDiscovery,
    discover,
    partition_directories,
    tiered,
)
from remotelog.scheduler.partition import Assignment, Role

PATTERN = re.compile("events-.*")
ORDERS = uuid.UUID("a79f4f37-8aa4-47cc-b5ef-a9e1b830cf3c")


def topic(name: str, topic_id: uuid.UUID = ORDERS, **configs: str) -> TopicView:
    partitions = {
        0: PartitionView(1, (1, 2)),
        1: PartitionView(2, (2, 1)),
        2: PartitionView(3, (3,)),
    }
    return TopicView(
        name, topic_id, partitions, {k.replace("_", "."): v for k, v in configs.items()}
    )


def partition_dir(root: Path, name: str, topic_id: uuid.UUID, epochs=None) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "partition.metadata").write_text(partition_metadata_text(topic_id))
    text = "" if epochs is None else leader_epoch_checkpoint_text(epochs)
    (directory / "leader-epoch-checkpoint").write_text(text)
    return directory


def test_partition_directories_are_the_ones_kafka_names_topic_dash_partition(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for name in ("orders-0", "my-topic-12", "orders-1.3f2a9c-delete", "orders-2.3f2a9c-future"):
        (first / name).mkdir(parents=True)
    (second / "orders-3").mkdir(parents=True)
    (second / "orders-4").write_text("a file, not a partition")
    (second / "cleaner-offset-checkpoint").write_text("")
    found = partition_directories([str(first), str(second), str(tmp_path / "missing")])
    assert found == {
        ("orders", 0): first / "orders-0",
        ("my-topic", 12): first / "my-topic-12",
        ("orders", 3): second / "orders-3",
    }


def test_a_topic_is_tiered_by_its_config_or_the_pattern_never_internal_or_compacted():
    assert tiered(topic("orders", remote_storage_enable="true"), None)
    assert not tiered(topic("orders", remote_storage_enable="false"), None)
    assert not tiered(topic("orders"), None)  # a broker that does not know the config
    assert tiered(topic("events-clicks"), PATTERN)
    assert not tiered(topic("all-events-clicks"), PATTERN)  # the whole name must match
    assert not tiered(topic("__consumer_offsets", remote_storage_enable="true"), re.compile(".*"))
    assert not tiered(topic("__remote_log_metadata"), re.compile(".*"))
    for policy in ("compact", "compact,delete"):
        assert not tiered(topic("events-state", cleanup_policy=policy), PATTERN)
    assert tiered(topic("events-state", cleanup_policy="delete"), PATTERN)


def test_a_look_hands_over_the_tiered_partitions_hosted_here_with_their_roles(tmp_path):
    configs = {
        "remote_storage_enable": "true",
        "retention_ms": "86400000",
        "retention_bytes": "-1",
        "local_retention_ms": "-2",
        "local_retention_bytes": "1048576",
    }
    other = uuid.uuid4()
    view = ClusterView(
        {
            "orders": topic("orders", **configs),
            "events-a": topic("events-a", other),
            "plain": topic("plain", uuid.uuid4()),
        }
    )
    root = tmp_path / "data"
    leading = partition_dir(root, "orders-0", ORDERS, [(0, 0), (4, 120)])
    following = partition_dir(root, "orders-1", ORDERS)  # empty, as a new follower's
    partition_dir(root, "events-a-0", uuid.uuid4())  # an earlier topic's, not deleted yet
    partition_dir(root, "plain-0", view.topics["plain"].topic_id)
    (root / "orders-2").mkdir()  # broker 3's partition: not hosted here

    found = discover(view, 1, [str(root)], PATTERN)

    tips = [TopicIdPartition(ORDERS, "orders", p) for p in (0, 1)]
    retention = {
        "retention_ms": 86_400_000,
        "retention_bytes": -1,
        "local_retention_ms": -2,
        "local_retention_bytes": 1_048_576,
    }
    assert found == {
        tips[0]: Assignment(tips[0], leading, 4, Role.LEADER, **retention),
        tips[1]: Assignment(tips[1], following, 0, Role.FOLLOWER, **retention),
    }
    # Broker 2 leads partition 1 and follows partition 0, from its own directories.
    assert {a.role for a in discover(view, 2, [str(root)], PATTERN).values()} == {
        Role.LEADER,
        Role.FOLLOWER,
    }


def test_config_check_shows_the_discovery_settings_with_their_defaults(tmp_path, capsys):
    path = tmp_path / "copy-scheduler.properties"
    path.write_text("")
    assert main(["config", "check", "--service", "copy-scheduler", str(path)]) == 0
    out = capsys.readouterr().out
    for line in (
        "remote.log.manager.discovery.enabled=false  # default",
        "remote.log.manager.discovery.interval.ms=10000  # default",
        "remote.log.manager.discovery.topic.pattern=  # default",
        "log.dirs=  # default",
        "bootstrap.servers=127.0.0.1:9092  # default",
        "partition.remover.address=127.0.0.1:7305  # default",
        "security.protocol=PLAINTEXT  # default",
    ):
        assert line in out


def test_config_check_refuses_discovery_without_log_dirs_or_with_a_bad_pattern(tmp_path, capsys):
    path = tmp_path / "copy-scheduler.properties"
    path.write_text("remote.log.manager.discovery.enabled=true\n")
    assert main(["config", "check", "--service", "copy-scheduler", str(path)]) == 2
    assert "log.dirs: remote.log.manager.discovery.enabled=true needs the broker's log.dirs" in (
        capsys.readouterr().err
    )
    path.write_text("remote.log.manager.discovery.topic.pattern=events-(\n")
    assert main(["config", "check", "--service", "copy-scheduler", str(path)]) == 2
    err = capsys.readouterr().err
    assert "remote.log.manager.discovery.topic.pattern" in err
    assert "is not a regular expression" in err
    path.write_text(
        "remote.log.manager.discovery.enabled=true\nlog.dirs=/var/lib/kafka/data\n"
        "security.protocol=SASL_SSL\n"
    )
    assert main(["config", "check", "--service", "copy-scheduler", str(path)]) == 2
    assert "sasl.username" in capsys.readouterr().err


class Remote:
    """The metadata manager's listing of partitions with remote data, as set."""

    def __init__(self) -> None:
        self.listed: list[TopicIdPartition] = []

    async def list_remote_partitions(self, topic=None, *, timeout_s=None):
        return [RemotePartitionSummary(tip, 0, 9, 100, 1) for tip in self.listed]


class Cluster:
    """Answers DescribeTopics by name: the topic is gone, or the question fails."""

    bootstrap_servers = "kafka:9092"

    def __init__(self) -> None:
        self.failure: Exception | None = None

    def topic_id(self, name: str) -> uuid.UUID | None:
        if self.failure is not None:
            raise self.failure
        return None


def deletion_follower(tmp_path):
    config = CopySchedulerConfig(discovery_enabled=True, log_dirs=str(tmp_path))
    marks: list[list[TopicIdPartition]] = []

    async def mark(tips: list[TopicIdPartition]) -> None:
        marks.append(tips)

    scheduler = SimpleNamespace(owner="sidecar-1")
    remote, cluster = Remote(), Cluster()
    discovery = PartitionDiscovery(config, scheduler, cluster, remote, mark, InProcessLeases())
    return discovery, remote, cluster, marks


async def test_a_deleted_topic_is_marked_once_and_forgotten_once_its_data_is_gone(tmp_path):
    discovery, remote, _, marks = deletion_follower(tmp_path)
    gone = TopicIdPartition(ORDERS, "orders", 0)
    remote.listed = [gone]
    empty = ClusterView({})
    for _ in range(4):  # missed by two looks: marked; listed on: not marked again
        await discovery._follow_deletions(empty)
    assert marks == [[gone]]
    assert discovery.marked == {gone}
    remote.listed = []  # the remover deleted it all
    await discovery._follow_deletions(empty)
    assert discovery.marked == set()


async def test_a_failed_question_by_name_leaves_the_look_answered(tmp_path, caplog):
    discovery, remote, cluster, marks = deletion_follower(tmp_path)
    remote.listed = [TopicIdPartition(ORDERS, "orders", 0)]
    cluster.failure = KafkaUnavailableError("Kafka at kafka:9092: timed out")
    for _ in range(2):
        await discovery._follow_deletions(ClusterView({}))
    assert marks == []
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "could not ask whether topic orders" in warning
    assert "keep their roles" not in warning  # not told as an unreachable cluster
    cluster.failure = None
    await discovery._follow_deletions(ClusterView({}))
    assert len(marks) == 1
