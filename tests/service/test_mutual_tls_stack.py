"""A whole stack with mutual TLS: every service serves TLS and asks for a client
certificate, and calls the others with its own. The copy scheduler tiers a broker's
partition, the remote fetch service reads it back; a client without a certificate,
with one from another CA, or speaking plaintext is refused, cleanly."""

import dataclasses
from pathlib import Path

import pytest
import pytest_asyncio
from fetch.conftest import fetch_config
from remover.conftest import remover_config_beside
from scheduler.conftest import Broker, scheduler_config
from support.services import (
    load_properties,
    metadata_config,
    new_bucket,
    new_partition,
    start_metadata,
    start_store,
)
from support.tiering import batch, tier_segment
from support.tls import make_certificates, server_tls_settings
from support.waiting import eventually

from remotelog.cli.scrub import run_scrub
from remotelog.client import (
    ClientOptions,
    CopySchedulerClient,
    FetchPartition,
    MetadataClient,
    PartitionRemoverClient,
    RemoteFetchClient,
    SegmentStoreClient,
)
from remotelog.client.service_options import service_client_options
from remotelog.core.errors import ServiceUnavailableError
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.server import start_remote_fetch
from remotelog.remover.config import ScrubConfig
from remotelog.remover.server import start_partition_remover
from remotelog.scheduler.server import start_copy_scheduler


def client_options(certificates, timeout_s: float = 20) -> ClientOptions:
    return ClientOptions(
        timeout_s=timeout_s,
        tls_root_certs_file=str(certificates.ca),
        tls_cert_file=str(certificates.client_cert),
        tls_key_file=str(certificates.client_key),
    )


@pytest_asyncio.fixture
async def tls_stack(tmp_path, broker, s3_endpoint):
    (tmp_path / "certificates").mkdir()
    certificates = make_certificates(tmp_path / "certificates")
    serve = server_tls_settings(certificates)
    call = {
        "client.tls.ca.file": str(certificates.ca),
        "client.tls.cert.file": str(certificates.client_cert),
        "client.tls.key.file": str(certificates.client_key),
    }
    store = await start_store("filesystem", tmp_path, s3_endpoint, new_bucket(s3_endpoint), **serve)
    metadata = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers, **serve))
    ports = (store.service.port, metadata.service.port)
    services = {
        "scheduler": await start_copy_scheduler(
            scheduler_config(tmp_path, *ports, "scheduler", **serve, **call)
        ),
        "fetch": await start_remote_fetch(fetch_config(tmp_path, *ports, **serve, **call)),
    }

    remover_config = remover_config_beside(
        tmp_path, broker.bootstrap_servers, *ports, **serve, **call
    )
    services["remover"] = await start_partition_remover(remover_config)
    try:
        yield (
            certificates,
            {
                "store": ports[0],
                "metadata": ports[1],
                **{name: s.port for name, s in services.items()},
            },
        )
    finally:
        for service in services.values():
            await service.stop(1.0)
        await metadata.stop()
        await store.stop()


async def test_the_stack_tiers_and_fetches_over_mutual_tls(tls_stack, tmp_path):
    certificates, ports = tls_stack
    options = client_options(certificates)
    tip = new_partition("mtls")
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2)
    scheduler = CopySchedulerClient(f"localhost:{ports['scheduler']}", options=options)
    reader = RemoteFetchClient(f"localhost:{ports['fetch']}", options=options)
    remover = PartitionRemoverClient(f"localhost:{ports['remover']}", options=options)
    try:
        await scheduler.on_partition_leadership_changes([broker.assignment(retention_ms=-1)])

        async def tiered():
            state = await scheduler.partition_state(tip)
            return state.highest_tiered_offset == broker.rolled_end

        await eventually(tiered)
        (answer,) = await reader.fetch([FetchPartition(tip, 0, 1 << 20)])
        assert answer.error is None
        written = Path(broker.log.segments[0].path(".log")).read_bytes()
        assert bytes(answer.records) == written
        await remover.mark_partitions_for_deletion([tip])
        assert (await remover.deletion_status(tip)).topic_id_partition == tip
    finally:
        for client in (scheduler, reader, remover):
            await client.close()


@pytest.mark.parametrize("caller", ["no certificate", "another CA", "plaintext"])
async def test_a_client_the_stack_does_not_trust_is_refused(tls_stack, tmp_path, caller):
    certificates, ports = tls_stack
    quick = {"timeout_s": 3}
    if caller == "no certificate":
        options = ClientOptions(tls_root_certs_file=str(certificates.ca), **quick)
    elif caller == "another CA":
        (tmp_path / "stranger").mkdir()
        stranger = make_certificates(tmp_path / "stranger")
        options = dataclasses.replace(
            client_options(certificates, **quick),
            tls_cert_file=str(stranger.client_cert),
            tls_key_file=str(stranger.client_key),
        )
    else:
        options = ClientOptions(**quick)
    reader = RemoteFetchClient(f"localhost:{ports['fetch']}", options=options)
    try:
        with pytest.raises(ServiceUnavailableError):
            await reader.fetch([FetchPartition(new_partition("refused"), 0, 1024)])
    finally:
        await reader.close()


async def test_a_scrub_reads_the_metadata_manager_over_mutual_tls(tls_stack, tmp_path):
    certificates, ports = tls_stack
    properties = {
        "storage.backend": "filesystem",
        "storage.root": str(tmp_path / "segments"),
        "metadata.manager.address": f"localhost:{ports['metadata']}",
        "client.tls.ca.file": str(certificates.ca),
        "client.tls.cert.file": str(certificates.client_cert),
        "client.tls.key.file": str(certificates.client_key),
    }
    store = SegmentStoreClient(f"localhost:{ports['store']}", options=client_options(certificates))
    metadata = MetadataClient(
        f"localhost:{ports['metadata']}", options=client_options(certificates)
    )
    try:
        tip = new_partition("scrubbed")
        await tier_segment(store, metadata, tip, batch(0, 5), {}, start_offset=0)
    finally:
        await store.close()
        await metadata.close()
    config = load_properties(ScrubConfig, tmp_path / "scrub.properties", properties)
    report = await run_scrub(config, older_than_s=0, delete=False, out=lambda _: None)
    # It asked the manager about the partition it found, over TLS: nothing is orphaned.
    assert report.partitions_scanned == 1
    assert report.orphans == []


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        (
            {"client.tls.ca.file": "{tmp}/missing.pem"},
            "client.tls.ca.file: cannot read {tmp}/missing.pem: No such file or directory",
        ),
        (
            {"client.tls.ca.file": "{tmp}/client.key"},
            "client.tls.ca.file: {tmp}/client.key holds no PEM certificate",
        ),
        (
            {"client.tls.cert.file": "{tmp}/client.pem"},
            "client.tls.cert.file and client.tls.key.file: set both or neither",
        ),
    ],
)
def test_client_tls_files_are_checked_at_start_naming_the_setting(tmp_path, properties, message):
    make_certificates(tmp_path)
    properties = {key: value.format(tmp=tmp_path) for key, value in properties.items()}
    config = load_properties(RemoteFetchConfig, tmp_path / "fetch.properties", properties)
    with pytest.raises(OSError, match=r"^client\.tls\.") as raised:
        service_client_options(config, timeout_s=1)
    assert str(raised.value) == message.format(tmp=tmp_path)
