"""A service's own calls to the segment store and the metadata manager over mutual TLS
(`client.tls.*`), as in a deployment where every service serves TLS."""

import pytest
from fetch.conftest import fetch_config
from support.services import (
    CLIENT_OPTIONS,
    load_properties,
    metadata_config,
    new_bucket,
    new_partition,
    start_metadata,
    start_store,
)
from support.tiering import batch, tier_segment
from support.tls import make_certificates, server_tls_settings

from remotelog.client import (
    ClientOptions,
    FetchPartition,
    MetadataClient,
    RemoteFetchClient,
    SegmentStoreClient,
)
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.server import start_remote_fetch
from remotelog.rpc.clients import service_client_options


async def test_remote_fetch_reads_through_a_store_and_manager_that_want_certificates(
    tmp_path, broker, s3_endpoint
):
    certificates = make_certificates(tmp_path)
    tls = server_tls_settings(certificates)
    store = await start_store("filesystem", tmp_path, s3_endpoint, new_bucket(s3_endpoint), **tls)
    metadata = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers, **tls))
    trusted = ClientOptions(
        timeout_s=20,
        tls_root_certs_file=str(certificates.ca),
        tls_cert_file=str(certificates.client_cert),
        tls_key_file=str(certificates.client_key),
    )
    store_client = SegmentStoreClient(f"127.0.0.1:{store.service.port}", options=trusted)
    metadata_client = MetadataClient(f"127.0.0.1:{metadata.service.port}", options=trusted)
    fetch = await start_remote_fetch(
        fetch_config(
            tmp_path,
            store.service.port,
            metadata.service.port,
            **{
                "client.tls.ca.file": str(certificates.ca),
                "client.tls.cert.file": str(certificates.client_cert),
                "client.tls.key.file": str(certificates.client_key),
            },
        )
    )
    reader = RemoteFetchClient(f"127.0.0.1:{fetch.port}", options=CLIENT_OPTIONS)
    try:
        tip = new_partition("tls")
        log = batch(0, 5) + batch(5, 3)
        await tier_segment(store_client, metadata_client, tip, log, {}, start_offset=0)
        (answer,) = await reader.fetch([FetchPartition(tip, 0, 1 << 20)])
        assert answer.error is None
        assert bytes(answer.records) == log
    finally:
        await reader.close()
        await fetch.stop(1.0)
        await store_client.close()
        await metadata_client.close()
        await metadata.stop()
        await store.stop()


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
