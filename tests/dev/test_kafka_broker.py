"""The Apache Kafka broker the tests, `remotelog dev` and the demo run: started from
`make setup`'s jars, restarted from its own log dir, failing with the end of its log."""

import base64
import os
import socket
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient
from support.kafka_cluster import KafkaNode
from support.topics import broker_records, produce

from remotelog.dev import kafka_broker
from remotelog.dev.broker import BrokerError, free_port, free_ports
from remotelog.dev.kafka_broker import LIBS_ENV, OPTS_ENV, KafkaBroker, random_cluster_id


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


def test_kafka_opts_reach_the_brokers_jvm(tmp_path, monkeypatch):
    """As Kafka's own scripts take it: here an option the JVM refuses, so the format fails."""
    monkeypatch.setenv(OPTS_ENV, "-Dremotelog.test=1 -XX:+NoSuchOption")
    broker = KafkaBroker(tmp_path / "kafka")
    with pytest.raises(BrokerError, match=r"formatting .* failed") as failed:
        broker.start()
    assert "Unrecognized VM option 'NoSuchOption'" in str(failed.value)
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
        "set it to a folder of kafka_2.13 and its dependencies, or unset it to fetch them"
    ]


def test_a_second_node_is_a_broker_of_the_first_ones_controller(tmp_path):
    first = KafkaBroker(tmp_path / "1", controller_port=9093, cluster_id="abc")
    second = KafkaNode(tmp_path / "2", port=9192, node_id=2, quorum=first)
    properties = second._server_properties()
    assert (properties["process.roles"], properties["node.id"]) == ("broker", "2")
    assert properties["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert properties["listeners"] == "PLAINTEXT://127.0.0.1:9192"
    assert "CONTROLLER" not in properties["listeners"]
    own = first._server_properties()
    assert own["process.roles"] == "broker,controller"
    assert own["listeners"].endswith(",CONTROLLER://127.0.0.1:9093")


def test_a_broker_is_wiped_only_when_stopped_and_then_formats_into_its_cluster(tmp_path):
    broker = KafkaNode(tmp_path / "kafka").start()
    try:
        cluster = broker.cluster_id
        assert cluster
        with pytest.raises(BrokerError, match="stop the broker"):
            broker.wipe()
        produce(broker.bootstrap_servers, "gone", 5)
        broker.stop()
        broker.wipe()
        assert not broker.data_dir.exists()
        broker.start()
        assert broker.cluster_id == cluster
        meta = (broker.data_dir / "meta.properties").read_text()
        assert f"cluster.id={cluster}" in meta
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert "gone" not in admin.list_topics(timeout=30).topics
    finally:
        broker.stop()


def test_free_ports_are_distinct_even_when_asked_for_together():
    """Kafka refuses two listeners on one port: a broker's ports are asked for at once,
    each held until all are bound (one at a time, the OS may return a port twice)."""
    ports = free_ports(64)
    assert len(set(ports)) == 64


def test_a_brokers_ports_never_take_its_jmx_port(tmp_path, monkeypatch):
    """The caller picks the JMX port and lets it go; the OS may offer it again for a
    listener, and Kafka would then fail to start on a port in use."""
    jmx = free_port()
    offers = iter([[jmx, 40001], [40002, 40003]])  # the first offer takes the JMX port
    monkeypatch.setattr(kafka_broker, "free_ports", lambda count, host: next(offers))
    broker = KafkaNode(tmp_path, jmx_port=jmx)
    broker._choose_ports()
    assert (broker.port, broker.controller_port) == (40002, 40003)
