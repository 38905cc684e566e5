"""Groups of settings shared by several services' config dataclasses.

Each service's config (remotelog.<service>.config) is one frozen dataclass
that inherits the groups it needs, so a key such as `segment.store.address`
is declared once and means the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remotelog.core.addresses import grpc_address, host_port_list, url
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.config import setting

MIB = 1024 * 1024
# Addresses and URLs hold no whitespace: a value with some carries a typo or a comment.
ADDRESS_FORM = (r"\S+:\d+|unix:\S+|unix-abstract:\S+", "host:port or unix:/path")
HTTP_URL_FORM = (r"https?://\S+|", "an http:// or https:// URL (or empty)")
HTTP_URL = url("http", "https")
BOOTSTRAP_SERVERS_FORM = (r"[^\s,]+(\s*,\s*[^\s,]+)*", "host:port[,host:port...]")


def listen_address_setting(default: str) -> Any:
    """`listen.address`, each service with its own default port."""
    return setting(
        "listen.address",
        default,
        "host:port the gRPC server binds (port 0 = any free port), or unix:/path for a sidecar",
        form=ADDRESS_FORM,
        check=grpc_address(any_port=True),
    )


@dataclass(frozen=True)
class ServerSettings:
    """The gRPC listener every service has."""

    listen_address: str = listen_address_setting("127.0.0.1:0")
    grpc_max_message_bytes: int = setting(
        "grpc.max.message.bytes", 16 * MIB, "Largest gRPC message accepted or sent", min=1024
    )
    shutdown_grace_ms: int = setting(
        "shutdown.grace.ms", 10_000, "Time in-flight calls get to finish on SIGTERM", min=0
    )
    tls_cert_file: str = setting("tls.cert.file", "", "PEM server certificate; empty = plaintext")
    tls_key_file: str = setting("tls.key.file", "", "PEM private key of tls.cert.file")
    tls_client_ca_file: str = setting(
        "tls.client.ca.file", "", "PEM CA bundle; when set, clients must present a certificate"
    )
    authorization_enabled: bool = setting(
        "authorization.enabled",
        False,
        "Check each call against its caller's role (broker, reader, operator)",
    )
    authorization_tokens_file: str = setting(
        "authorization.tokens.file",
        "",
        "File of '<role> <token>' lines: a call's 'authorization: Bearer <token>' gives its role",
    )
    authorization_certificate_roles: str = setting(
        "authorization.certificate.roles",
        "",
        "name=role,...: a client certificate whose common name or a subject alternative name "
        "is `name` has `role`",
        form=(r"([^=,\s]+=\w+(,[^=,\s]+=\w+)*)?", "name=role[,name=role...]"),
    )
    otlp_endpoint: str = setting(
        "otel.exporter.otlp.endpoint",
        "",
        "OTLP/gRPC collector for spans and metrics (http://host:4317); empty = not exported",
        form=HTTP_URL_FORM,
        check=HTTP_URL,
    )
    otlp_export_interval_ms: int = setting(
        "otel.metric.export.interval.ms", 60_000, "How often metrics are exported", min=100
    )
    metrics_listen_address: str = setting(
        "metrics.listen.address",
        "",
        "host:port of a Prometheus scrape endpoint (GET /metrics); empty = none",
        form=(r"([^\s:]+|\[[0-9a-fA-F:]+\]):\d+|", "host:port (or empty)"),
        check=grpc_address(any_port=True, optional=True),
    )
    log_level: str = setting(
        "log.level",
        "INFO",
        "Lowest level logged: DEBUG, INFO, WARNING or ERROR",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    )
    log_format: str = setting(
        "log.format",
        "text",
        "text (time level service logger: message) or json (one object per line)",
        choices=("text", "json"),
    )


@dataclass(frozen=True)
class ClientTlsSettings:
    """How a service's own gRPC calls (to the store, the metadata manager) use TLS and
    which token they show where the called service checks roles."""

    client_auth_token_file: str = setting(
        "client.auth.token.file",
        "",
        "File holding the bearer token this service's calls show (authorization.enabled "
        "on the services it calls); empty = none",
    )

    client_tls_ca_file: str = setting(
        "client.tls.ca.file",
        "",
        "PEM CA bundle the called services' certificates must chain to; empty = plaintext",
    )
    client_tls_cert_file: str = setting(
        "client.tls.cert.file",
        "",
        "PEM certificate this service shows the services it calls (mutual TLS); empty = none",
    )
    client_tls_key_file: str = setting(
        "client.tls.key.file", "", "PEM private key of client.tls.cert.file"
    )


@dataclass(frozen=True)
class SegmentStoreClientSettings(ClientTlsSettings):
    """How a service reaches the segment store."""

    segment_store_address: str = setting(
        "segment.store.address",
        "127.0.0.1:7301",
        "host:port of the segment store service",
        form=ADDRESS_FORM,
        check=grpc_address(),
    )
    segment_store_short_circuit_socket: str = setting(
        "segment.store.short.circuit.socket.path",
        "",
        "The segment store's short.circuit.socket.path when it runs on this host: copies and "
        "fetches pass file descriptors instead of bytes; empty = gRPC only",
    )


@dataclass(frozen=True)
class MetadataClientSettings(ClientTlsSettings):
    """How a service reaches the metadata manager."""

    metadata_manager_address: str = setting(
        "metadata.manager.address",
        "127.0.0.1:7302",
        "host:port of the metadata manager service",
        form=ADDRESS_FORM,
        check=grpc_address(),
    )


@dataclass(frozen=True)
class RedisSettings:
    """Leases and the shared index cache; empty = in-process implementations."""

    redis_url: str = setting(
        "redis.url",
        "",
        "redis://host:port/db; empty = in-process",
        form=(r"(rediss?|unix)://\S+|", "a redis://, rediss:// or unix:// URL (or empty)"),
        check=url("redis", "rediss", "unix"),
    )


@dataclass(frozen=True)
class KafkaSecuritySettings:
    """How the Kafka clients join a secured cluster: Kafka's `security.protocol` and
    `sasl.*`, and librdkafka's PEM `ssl.*` locations (Kafka's own clients read JKS)."""

    security_protocol: str = setting(
        "security.protocol",
        "PLAINTEXT",
        "Protocol to the brokers",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    )
    ssl_ca_location: str = setting(
        "ssl.ca.location", "", "PEM CA bundle of the brokers' certificates; empty = the system's"
    )
    ssl_certificate_location: str = setting(
        "ssl.certificate.location", "", "PEM client certificate, for brokers that ask for one"
    )
    ssl_key_location: str = setting(
        "ssl.key.location", "", "PEM private key of ssl.certificate.location"
    )
    ssl_key_password: str = setting(
        "ssl.key.password", "", "Password of ssl.key.location, if encrypted", secret=True
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "ssl.endpoint.identification.algorithm",
        "https",
        "https: the broker's certificate must name its host; none (or empty): not checked",
        form=(r"https|none|", "https, none or empty"),
    )
    sasl_mechanism: str = setting(
        "sasl.mechanism",
        "PLAIN",
        "SASL mechanism with SASL_PLAINTEXT or SASL_SSL",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    )
    sasl_username: str = setting("sasl.username", "", "SASL user (or sasl.jaas.config)")
    sasl_password: str = setting("sasl.password", "", "Password of sasl.username", secret=True)
    sasl_jaas_config: str = setting(
        "sasl.jaas.config",
        "",
        "Kafka's JAAS line (PlainLoginModule or ScramLoginModule with username and password), "
        "instead of sasl.username and sasl.password",
        secret=True,
    )


@dataclass(frozen=True)
class KafkaClusterSettings(KafkaSecuritySettings):
    """The Kafka cluster a service's clients join, under the security settings."""

    bootstrap_servers: str = setting(
        "bootstrap.servers",
        "127.0.0.1:9092",
        "Kafka brokers of the cluster (the metadata topic's; the one discovery follows)",
        form=BOOTSTRAP_SERVERS_FORM,
        check=host_port_list,
    )


@dataclass(frozen=True)
class MetadataTopicSettings(KafkaClusterSettings):
    """The `__remote_log_metadata` topic (Kafka's TopicBasedRemoteLogMetadataManagerConfig)."""

    metadata_topic_num_partitions: int = setting(
        "remote.log.metadata.topic.num.partitions",
        50,
        "Partitions of __remote_log_metadata",
        min=1,
        max=10_000,
    )
    consumer_fetch_wait_ms: int = setting(
        "remote.log.metadata.consumer.fetch.max.wait.ms",
        500,
        "Longest wait of the metadata consumer's fetches (Kafka's consumer default): "
        "longer than the broker takes to read its storage, or fetches come back empty",
        min=1,
    )


@dataclass(frozen=True)
class BrokerIdSettings:
    """The broker a service acts for, as Kafka's events name it."""

    broker_id: int = setting(
        "broker.id",
        0,
        "Id of the broker this service acts for, written into the events it writes",
        min=0,
    )


@dataclass(frozen=True)
class CustomMetadataSettings:
    """KIP-917's custom metadata, one bound for the three services that handle it: the
    store returns it with a copy, the scheduler writes it, the metadata manager takes it."""

    custom_metadata_max_bytes: int = setting(
        "remote.log.metadata.custom.metadata.max.bytes",
        128,
        "Largest KIP-917 custom metadata: a copy returning more stops the partition's "
        "copying, as in Kafka, and the metadata manager refuses it",
        min=0,
    )


@dataclass(frozen=True)
class RetrySettings:
    """Backoff for retries of transient remote-storage and service failures."""

    retry_backoff_ms: int = setting(
        "remote.log.manager.task.retry.backoff.ms", 500, "Initial retry backoff", min=0
    )
    retry_backoff_max_ms: int = setting(
        "remote.log.manager.task.retry.backoff.max.ms", 30_000, "Maximum retry backoff", min=0
    )
    retry_jitter: float = setting(
        "remote.log.manager.task.retry.jitter",
        0.2,
        "Random fraction added to or removed from each backoff",
        min=0.0,
        max=1.0,
    )

    def backoff(self) -> ExponentialBackoff:
        return ExponentialBackoff(
            initial_ms=self.retry_backoff_ms,
            max_ms=self.retry_backoff_max_ms,
            jitter=self.retry_jitter,
        )


@dataclass(frozen=True)
class RemoverCallSettings:
    """The deadline of the remover's, the scrub's and recover's calls to the other services."""

    rpc_timeout_ms: int = setting(
        "remote.partition.remover.rpc.timeout.ms",
        30_000,
        "Deadline of each call to the segment store and the metadata manager",
        min=1,
    )
