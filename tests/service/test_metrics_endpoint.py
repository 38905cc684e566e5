"""A service's Prometheus endpoint (`metrics.listen.address`): a scrape returns its
metrics under Kafka's names, with values that move as it works; `remotelog stats`
prints them as a table."""

import os
import signal
import socket
import subprocess
import urllib.request

import pytest
from segmentstore.segments import segment_metadata, synthetic_files
from support.cli import run_remotelog
from support.serving import serving_line

from remotelog.client import ClientOptions, SegmentStoreClient
from remotelog.rpc.serve import serve_command

COPIED = "remotelog_segment_store_copy_bytes_total"


def scrape(address: str) -> dict[str, float]:
    """name{labels} -> value of every sample, as Prometheus reads it."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def copied(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith(COPIED) and 'topic="orders"' in k)


@pytest.fixture
def served_store(tmp_path):
    config = tmp_path / "store.properties"
    config.write_text(
        "listen.address=127.0.0.1:0\n"
        "metrics.listen.address=127.0.0.1:0\n"
        f"storage.root={tmp_path / 'segments'}\n"
    )
    process = subprocess.Popen(
        serve_command("segment-store", config), stderr=subprocess.PIPE, text=True
    )
    try:
        address = serving_line(process.stderr, "segment-store").split(" serving on ")[1].strip()
        # The next line says where its metrics are.
        metrics = process.stderr.readline()
        assert metrics.startswith("remotelog segment-store metrics on "), metrics
        yield address, metrics.split(" metrics on ")[1].strip()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        process.stderr.close()


async def test_a_scrape_shows_the_copies_as_they_happen(served_store):
    address, metrics = served_store
    before = scrape(metrics)
    client = SegmentStoreClient(address, options=ClientOptions(timeout_s=10))
    try:
        sizes = []
        for _ in range(2):
            log = os.urandom(7_000)
            await client.copy_log_segment_data(
                segment_metadata(size=len(log)), synthetic_files(log)
            )
            sizes.append(copied(scrape(metrics)))
    finally:
        await client.close()
    assert copied(before) == 0
    # Each copy moves the counter by its segment's bytes (log and indexes).
    assert sizes[0] > 7_000
    assert sizes[1] - sizes[0] == sizes[0]

    shown = run_remotelog("stats", metrics, "--match", "copy")
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["ADDRESS", "SERVICE", "METRIC", "LABELS", "VALUE"]
    by_metric = {row.split()[2]: row.split() for row in rows}
    assert by_metric[COPIED] == [
        metrics,
        "remotelog-segment-store",
        COPIED,
        "topic=orders",
        f"{sizes[1]:g}",
    ]
    assert by_metric["remotelog_segment_store_copy_requests_total"][-1] == "2"


def test_stats_names_what_it_could_not_read():
    unreachable = run_remotelog("stats", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("remotelog: stats: 127.0.0.1:1: no metrics (")
    bad = run_remotelog("stats", "not an address")
    assert bad.returncode == 2
    assert bad.stderr == "remotelog: stats: address 'not an address' is not host:port\n"


def test_a_metrics_address_in_use_stops_the_service_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "store.properties"
        config.write_text(
            f"listen.address=127.0.0.1:0\nmetrics.listen.address=127.0.0.1:{port}\n"
            f"storage.root={tmp_path / 'segments'}\n"
        )
        served = run_remotelog("serve", "segment-store", "--config", str(config))
    assert served.returncode == 2
    last = served.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"remotelog: serve segment-store: metrics.listen.address: cannot listen on "
        f"'127.0.0.1:{port}'"
    )
