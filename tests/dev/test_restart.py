"""A dev stack's service killed as in a crash and started again where it was."""

from pathlib import Path

import grpc
import pytest
from confluent_kafka.admin import AdminClient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.dev.stack import DevConfig, DevStack, DevStackError


# The store leaves its short-circuit socket behind when killed: the restart must bind anew.
@pytest.mark.parametrize("service", ["remote-fetch", "segment-store"])
def test_a_crashed_service_comes_back_on_the_same_address(tmp_path: Path, service: str) -> None:
    with DevStack(DevConfig(tmp_path / "data")) as stack:
        before = {c.name: (c.address, c.pid) for c in stack.children}
        restarted = stack.restart(service, crash=True)
        address, pid = before[service]
        assert restarted.address == address
        assert restarted.pid != pid
        assert {c.name: (c.address, c.pid) for c in stack.children} == {
            **before,
            service: (address, restarted.pid),
        }
        with grpc.insecure_channel(address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        log = restarted.log.read_text()
        assert log.count(f"remotelog {service} serving on {address}") == 2
        assert stack.dead() is None
        with pytest.raises(DevStackError, match="zookeeper: not a service of this stack"):
            stack.restart("zookeeper")


def test_a_crashed_broker_comes_back_on_the_same_address(tmp_path: Path) -> None:
    with DevStack(DevConfig(tmp_path / "data")) as stack:
        (kafka,) = (c for c in stack.children if c.name == "kafka")
        address, pid = kafka.address, kafka.pid
        restarted = stack.restart("kafka", crash=True)
        assert (restarted.address, restarted.name) == (address, "kafka")
        assert restarted.pid not in (None, pid)
        assert stack.broker.bootstrap_servers == address
        assert stack.dead() is None
        # It answers metadata where it was.
        admin = AdminClient({"bootstrap.servers": address})
        assert admin.list_topics(timeout=10).brokers
