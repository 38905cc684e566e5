"""The plugin against secured services: mutual TLS on every gRPC port, roles by bearer
token. With the broker's token Kafka tiers and serves its history; configured with a
reader's token, its copies are refused and nothing reaches the store."""

import asyncio
import os
import uuid

import pytest_asyncio
from support.services import metadata_config, new_bucket, start_metadata, start_store
from support.tls import make_certificates, server_tls_settings
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.dev.broker import free_port

from .conftest import stop_brokers, tiering_broker
from .test_kafka_tiers import (
    PARTITIONS,
    create_tiered_topic,
    produce_plain,
    wait_for_offsets,
)

TOKENS = {role: f"{role}-{os.urandom(12).hex()}" for role in ("broker", "reader", "operator")}


@pytest_asyncio.fixture(scope="module")
async def secured(tmp_path_factory, s3_endpoint):
    tmp = tmp_path_factory.mktemp("secured-plugin")
    certificates = make_certificates(tmp)
    tokens = tmp / "tokens"
    tokens.write_text("".join(f"{role} {token}\n" for role, token in TOKENS.items()))
    for role, token in TOKENS.items():
        (tmp / f"{role}.token").write_text(token + "\n")
    guarded = {
        **server_tls_settings(certificates),  # client certificates required
        "authorization.enabled": "true",
        "authorization.tokens.file": str(tokens),
    }
    store_address, metadata_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"

    def plugin(role: str) -> dict[str, str]:
        """What the plugin is given: the services' CA, its certificate, a role's token."""
        return {
            "rsm.config.segment.store.address": store_address,
            "rlmm.config.metadata.manager.address": metadata_address,
            **{
                f"{prefix}.{key}": value
                for prefix in ("rsm.config", "rlmm.config")
                for key, value in {
                    "client.tls.ca.file": str(certificates.ca),
                    "client.tls.cert.file": str(certificates.client_cert),
                    "client.tls.key.file": str(certificates.client_key),
                    "client.auth.token.file": str(tmp / f"{role}.token"),
                }.items()
            },
        }

    broker = tiering_broker(tmp, store_address, metadata_address, **plugin("broker")).start()
    bucket = new_bucket(s3_endpoint)
    listen = {"listen.address": store_address}
    store = await start_store("filesystem", tmp, s3_endpoint, bucket, **guarded, **listen)
    metadata = await start_metadata(
        metadata_config(
            tmp, broker.bootstrap_servers, **guarded, **{"listen.address": metadata_address}
        )
    )
    try:
        yield broker, store, plugin
    finally:
        await stop_brokers(broker)
        await metadata.stop()
        await store.stop()


def store_objects_of(store, topic: str) -> dict[str, int]:
    return {key: size for key, size in store.objects().items() if key.startswith(f"{topic}-")}


async def test_the_plugin_tiers_over_mutual_tls_as_the_broker_role(secured):
    broker, store, _ = secured
    topic = f"secured-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(create_tiered_topic, broker.bootstrap_servers, topic)
    values = await asyncio.to_thread(produce_plain, broker.bootstrap_servers, topic, 2500)
    await asyncio.to_thread(
        wait_for_offsets, broker, topic, "earliest-local", lambda o: min(o.values()) > 0, "tier"
    )
    assert store_objects_of(store, topic)
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(read_to_end, broker.bootstrap_servers, topic, partition)
        assert [m.value() for m in messages] == values[partition]


async def test_with_a_readers_token_kafkas_copies_are_refused_and_nothing_is_stored(secured):
    broker, store, plugin = secured
    await asyncio.to_thread(broker.stop)
    broker.properties = {**broker.properties, **plugin("reader")}
    await asyncio.to_thread(broker.start)
    topic = f"refused-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(create_tiered_topic, broker.bootstrap_servers, topic)
    await asyncio.to_thread(produce_plain, broker.bootstrap_servers, topic, 2500)
    # The first broker-only call Kafka makes for the topic is refused, whichever it is.
    refusal = "role reader (a bearer token) may not call /remotelog.api."
    await eventually(lambda: refusal in broker.log_path.read_text(), timeout_s=120, interval_s=1)
    assert store_objects_of(store, topic) == {}
    assert (await asyncio.to_thread(broker.list_offsets, topic, "earliest-local")) == dict.fromkeys(
        range(PARTITIONS), 0
    )
