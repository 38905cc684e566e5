"""`remotelog dev`: the broker and five services up and SERVING, then stopped by pid."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.kafka_admin import create_topic, produce_random
from support.topics import read_to_end

from remotelog.core.version import __version__
from remotelog.dev.kafka_broker import kafka_libs, kafka_version
from remotelog.dev.stack import SERVICES

READY = "Ctrl-C stops every service"
SEGMENT_BYTES = 1024 * 1024  # Kafka's floor since 4.1


def table_rows(lines: list[str]) -> dict[str, dict[str, str]]:
    """A table of `format_table` by its first column, cells cut where the rule's dashes are."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[1])]
    headers = [lines[0][a:b].strip() for a, b in spans]
    rows = {}
    for line in lines[2:]:
        if not line.strip():
            break
        cells = [
            line[a : (b if i < len(spans) - 1 else None)].strip() for i, (a, b) in enumerate(spans)
        ]
        rows[cells[0]] = dict(zip(headers[1:], cells[1:], strict=True))
    return rows


def start_dev(
    data_dir: Path, broker: str = "kafka", *flags: str
) -> tuple[subprocess.Popen[str], dict[str, dict[str, str]]]:
    """`remotelog dev` running, and its table by service: what runs, address, pid, files."""
    command = ["dev", "--data-dir", str(data_dir), "--broker", broker, *flags]
    process = subprocess.Popen(
        [sys.executable, "-m", "remotelog.cli.main", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if READY in line:
            break
    else:
        raise AssertionError(f"dev exited before it was ready: {process.stderr.read()}")
    assert lines[0].split()[:3] == ["service", "runs", "address"]
    rows = {
        name: {
            "runs": row["runs"],
            "address": row["address"],
            "pid": row["pid"],
            "config": row["config file"],
            "log": row["log file"],
        }
        for name, row in table_rows(lines).items()
    }
    return process, rows


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service="")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def stop_dev(process: subprocess.Popen[str], rows: dict[str, dict[str, str]]) -> None:
    """After a failed test: stop dev as a user does, and by pid whatever it left."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    for row in rows.values():
        # Only a process that is still this stack's: a pid may since have been reused.
        mark = row["config"] if row["config"] != "-" else row["address"]
        with contextlib.suppress(OSError):
            if mark in Path(f"/proc/{row['pid']}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(row["pid"]), signal.SIGKILL)


def wait_gone(pids: list[int], timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_dev_serves_every_service_and_sigterm_stops_them_all(tmp_path, broker):
    data_dir = tmp_path / "stack"
    process, rows = start_dev(data_dir, broker)
    try:
        assert list(rows) == ["kafka", *SERVICES]
        assert (
            rows["kafka"]["runs"]
            == {
                "kafka": f"Apache Kafka {kafka_version(kafka_libs())}, plugin mode",
                "tansu": "Tansu 0.6.0",
            }[broker]
        )
        assert {rows[service]["runs"] for service in SERVICES} == {f"remotelog {__version__}"}
        for service in SERVICES:
            row = rows[service]
            assert health(row["address"]) == health_pb2.HealthCheckResponse.SERVING
            assert Path(row["config"]) == data_dir / "config" / f"{service}.properties"
            assert f"serving on {row['address']}" in Path(row["log"]).read_text()
        for service in ("copy-scheduler", "remote-fetch", "partition-remover"):
            config = Path(rows[service]["config"]).read_text()
            assert f"segment.store.address={rows['segment-store']['address']}" in config
            assert f"metadata.manager.address={rows['metadata-manager']['address']}" in config
        store = Path(rows["segment-store"]["config"]).read_text()
        assert f"storage.root={data_dir / 'segments'}" in store
        pids = [int(row["pid"]) for row in rows.values()]
        assert all(alive(p) for p in pids)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert wait_gone(pids) == []
    finally:
        stop_dev(process, rows)


def test_dev_kafka_is_apache_kafka_answering_for_its_own_configuration(tmp_path):
    data_dir = tmp_path / "stack"
    process, rows = start_dev(data_dir, "kafka")
    try:
        kafka = rows["kafka"]
        assert Path(kafka["config"]) == data_dir / "kafka" / "server.properties"
        admin = AdminClient({"bootstrap.servers": kafka["address"]})
        (broker_id,) = admin.list_topics(timeout=10).brokers
        resource = ConfigResource("BROKER", str(broker_id))
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        # Kafka's own defaults, as only Apache Kafka answers them.
        assert configs["log.retention.hours"].value == "168"
        assert configs["process.roles"].value == "broker,controller"
        # The metadata manager created its topic on this broker.
        assert "__remote_log_metadata" in admin.list_topics(timeout=10).topics
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert wait_gone([int(row["pid"]) for row in rows.values()]) == []
    finally:
        stop_dev(process, rows)


def test_dev_reports_a_dead_child_and_stops_the_rest(tmp_path):
    process, rows = start_dev(tmp_path / "stack")
    try:
        pids = [int(row["pid"]) for row in rows.values()]
        os.kill(int(rows["remote-fetch"]["pid"]), signal.SIGKILL)
        assert process.wait(timeout=60) == 1
        stderr = process.stderr.read()
        assert "remote-fetch exited with signal 9" in stderr
        assert "remotelog remote-fetch serving on" in stderr  # the tail of its log
        assert wait_gone(pids) == []
    finally:
        stop_dev(process, rows)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--base-port", "80"], "--base-port 80: not in 1024..65530"),
        (["--redis", "http://localhost"], "--redis 'http://localhost': not a redis://"),
        (["--base-port", "x"], "argument --base-port: invalid int value: 'x'"),
        (["--broker", "redpanda"], "argument --broker: invalid choice: 'redpanda'"),
        (["--mode", "inline"], "argument --mode: invalid choice: 'inline'"),
        (["--broker", "tansu", "--mode", "plugin"], "--mode plugin: Apache Kafka only"),
    ],
)
def test_bad_dev_flags_are_one_line_naming_the_flag(flags, message):
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "dev", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_data_dir_in_use_is_refused(tmp_path):
    (tmp_path / "left-over").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "dev", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"remotelog: dev: --data-dir {tmp_path}: not an empty directory\n"


def tiered_and_read_back(data_dir: Path, bootstrap: str, topic: str, **config: str) -> None:
    """A topic of 1 MiB segments, 3 MiB produced: its first segment tiered into the dev
    store and gone from Kafka's disk, and every record read back from offset 0."""
    settings = {"segment.bytes": str(SEGMENT_BYTES), "local.retention.ms": "1000", **config}
    create_topic(bootstrap, topic, config=settings)
    values = produce_random(bootstrap, topic, 3 * 1024, 1)[0]
    first_local = data_dir / "kafka" / "data" / f"{topic}-0" / f"{0:020d}.log"
    segments = data_dir / "segments"

    def tiered() -> bool:
        return any(segments.glob(f"{topic}-*/0/{0:020d}-*.log"))

    wait_for(tiered, f"{topic}'s first segment in {segments}")
    if config.get("remote.storage.enable") == "true":
        # Kafka frees what is tiered by local.retention.ms, and serves it from the tier.
        wait_for(lambda: not first_local.exists(), f"{first_local} deleted")
    messages = read_to_end(bootstrap, topic)
    assert messages[0].offset() == 0
    assert [m.value() for m in messages] == values


def wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def test_dev_tiers_a_topic_created_with_remote_storage_enable(tmp_path):
    data_dir = tmp_path / "stack"
    process, rows = start_dev(data_dir)
    try:
        bootstrap = rows["kafka"]["address"]
        tiered_and_read_back(data_dir, bootstrap, "tiered", **{"remote.storage.enable": "true"})
        # Kafka's own answer: the topic tiers.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource("TOPIC", "tiered")
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["remote.storage.enable"].value == "true"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        stop_dev(process, rows)


def test_dev_sidecar_mode_tiers_beside_a_kafka_without_remote_storage(tmp_path):
    data_dir = tmp_path / "stack"
    process, rows = start_dev(data_dir, "kafka", "--mode", "sidecar")
    try:
        assert rows["kafka"]["runs"] == f"Apache Kafka {kafka_version(kafka_libs())}, sidecar mode"
        scheduler = Path(rows["copy-scheduler"]["config"]).read_text()
        assert "remote.log.manager.discovery.enabled=true" in scheduler
        assert f"partition.remover.address={rows['partition-remover']['address']}" in scheduler
        assert "remote.log.manager.local.retention.enabled" not in scheduler  # Kafka's files
        bootstrap = rows["kafka"]["address"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        (broker_id,) = admin.list_topics(timeout=10).brokers
        resource = ConfigResource("BROKER", str(broker_id))
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["remote.log.storage.system.enable"].value == "false"
        tiered_and_read_back(data_dir, bootstrap, "found")
        # The broker owns its disk: the sidecar copied, and deleted nothing.
        assert (data_dir / "kafka" / "data" / "found-0" / f"{0:020d}.log").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        stop_dev(process, rows)
