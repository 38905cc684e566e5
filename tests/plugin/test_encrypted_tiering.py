"""Kafka with the plugin tiers a topic to an S3 store that compresses and encrypts each
segment under a KMS key (moto's KMS): consumers read the history back through Kafka under
both isolation levels, Spark reads it, and no object in the bucket holds a record's key or
value in the clear. The plugin asks to copy by URL: over TLS the store hands it each
segment's data key and the plugin PUTs the chunks it encoded; without TLS the store
refuses, naming the setting, and the plugin streams."""

import asyncio
import uuid

import pytest_asyncio
from support.kms import aws_kms, kms_key
from support.s3 import s3_client
from support.telemetry import counter
from support.tls import make_certificates, server_tls_settings

from remotelog.core import metrics as m
from remotelog.segmentstore.layout import Manifest

from .conftest import tiering_stack
from .test_kafka_tiers import (
    PARTITIONS,
    create_tiered_topic,
    produce_every_kind,
    served_through_kafka,
    wait_until_tiered,
)

ENCRYPTED = {"compression.enabled": "true", "chunk.size": str(256 * 1024)}
BY_URL = {"rsm.config.copy.method": "url", "rsm.config.fetch.urls.enabled": "true"}


@pytest_asyncio.fixture(scope="module", params=["url-over-tls", "stream"])
async def encrypted_tiering(request, tmp_path_factory, s3_endpoint):
    """The stack, its store's KMS key id, how the plugin copies, and Spark's options: with
    TLS on every service (server certificates, which every caller checks) by URL, without
    TLS by stream."""
    tmp = tmp_path_factory.mktemp("encrypted-tiering")
    keys = aws_kms(s3_endpoint, kms_key(s3_endpoint))
    servers, callers, spark, plugin = {}, {}, {}, dict(BY_URL)
    if request.param == "url-over-tls":
        certificates = make_certificates(tmp)
        servers = {k: v for k, v in server_tls_settings(certificates).items() if "client" not in k}
        # The services' calls of each other (the store calls none).
        callers = {**servers, "client.tls.ca.file": str(certificates.ca)}
        plugin |= {
            f"{role}.config.client.tls.ca.file": str(certificates.ca) for role in ("rsm", "rlmm")
        }
        spark = {"remotelog.tls.root.certs.file": str(certificates.ca)}
    async with tiering_stack(
        tmp,
        s3_endpoint,
        backend="s3",
        store_settings={**ENCRYPTED, **keys, **servers},
        metadata_settings=callers,
        fetch_settings=callers,
        **plugin,
    ) as tiering:
        yield tiering, keys["encryption.key.id"], request.param.partition("-")[0], spark


def served_bytes(reader) -> int:
    """Record bytes the fetch service has answered so far (it counts them by no topic)."""
    return counter(reader, m.REMOTE_FETCH_BYTES.name, None, "remotelog.fetch") or 0


def bucket_objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    client = s3_client(endpoint)
    return {
        o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    }


async def test_kafka_tiers_an_encrypted_topic_and_serves_it_back(
    encrypted_tiering, spark, telemetry
):
    tiering, key_id, copied_by, spark_tls = encrypted_tiering
    broker, stack = tiering.broker, tiering.stack
    topic = f"sealed-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(create_tiered_topic, broker.bootstrap_servers, topic)
    produced = await asyncio.to_thread(
        produce_every_kind, broker.bootstrap_servers, topic, ("none", "zstd"), 400, 400
    )
    await asyncio.to_thread(wait_until_tiered, broker, topic)
    await served_through_kafka(broker, topic, produced)

    frame = (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{stack.running[0].service.port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{stack.metadata.service.port}")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(**spark_tls)
        .option("subscribe", topic)
        .load()
    )
    served_before = served_bytes(telemetry[0])
    rows = await asyncio.to_thread(frame.select("partition", "offset", "key", "value").collect)
    # Over TLS Spark's tasks read the bucket themselves and decode the chunks with the keys
    # the fetch service located them with; without, the fetch service reads them.
    # (read_uncommitted: a read_committed one takes the fetch service's Fetch, for its
    # aborted transactions.)
    served = served_bytes(telemetry[0]) - served_before
    assert (served == 0) == (copied_by == "url"), served
    for partition in range(PARTITIONS):
        found = [
            (r.key, r.value)
            for r in sorted(rows, key=lambda r: r.offset)
            if r.partition == partition
        ]
        expected = produced.expected(partition, committed_only=False)
        assert found == [(key, value) for key, value, _ in expected]

    objects = bucket_objects(stack.store.endpoint, stack.bucket, topic)
    manifests = {k: Manifest.from_json(v, k) for k, v in objects.items() if k.endswith("manifest")}
    assert manifests
    for manifest in manifests.values():
        assert manifest.transforms is not None
        assert manifest.transforms.encryption is not None
        assert manifest.transforms.encryption.key_id == key_id
    clear = [(key, value) for records in produced.records.values() for key, value, _, _ in records]
    for name, body in objects.items():
        if name.endswith("manifest"):
            assert all(key not in body for key, _ in clear), name
            continue
        leaked = [key for key, value in clear if key in body or value[:64] in body]
        assert not leaked, (name, leaked[:3])

    log = broker.run_log()
    copies = [line for line in log if "Copied segment" in line and topic in line]
    assert copies
    assert all(f"to the segment store by {copied_by}" in line for line in copies), copies[:3]
    # Over TLS the plugin reads each segment by its URL and decodes the chunks itself
    # (with the data key the store gave it); without, it reads through the store.
    by_url = any("Reading segment logs from the http" in line for line in log)
    assert by_url == (copied_by == "url")
    if copied_by == "stream":
        # The store said why: the plugin warned once, naming the setting.
        assert any("tls.cert.file is unset" in line for line in log)
