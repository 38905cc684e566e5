"""The metadata manager and the partition remover on a secured Apache Kafka.

The services reach the broker through SASL_SSL (SCRAM-SHA-512, PLAIN) or mutual
TLS; the test reads what they wrote through the same broker's PLAINTEXT listener,
as Kafka's own tools would.
"""

import asyncio
import subprocess
import sys

import pytest
from support.kafka_security import WAYS_IN
from support.services import metadata_config, new_partition, started
from support.tls import make_certificates
from support.waiting import eventually

from remotelog.core.errors import InvalidArgumentError, MetadataTopicUnavailableError
from remotelog.metadata.server import start_metadata_manager
from remotelog.remover.server import start_partition_remover

from .conftest import RemoverStack, events_of, lifecycle, remover_config_beside
from .test_remover import expected_lifecycle, finished


@pytest.mark.parametrize("way_in", WAYS_IN)
async def test_metadata_manager_and_remover_work_through_each_secured_listener(
    tmp_path, secured_broker, s3_endpoint, way_in
):
    stack = RemoverStack(
        tmp_path,
        secured_broker.broker.bootstrap_servers,
        s3_endpoint,
        kafka_settings=secured_broker.settings(way_in),
    )
    async with started(stack):
        tip = new_partition("secured")
        tiered = await stack.tier(tip, 2)
        listed = await stack.segments(tip)
        assert [s.remote_log_segment_id for s in listed] == [
            s.remote_log_segment_id for s in tiered
        ]
        remover = await stack.start_remover()
        await remover.client.mark_partitions_for_deletion([tip])
        await eventually(lambda: finished(remover, tip))
        assert stack.objects_of(tip) == {}
        # Written through the secured listener, read back through the plain one.
        events = events_of(stack.bootstrap, tip)
        assert lifecycle(events) == expected_lifecycle(tiered)
        # The remover's consumer group committed its progress past the last event.
        await eventually(lambda: stack.committed(tip) > events[-1][0])


def wrong(settings: dict[str, str], **changes: str) -> dict[str, str]:
    return {**settings, **changes}


def misconfigured(secured_broker, tmp_path) -> list:
    """(what is wrong, settings, the key the error must name)."""
    other = tmp_path / "other-ca"
    other.mkdir()
    stranger = make_certificates(other)
    scram = secured_broker.settings("SASL_SSL/SCRAM-SHA-512")
    plain = secured_broker.settings("SASL_SSL/PLAIN")
    mtls = secured_broker.settings("SSL")
    return [
        ("wrong SCRAM password", wrong(scram, **{"sasl.password": "nope"}), "sasl.password"),
        (
            "wrong PLAIN password",
            wrong(plain, **{"sasl.jaas.config": plain["sasl.jaas.config"].replace("secret", "x")}),
            "sasl.password",
        ),
        (
            "untrusted broker",
            wrong(scram, **{"ssl.ca.location": str(stranger.ca)}),
            "ssl.ca.location",
        ),
        (
            "no client certificate",
            {k: v for k, v in mtls.items() if not k.startswith(("ssl.certificate", "ssl.key"))},
            "ssl.certificate.location",
        ),
        (
            "an unknown client certificate",
            wrong(
                mtls,
                **{
                    "ssl.certificate.location": str(stranger.client_cert),
                    "ssl.key.location": str(stranger.client_key),
                },
            ),
            "ssl.certificate.location",
        ),
        (
            "missing truststore",
            wrong(scram, **{"ssl.ca.location": str(tmp_path / "no-such-ca.pem")}),
            "ssl.ca.location",
        ),
    ]


async def test_bad_security_settings_fail_start_up_at_once_naming_the_key(
    tmp_path, secured_broker, s3_endpoint
):
    """Within the start-up deadline (20 s here), never a hang, and nothing written."""
    for why, settings, key in misconfigured(secured_broker, tmp_path):
        snapshots = tmp_path / why.replace(" ", "-")
        snapshots.mkdir()
        config = metadata_config(snapshots, "unused", **settings)
        with pytest.raises(InvalidArgumentError) as refused:
            await asyncio.wait_for(start_metadata_manager(config), 15)
        assert refused.value.field == key, (why, str(refused.value))
        assert not any(snapshots.rglob("*.snapshot")), why
        remover = remover_config_beside(snapshots, "unused", 1, 1, **settings)
        with pytest.raises(InvalidArgumentError) as refused:
            await asyncio.wait_for(start_partition_remover(remover), 15)
        assert refused.value.field == key, (why, str(refused.value))


async def test_an_unreachable_bootstrap_address_is_named_when_the_deadline_passes(tmp_path):
    config = metadata_config(
        tmp_path,
        "127.0.0.1:1",
        **{"remote.log.metadata.initialization.retry.max.timeout.ms": "2000"},
    )
    with pytest.raises(MetadataTopicUnavailableError) as refused:
        await asyncio.wait_for(start_metadata_manager(config), 15)
    message = str(refused.value)
    assert "bootstrap.servers=127.0.0.1:1 within 2000 ms" in message
    assert "Connection refused" in message


def test_serve_with_a_wrong_password_is_one_line_naming_the_key(tmp_path, secured_broker):
    settings = wrong(secured_broker.settings("SASL_SSL/SCRAM-SHA-512"), **{"sasl.password": "x"})
    config = metadata_config(tmp_path, "unused", **settings)
    path = tmp_path / "metadata.properties"  # what metadata_config wrote
    assert config.bootstrap_servers == settings["bootstrap.servers"]
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "serve", "metadata-manager", "--config", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("remotelog: serve metadata-manager: sasl.password: the broker at ")
    assert "refused user 'remotelog'" in last
    assert "Traceback" not in done.stderr
