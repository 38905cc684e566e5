"""`remotelog dev`: the broker and five services up and SERVING, then stopped by pid."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.dev.stack import SERVICES

READY = "Ctrl-C stops every service"


def start_dev(data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, dict[str, str]]]:
    """`remotelog dev` running, and its table by service: address, pid, files."""
    process = subprocess.Popen(
        [sys.executable, "-m", "remotelog.cli.main", "dev", "--data-dir", str(data_dir)],
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
    headers = lines[0].split()
    assert headers == ["service", "address", "pid", "config", "file", "log", "file"]
    rows = {}
    for line in lines[2:]:
        if not line.strip():
            break
        name, address, pid, config, log = line.split()
        rows[name] = {"address": address, "pid": pid, "config": config, "log": log}
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


def test_dev_serves_every_service_and_sigterm_stops_them_all(tmp_path):
    data_dir = tmp_path / "stack"
    process, rows = start_dev(data_dir)
    try:
        assert list(rows) == ["kafka", *SERVICES]
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
