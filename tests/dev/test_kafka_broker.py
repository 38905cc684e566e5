"""The Apache Kafka broker the tests, `remotelog dev` and the demo run: started from
`make setup`'s jars, restarted from its own log dir, failing with the end of its log."""

import base64
import os
import socket
import subprocess
import sys

import pytest
from support.topics import broker_records, produce

from remotelog.dev.broker import BrokerError
from remotelog.dev.kafka_broker import LIBS_ENV, KafkaBroker, random_cluster_id


def test_cluster_ids_are_random_uuids_no_command_line_mistakes_for_a_flag():
    ids = [random_cluster_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert not any(found.startswith("-") for found in ids)
    assert {len(base64.urlsafe_b64decode(found + "==")) for found in ids} == {16}


def test_a_killed_broker_restarts_from_its_log_dir_with_what_it_acknowledged(tmp_path):
    broker = KafkaBroker(tmp_path / "kafka").start()
    try:
        produce(broker.bootstrap_servers, "kept", 50)
        before = broker_records(broker.bootstrap_servers, "kept")
        address, pid = broker.bootstrap_servers, broker.pid
        broker.kill()
        assert broker.pid is None
        broker.start()
        assert (broker.bootstrap_servers, broker.pid != pid) == (address, True)
        assert broker_records(broker.bootstrap_servers, "kept") == before
        assert [r[0] for r in before] == list(range(50))
    finally:
        broker.stop()


def test_a_configuration_kafka_refuses_is_reported_with_kafkas_reason(tmp_path):
    # Below Kafka 4's minimum segment size: refused before anything starts.
    broker = KafkaBroker(tmp_path / "kafka", properties={"log.segment.bytes": "1000"})
    with pytest.raises(BrokerError, match=r"formatting .* failed") as failed:
        broker.start()
    assert "Invalid value 1000 for configuration log.segment.bytes" in str(failed.value)
    assert broker.pid is None


def test_a_broker_that_dies_at_start_raises_with_the_end_of_its_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = KafkaBroker(tmp_path / "kafka", port=taken.getsockname()[1])
        with pytest.raises(BrokerError, match="kafka exited with status") as failed:
            broker.start(timeout_s=60)
    assert "Address already in use" in str(failed.value)
    assert f"the end of {tmp_path / 'kafka' / 'broker.log'}" in str(failed.value)
    assert broker.pid is None


def test_missing_jars_are_one_line_saying_how_to_get_them(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "dev", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, LIBS_ENV: str(tmp_path / "no-jars")},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"remotelog: dev: Apache Kafka's jars are not in {LIBS_ENV}={tmp_path / 'no-jars'}: "
        f"run `make setup` in the remotelog checkout, or set {LIBS_ENV} to a folder of "
        "kafka_2.13 and its dependencies"
    ]
