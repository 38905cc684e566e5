"""Files and directories that settings name, opened so a failure says which setting.

A service that cannot create its storage root or read its TLS key stops at
start; "[Errno 2] No such file or directory: '/data'" leaves the operator to
guess which of several paths it was.
"""

from __future__ import annotations

from pathlib import Path


def make_directory(path: Path, key: str) -> None:
    """Create `path` (and its parents) if missing; an OSError names `key`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"{key}: cannot create {path}: {exc.strerror or exc}") from None


def read_file(path: str, key: str) -> bytes:
    """The bytes of the file `key` names; an OSError names `key`."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
PRIVATE_KEY = b"PRIVATE KEY-----"


def pem_file(path: str, key: str, marker: bytes, what: str) -> bytes:
    """A PEM file's bytes. gRPC reports one that is not PEM only as a failed bind."""
    data = read_file(path, key)
    if marker not in data:
        raise OSError(f"{key}: {path} holds no PEM {what}")
    return data
