"""`remotelog serve segment-store`: health, graceful stop; metrics and spans of the store."""

import json
import os
import signal
import socket
import subprocess
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.services import start_store
from support.serving import (
    serve_until_sigterm,
    serving_address,
    serving_line,
    sigterm_on_serving_line,
)
from support.telemetry import counter
from support.tls import make_certificates, server_tls_settings

from remotelog.client import ClientOptions, SegmentStoreClient
from remotelog.core import metrics as m
from remotelog.core.errors import RemoteResourceNotFoundError, ServiceUnavailableError
from remotelog.core.model import IndexType
from remotelog.rpc.serve import serve_command

from .segments import segment_metadata, synthetic_files

SERVICE = "remotelog.api.segmentstore.v1.SegmentStoreService"


async def test_copy_and_fetch_report_metrics_and_spans(telemetry, tmp_path, s3_endpoint):
    reader, spans = telemetry
    running = await start_store("filesystem", tmp_path, s3_endpoint)
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    try:
        metadata = segment_metadata(size=5000, topic=topic)
        await running.client.copy_log_segment_data(metadata, synthetic_files(os.urandom(5000)))
        fetched = b"".join(
            [c async for c in running.client.fetch_log_segment(metadata, 1000, 1999)]
        )
        assert len(fetched) == 1000
        bad = segment_metadata(size=10, topic=topic)  # never copied
        with pytest.raises(Exception):  # noqa: B017, PT011 - NOT_FOUND, checked by the contract
            [c async for c in running.client.fetch_log_segment(bad, 0)]
    finally:
        await running.stop()
    indexes = 16 + 24 + 4 + len(b"0\n1\n0 0\n")
    assert counter(reader, m.STORE_COPY_BYTES.name, topic) == 5000 + indexes
    assert counter(reader, m.STORE_COPY_REQUESTS.name, topic) == 1
    assert counter(reader, m.STORE_COPY_ERRORS.name, topic) == 0
    assert counter(reader, m.STORE_FETCH_BYTES.name, topic) == 1000
    assert counter(reader, m.STORE_FETCH_REQUESTS.name, topic) == 2
    assert counter(reader, m.STORE_FETCH_ERRORS.name, topic) == 1
    names = [s.name for s in spans.get_finished_spans() if s.attributes.get("topic") == topic]
    assert "SegmentStore.copy_log_segment_data" in names
    assert "SegmentStore.fetch_log_segment" in names


async def test_a_followers_aux_state_reads_are_counted(telemetry, tmp_path, s3_endpoint):
    """BuildRemoteLogAuxState{Requests,Errors}PerSec: a follower reads a segment's
    leader-epoch checkpoint, then its producer snapshot."""
    reader, _ = telemetry
    running = await start_store("filesystem", tmp_path, s3_endpoint)
    topic = f"aux-{uuid.uuid4().hex[:8]}"
    try:
        metadata = segment_metadata(size=500, topic=topic)
        await running.client.copy_log_segment_data(metadata, synthetic_files(os.urandom(500)))
        for index in (IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT, IndexType.OFFSET):
            assert await running.client.fetch_index(metadata, index)
        missing = segment_metadata(size=10, topic=topic)  # never copied
        with pytest.raises(RemoteResourceNotFoundError):
            await running.client.fetch_index(missing, IndexType.LEADER_EPOCH)
    finally:
        await running.stop()
    assert counter(reader, m.AUX_STATE_REQUESTS.name, topic) == 2
    assert counter(reader, m.AUX_STATE_ERRORS.name, topic) == 1


def store_properties(tmp_path, listen_address):
    config = tmp_path / "store.properties"
    config.write_text(f"listen.address={listen_address}\nstorage.root={tmp_path / 'data'}\n")
    return config


@pytest.mark.parametrize("listen_address", ["127.0.0.1:0", "unix:{tmp}/store.sock"])
def test_serve_reports_health_and_stops_on_sigterm(tmp_path, listen_address):
    listen_address = listen_address.format(tmp=tmp_path)
    config = store_properties(tmp_path, listen_address)
    status, code, printed = serve_until_sigterm("segment-store", config, SERVICE)
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed
    assert not (tmp_path / "store.sock").exists()  # a unix socket is removed: a restart binds


def test_it_logs_its_effective_configuration_first_secrets_hidden(tmp_path):
    config = store_properties(tmp_path, "127.0.0.1:0")
    with config.open("a") as properties:
        properties.write("log.format=json\nstorage.aws.secret.access.key=hunter2\n")
    process = subprocess.Popen(
        serve_command("segment-store", config), stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        first = json.loads(process.stderr.readline())
        serving_line(process.stderr, "segment-store")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    assert (first["level"], first["service"], first["logger"]) == (
        "INFO",
        "segment-store",
        "remotelog.cli",
    )
    message = first["message"]
    assert message.startswith("starting segment-store ")
    assert f"storage.root={tmp_path / 'data'}" in message.split()
    assert "storage.aws.secret.access.key=[hidden]" in message.split()
    assert "hunter2" not in message


def test_a_ready_file_says_where_it_serves_until_it_stops(tmp_path):
    config = store_properties(tmp_path, "127.0.0.1:0")
    ready = tmp_path / "run" / "segment-store.json"
    ready.parent.mkdir()
    command = [*serve_command("segment-store", config), "--ready-file", str(ready)]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 30
        while not ready.exists():
            assert process.poll() is None
            assert time.monotonic() < give_up
            time.sleep(0.02)
        written = json.loads(ready.read_text())
        assert written["service"] == "segment-store"
        assert written["pid"] == process.pid
        host, port = written["address"].rsplit(":", 1)
        assert host == "127.0.0.1"
        assert int(port) > 0
        with grpc.insecure_channel(written["address"]) as channel:
            request = health_pb2.HealthCheckRequest(service=SERVICE)
            status = health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert list(ready.parent.iterdir()) == []  # removed, and no temp file left
    finally:
        process.kill()


def test_sigterm_the_moment_it_serves_is_a_clean_stop(tmp_path):
    # As an orchestrator may stop a pod it has just started.
    config = store_properties(tmp_path, f"unix:{tmp_path}/store.sock")
    code, printed = sigterm_on_serving_line("segment-store", config)
    assert code == 0
    assert "remotelog segment-store shutting down" in printed
    assert not (tmp_path / "store.sock").exists()


def test_a_second_server_does_not_take_a_live_unix_socket(tmp_path):
    socket_path = tmp_path / "store.sock"
    config = store_properties(tmp_path, f"unix:{socket_path}")
    first = subprocess.Popen(
        serve_command("segment-store", config), stderr=subprocess.PIPE, text=True
    )
    try:
        assert first.stderr is not None
        assert serving_address(first.stderr, "segment-store") == f"unix:{socket_path}"
        second = subprocess.run(
            serve_command("segment-store", config), capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2
        # After its start-up line: the one line of the refusal, no traceback.
        assert second.stderr.strip().splitlines()[-1] == (
            f"remotelog: serve segment-store: listen.address: 'unix:{socket_path}'"
            " is in use by a running server"
        )
        assert "Traceback" not in second.stderr
        with grpc.insecure_channel(f"unix:{socket_path}") as channel:  # the first still answers
            request = health_pb2.HealthCheckRequest(service=SERVICE)
            status = health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    finally:
        first.kill()
        first.wait()


async def test_copy_and_fetch_over_a_unix_socket(tmp_path, s3_endpoint):
    socket_path = tmp_path / "store.sock"
    unix = {"listen.address": f"unix:{socket_path}"}
    running = await start_store("filesystem", tmp_path, s3_endpoint, **unix)
    client = SegmentStoreClient(f"unix:{socket_path}", options=ClientOptions(timeout_s=20))
    try:
        log = os.urandom(70_000)
        metadata = segment_metadata(size=len(log))
        await client.copy_log_segment_data(metadata, synthetic_files(log))
        fetched = b"".join([c async for c in client.fetch_log_segment(metadata, 100, 69_999)])
        assert fetched == log[100:]
    finally:
        await client.close()
        await running.stop()


async def test_copy_and_fetch_over_mutual_tls(tmp_path, s3_endpoint):
    certificates = make_certificates(tmp_path)
    running = await start_store(
        "filesystem", tmp_path, s3_endpoint, **server_tls_settings(certificates)
    )
    target = f"localhost:{running.service.port}"
    trusted = ClientOptions(
        timeout_s=20,
        tls_root_certs_file=str(certificates.ca),
        tls_cert_file=str(certificates.client_cert),
        tls_key_file=str(certificates.client_key),
    )
    client = SegmentStoreClient(target, options=trusted)
    # Trusts the server but shows no certificate of its own: refused.
    anonymous = SegmentStoreClient(
        target, options=ClientOptions(timeout_s=2, tls_root_certs_file=str(certificates.ca))
    )
    try:
        log = os.urandom(20_000)
        metadata = segment_metadata(size=len(log))
        await client.copy_log_segment_data(metadata, synthetic_files(log))
        assert b"".join([c async for c in client.fetch_log_segment(metadata, 0)]) == log
        with pytest.raises(ServiceUnavailableError):  # the handshake wants a certificate
            [c async for c in anonymous.fetch_log_segment(metadata, 0)]
    finally:
        await client.close()
        await anonymous.close()
        await running.stop()


@pytest.mark.parametrize(
    "listen_address",
    [pytest.param("busy", id="port-in-use"), "unix:/nonexistent-dir/x.sock", "256.1.1.1:0"],
)
def test_serve_refuses_an_address_it_cannot_bind_in_one_line(tmp_path, listen_address):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        if listen_address == "busy":
            listen_address = f"127.0.0.1:{busy.getsockname()[1]}"
        config = store_properties(tmp_path, listen_address)
        result = subprocess.run(
            serve_command("segment-store", config),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    assert result.returncode == 2
    # gRPC's own log line with the system's reason may come first; ours names the setting.
    assert result.stderr.strip().splitlines()[-1] == (
        f"remotelog: serve segment-store: listen.address: cannot listen on {listen_address!r}"
        " (address in use, or not host:port or unix:/path)"
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ("storage.backend=s3\n", "storage.s3.bucket.name: is required"),
        ("storage.backend=hdfs\n", "storage.backend"),
        ("key.prefix=../x/\n", "key.prefix"),
        (
            "storage.root={tmp}/a-file/segments\n",
            "storage.root: cannot create {tmp}/a-file/segments: Not a directory",
        ),
        (
            "tls.cert.file={tmp}/a-file\ntls.key.file={tmp}/server.key\n",
            "tls.key.file: cannot read {tmp}/server.key: No such file or directory",
        ),
        (
            "tls.cert.file={tmp}/a-file\ntls.key.file={tmp}/a-file\n",
            "tls.key.file: {tmp}/a-file holds no PEM private key",
        ),
    ],
)
def test_serve_refuses_bad_config_in_one_line(tmp_path, properties, message):
    (tmp_path / "a-file").write_text("not a directory, not a certificate")
    properties, message = properties.format(tmp=tmp_path), message.format(tmp=tmp_path)
    config = tmp_path / "bad.properties"
    config.write_text("listen.address=127.0.0.1:0\n" + properties)
    result = subprocess.run(
        serve_command("segment-store", config),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # the default storage.root is relative: not into the checkout
    )
    assert result.returncode == 2
    # Its start-up line (the configuration it read, once it could read it), then the
    # refusal: one line.
    *startup, refusal = result.stderr.strip().splitlines()
    assert len(startup) <= 1
    assert all("starting segment-store" in line for line in startup)
    assert refusal.startswith("remotelog: ")
    assert message in refusal
    assert "Traceback" not in result.stderr
