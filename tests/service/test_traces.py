"""One Fetch, one trace: the caller's span, remote fetch's server span and its read,
and the calls it makes to the metadata manager and the segment store (each a client
span in remote fetch, a server span in the called service), linked parent to child
through W3C trace context in the gRPC metadata. Spans say where a read was, never
what it read."""

import grpc
import pytest
import pytest_asyncio
from fetch.conftest import fetch_config
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from support.services import (
    CLIENT_OPTIONS,
    metadata_config,
    new_bucket,
    new_partition,
    start_metadata,
    start_store,
)
from support.tiering import tier_segment

from remotelog.client import FetchPartition, RemoteFetchClient
from remotelog.dev.broker import free_port
from remotelog.fetch.server import start_remote_fetch
from remotelog.kafka.records import Record, build_batch
from remotelog.protocol.tracing import client_tracing

FETCH = "/remotelog.api.fetch.v1.RemoteFetchService/Fetch"
METADATA = "/remotelog.api.metadata.v1.RemoteLogMetadataService/"
STORE = "/remotelog.api.segmentstore.v1.SegmentStoreService/"
MARKER = b"record-value-that-must-not-be-in-a-span"


@pytest_asyncio.fixture
async def services(telemetry, tmp_path, broker, s3_endpoint):
    """Store, metadata manager and remote fetch, started once tracing is installed."""
    store = await start_store("filesystem", tmp_path, s3_endpoint, new_bucket(s3_endpoint))
    metadata = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers))
    fetch = await start_remote_fetch(
        fetch_config(tmp_path, store.service.port, metadata.service.port)
    )
    try:
        yield store, metadata, fetch
    finally:
        await fetch.stop(1.0)
        await metadata.stop()
        await store.stop()


def ancestors(span, by_id) -> list:
    """The span's parents, nearest first, as far as they were recorded."""
    chain = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        chain.append(span)
    return chain


async def test_one_fetch_is_one_trace_across_three_services(services, telemetry):
    _, spans = telemetry
    store, metadata, fetch = services
    tip = new_partition("traced")
    records = [Record(i, 1_000 + i, f"k{i}".encode(), MARKER) for i in range(5)]
    log = build_batch(records)
    await tier_segment(store.client, metadata.client, tip, log, {}, start_offset=0)
    client = RemoteFetchClient(f"127.0.0.1:{fetch.port}", options=CLIENT_OPTIONS)
    try:
        with trace.get_tracer("test").start_as_current_span("consumer poll") as root:
            (answer,) = await client.fetch([FetchPartition(tip, 0, 1 << 20)])
        assert bytes(answer.records) == log
    finally:
        await client.close()
    trace_id = root.get_span_context().trace_id
    ours = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in ours}
    named = {(s.name, s.kind) for s in ours}

    # The caller's client span, and remote fetch's server span its child.
    (called,) = [s for s in ours if s.name == FETCH and s.kind is SpanKind.CLIENT]
    (served,) = [s for s in ours if s.name == FETCH and s.kind is SpanKind.SERVER]
    assert called.parent.span_id == root.get_span_context().span_id
    assert served.parent.span_id == called.context.span_id
    # The read, where it was and what it found: never the records.
    (read,) = [s for s in ours if s.name == "RemoteLogReader.read"]
    assert served in ancestors(read, by_id)
    assert dict(read.attributes) == {
        "topic": tip.topic,
        "partition": 0,
        "fetch_offset": 0,
        "records_bytes": len(log),
        "last_offset": 4,
    }
    # Each call remote fetch made: its client span under the read, the called
    # service's server span under that, in the same trace.
    downstream = [s for s in ours if s.kind is SpanKind.SERVER and s is not served]
    assert {s.name.rsplit("/", 1)[0] + "/" for s in downstream} == {METADATA, STORE}
    for span in downstream:
        parent = by_id[span.parent.span_id]
        assert (parent.name, parent.kind) == (span.name, SpanKind.CLIENT)
        assert read in ancestors(parent, by_id)
    assert (f"{STORE}FetchLogSegment", SpanKind.SERVER) in named
    for span in ours:
        for value in (span.attributes or {}).values():
            assert MARKER.decode() not in str(value)


async def test_a_client_stream_that_cannot_start_ends_its_span(telemetry):
    """A call that cannot start (its channel closed) ends its client span in error at
    once, rather than leaving it open for good."""
    _, spans = telemetry
    copy = f"{STORE}CopyLogSegmentData"
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}", interceptors=client_tracing())
    await channel.close()

    async def requests():
        yield b""

    with pytest.raises(grpc.aio.UsageError):
        await channel.stream_unary(copy)(requests())
    (span,) = [s for s in spans.get_finished_spans() if s.name == copy]
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.ERROR
    assert [e.attributes["exception.message"] for e in span.events] == ["Channel is closed."]
