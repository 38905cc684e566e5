"""Authorization by role: a bearer token or a client certificate gives a call its role
(broker, reader, operator), and one interceptor refuses what the role may not call
with PERMISSION_DENIED naming the method and the role (UNAUTHENTICATED for no
identity), as any other error, with ErrorInfo."""

import asyncio
import dataclasses
import logging
import os
import uuid

import pytest
import pytest_asyncio
from fetch.conftest import fetch_config
from remover.conftest import remover_config_beside
from segmentstore.segments import segment_metadata, synthetic_files
from support.services import (
    CLIENT_OPTIONS,
    load_properties,
    metadata_config,
    new_bucket,
    new_partition,
    start_metadata,
    start_store,
)
from support.tiering import batch, tier_segment
from support.tls import make_certificates, server_tls_settings

from remotelog.client import (
    ClientOptions,
    FetchPartition,
    MetadataClient,
    PartitionRemoverClient,
    RemoteFetchClient,
    SegmentStoreClient,
)
from remotelog.core.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError
from remotelog.core.states import RemoteLogSegmentState
from remotelog.fetch.server import start_remote_fetch
from remotelog.remover.server import start_partition_remover
from remotelog.rpc.authorization import Policy
from remotelog.segmentstore.config import SegmentStoreConfig

TOKENS = {
    "broker": "broker-" + os.urandom(12).hex(),
    "reader": "reader-" + os.urandom(12).hex(),
    "operator": "operator-" + os.urandom(12).hex(),
}
STORE = "/remotelog.api.segmentstore.v1.SegmentStoreService"


def with_token(role: str) -> ClientOptions:
    return dataclasses.replace(CLIENT_OPTIONS, bearer_token=TOKENS[role])


@dataclasses.dataclass
class Secured:
    """Store, metadata manager, remote fetch and remover, each checking roles; the
    fetch service and the remover call the others with the broker's token."""

    ports: dict[str, int]

    def client(self, cls, service: str, role: str):
        return cls(f"127.0.0.1:{self.ports[service]}", options=with_token(role))


@pytest_asyncio.fixture
async def secured(tmp_path, broker, s3_endpoint):
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "# role token\n" + "".join(f"{role} {token}\n" for role, token in TOKENS.items())
    )
    own = tmp_path / "broker.token"
    own.write_text(TOKENS["broker"] + "\n")
    auth = {"authorization.enabled": "true", "authorization.tokens.file": str(tokens)}
    calls = {"client.auth.token.file": str(own)}
    store = await start_store("filesystem", tmp_path, s3_endpoint, new_bucket(s3_endpoint), **auth)
    # The manager checks a recovery's segments with the store, calling it as a broker.
    checks = {"segment.store.address": f"127.0.0.1:{store.service.port}", **calls}
    metadata = await start_metadata(
        metadata_config(tmp_path, broker.bootstrap_servers, **auth, **checks)
    )
    stores, metadatas = store.service.port, metadata.service.port
    fetch = await start_remote_fetch(fetch_config(tmp_path, stores, metadatas, **auth, **calls))

    remover_config = remover_config_beside(
        tmp_path, broker.bootstrap_servers, stores, metadatas, **auth, **calls
    )
    remover = await start_partition_remover(remover_config)
    try:
        ports = {"store": stores, "metadata": metadatas, "fetch": fetch.port}
        yield Secured({**ports, "remover": remover.port})
    finally:
        await remover.stop(1.0)
        await fetch.stop(1.0)
        await metadata.stop()
        await store.stop()


async def test_a_reader_reads_but_may_not_copy_delete_or_remove(secured, caplog):
    caplog.set_level(logging.DEBUG)
    broker_store = secured.client(SegmentStoreClient, "store", "broker")
    reader_store = secured.client(SegmentStoreClient, "store", "reader")
    broker_metadata = secured.client(MetadataClient, "metadata", "broker")
    reader = secured.client(RemoteFetchClient, "fetch", "reader")
    remover = secured.client(PartitionRemoverClient, "remover", "reader")
    try:
        tip = new_partition("secured")
        log = batch(0, 5) + batch(5, 5)
        tiered = await tier_segment(broker_store, broker_metadata, tip, log, {}, start_offset=0)
        # Fetch is a reader's: the fetch service reads the store and the manager as a broker.
        (answer,) = await reader.fetch([FetchPartition(tip, 0, 1 << 20)])
        assert answer.error is None
        assert bytes(answer.records) == log

        extra = segment_metadata(size=1000)
        with pytest.raises(PermissionDeniedError) as copy:
            await reader_store.copy_log_segment_data(extra, synthetic_files(os.urandom(1000)))
        assert copy.value.metadata == {"method": f"{STORE}/CopyLogSegmentData", "role": "reader"}
        assert str(copy.value) == (
            f"role reader (a bearer token) may not call {STORE}/CopyLogSegmentData"
        )
        with pytest.raises(PermissionDeniedError) as delete:
            await reader_store.delete_log_segment_data(tiered.metadata)
        assert delete.value.metadata["method"] == f"{STORE}/DeleteLogSegmentData"
        with pytest.raises(PermissionDeniedError) as mark:
            await remover.mark_partitions_for_deletion([tip])
        assert mark.value.metadata == {
            "method": "/remotelog.api.remover.v1.PartitionRemoverService/MarkPartitionsForDeletion",
            "role": "reader",
        }
        assert mark.value.grpc_code.name == "PERMISSION_DENIED"
        # Nothing was deleted: the segment still reads back whole.
        fetched = b"".join([c async for c in broker_store.fetch_log_segment(tiered.metadata, 0)])
        assert fetched == log
    finally:
        for client in (broker_store, reader_store, broker_metadata, reader, remover):
            await client.close()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert not any(token in logged for token in TOKENS.values())


async def test_spark_reads_with_a_readers_token_and_not_without(secured, spark, tmp_path):
    store = secured.client(SegmentStoreClient, "store", "broker")
    metadata = secured.client(MetadataClient, "metadata", "broker")
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    tip = dataclasses.replace(new_partition(), topic=topic)
    try:
        await tier_segment(store, metadata, tip, batch(0, 10), {}, start_offset=0)
    finally:
        await store.close()
        await metadata.close()
    token = tmp_path / "reader.token"
    token.write_text(TOKENS["reader"])

    def offsets(**options):
        reader = (
            spark.read.format("remotelog")
            .option("remotelog.fetch.address", f"127.0.0.1:{secured.ports['fetch']}")
            .option("remotelog.metadata.address", f"127.0.0.1:{secured.ports['metadata']}")
            .option("subscribe", topic)
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        return [row.offset for row in reader.load().orderBy("offset").collect()]

    read = await asyncio.to_thread(offsets, **{"remotelog.auth.token.file": str(token)})
    assert read == list(range(10))
    with pytest.raises(Exception, match="shows no bearer token"):
        await asyncio.to_thread(offsets)


@pytest.mark.parametrize("options", ["wrong", "none"])
async def test_a_call_without_a_known_token_is_unauthenticated(secured, options):
    chosen = (
        dataclasses.replace(CLIENT_OPTIONS, bearer_token="not-a-token")
        if options == "wrong"
        else CLIENT_OPTIONS
    )
    client = MetadataClient(f"127.0.0.1:{secured.ports['metadata']}", options=chosen)
    try:
        with pytest.raises(UnauthenticatedError) as refused:
            await client.list_remote_partitions()
        assert refused.value.grpc_code.name == "UNAUTHENTICATED"
    finally:
        await client.close()


async def test_an_operator_removes_and_a_reader_may_not_ask_how_it_goes(secured):
    operator = secured.client(PartitionRemoverClient, "remover", "operator")
    reader = secured.client(PartitionRemoverClient, "remover", "reader")
    try:
        tip = new_partition("removed")
        await operator.mark_partitions_for_deletion([tip])
        status = await operator.deletion_status(tip)
        assert status.topic_id_partition == tip
        with pytest.raises(PermissionDeniedError):
            await reader.deletion_status(tip)
    finally:
        await operator.close()
        await reader.close()


async def test_an_operator_recovers_segments_and_a_reader_may_not(secured):
    operator = secured.client(MetadataClient, "metadata", "operator")
    reader = secured.client(MetadataClient, "metadata", "reader")
    try:
        segment = dataclasses.replace(
            segment_metadata(topic="recovered"), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        )
        tip = segment.topic_id_partition
        with pytest.raises(PermissionDeniedError):
            await reader.recover_remote_log_segments(tip, [segment], recovery="a reader")
        # An operator may call it; the manager, calling the store as a broker, finds no
        # copy of this made-up segment and writes nothing.
        with pytest.raises(InvalidArgumentError, match="holds no manifest of it"):
            await operator.recover_remote_log_segments(tip, [segment], recovery="an operator")
        assert [s async for s in reader.list_remote_log_segments(tip)] == []
    finally:
        await operator.close()
        await reader.close()


@pytest.mark.parametrize(
    ("mapping", "allowed"), [("broker-1=broker", True), ("broker-1=reader", False)]
)
async def test_a_client_certificate_gives_its_role(tmp_path, s3_endpoint, mapping, allowed):
    certificates = make_certificates(tmp_path)  # the client certificate's name is broker-1
    running = await start_store(
        "filesystem",
        tmp_path,
        s3_endpoint,
        new_bucket(s3_endpoint),
        **server_tls_settings(certificates),
        **{"authorization.enabled": "true", "authorization.certificate.roles": mapping},
    )
    client = SegmentStoreClient(
        f"localhost:{running.service.port}",
        options=ClientOptions(
            timeout_s=20,
            tls_root_certs_file=str(certificates.ca),
            tls_cert_file=str(certificates.client_cert),
            tls_key_file=str(certificates.client_key),
        ),
    )
    try:
        log = os.urandom(5_000)
        metadata = segment_metadata(size=len(log))
        if allowed:
            await client.copy_log_segment_data(metadata, synthetic_files(log))
            assert b"".join([c async for c in client.fetch_log_segment(metadata, 0)]) == log
        else:
            with pytest.raises(PermissionDeniedError) as refused:
                await client.copy_log_segment_data(metadata, synthetic_files(log))
            assert "role reader (certificate broker-1)" in str(refused.value)
    finally:
        await client.close()
        await running.stop()


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({}, "authorization.enabled: no caller could have a role"),
        (
            {"authorization.tokens.file": "{tmp}/tokens"},
            "authorization.tokens.file: {tmp}/tokens:2: expected '<role> <token>'",
        ),
        (
            {"authorization.certificate.roles": "spark=admin"},
            "authorization.certificate.roles: 'admin' is not a role",
        ),
        (
            {"authorization.certificate.roles": "spark=reader"},
            "authorization.certificate.roles: needs tls.client.ca.file",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start_naming_the_key(
    tmp_path, properties, message
):
    (tmp_path / "tokens").write_text("reader abc\nadmin def\n")
    properties = {k: v.format(tmp=tmp_path) for k, v in properties.items()}
    config = load_properties(
        SegmentStoreConfig,
        tmp_path / "store.properties",
        {"authorization.enabled": "true", **properties},
    )
    with pytest.raises(OSError, match=r"^authorization\.") as refused:
        Policy.of(config)
    assert str(refused.value).startswith(message.format(tmp=tmp_path))
