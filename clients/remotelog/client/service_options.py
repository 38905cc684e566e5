"""The ClientOptions a service calls the store and the metadata manager with."""

from __future__ import annotations

from typing import Any

from remotelog.client.base import ClientOptions
from remotelog.core.setting_paths import CERTIFICATE, PRIVATE_KEY, pem_file, read_file
from remotelog.core.settings import ClientTlsSettings


def read_token(path: str, key: str) -> str:
    """The bearer token in the file `key` names (surrounding whitespace dropped); "" if unset."""
    if not path:
        return ""
    token = read_file(path, key).decode("utf-8", "replace").strip()
    if not token or any(c.isspace() for c in token):
        raise OSError(f"{key}: {path} must hold one token, without whitespace")
    return token


def service_client_options(settings: ClientTlsSettings, **policy: Any) -> ClientOptions:
    """`policy` (timeouts, backoff, sizes) with the `client.tls.*` files, checked now:
    gRPC would report a missing or non-PEM file only as calls that never connect."""
    checks = (
        (settings.client_tls_ca_file, "client.tls.ca.file", CERTIFICATE, "certificate"),
        (settings.client_tls_cert_file, "client.tls.cert.file", CERTIFICATE, "certificate"),
        (settings.client_tls_key_file, "client.tls.key.file", PRIVATE_KEY, "private key"),
    )
    for path, key, marker, what in checks:
        if path:
            pem_file(path, key, marker, what)
    if bool(settings.client_tls_cert_file) != bool(settings.client_tls_key_file):
        raise OSError("client.tls.cert.file and client.tls.key.file: set both or neither")
    return ClientOptions(
        **policy,
        bearer_token=read_token(settings.client_auth_token_file, "client.auth.token.file"),
        tls_root_certs_file=settings.client_tls_ca_file,
        tls_cert_file=settings.client_tls_cert_file,
        tls_key_file=settings.client_tls_key_file,
    )
