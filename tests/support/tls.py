"""A throwaway CA, a server certificate for localhost and a client certificate, as PEM files."""

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(subject, key, issuer, issuer_key, *, ca=False, names=()):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, certificate, key=None) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path = path.with_suffix(".key")
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return path


def make_certificates(directory: Path) -> Certificates:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("remotelog test CA", ca_key, "remotelog test CA", ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    server = _issue("localhost", server_key, "remotelog test CA", ca_key, names=names)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue("broker-1", client_key, "remotelog test CA", ca_key)
    return Certificates(
        ca=_write(directory / "ca.pem", ca),
        server_cert=_write(directory / "server.pem", server, server_key),
        server_key=directory / "server.key",
        client_cert=_write(directory / "client.pem", client, client_key),
        client_key=directory / "client.key",
    )


def server_tls_settings(certificates: Certificates) -> dict[str, str]:
    """A service's settings to serve with the server certificate and require a client's."""
    return {
        "tls.cert.file": str(certificates.server_cert),
        "tls.key.file": str(certificates.server_key),
        "tls.client.ca.file": str(certificates.ca),
    }
