"""The ClientOptions a service calls the store and the metadata manager with."""

from __future__ import annotations

from typing import Any

from remotelog.client import ClientOptions
from remotelog.core.settings import ClientTlsSettings
from remotelog.rpc.server import CERTIFICATE, pem_file


def service_client_options(settings: ClientTlsSettings, **policy: Any) -> ClientOptions:
    """`policy` (timeouts, backoff, sizes) with the `client.tls.*` files, checked now:
    gRPC would report a missing or non-PEM file only as calls that never connect."""
    checks = (
        (settings.client_tls_ca_file, "client.tls.ca.file", CERTIFICATE, "certificate"),
        (settings.client_tls_cert_file, "client.tls.cert.file", CERTIFICATE, "certificate"),
        (settings.client_tls_key_file, "client.tls.key.file", b"PRIVATE KEY-----", "private key"),
    )
    for path, key, marker, what in checks:
        if path:
            pem_file(path, key, marker, what)
    if bool(settings.client_tls_cert_file) != bool(settings.client_tls_key_file):
        raise OSError("client.tls.cert.file and client.tls.key.file: set both or neither")
    return ClientOptions(
        **policy,
        tls_root_certs_file=settings.client_tls_ca_file,
        tls_cert_file=settings.client_tls_cert_file,
        tls_key_file=settings.client_tls_key_file,
    )
