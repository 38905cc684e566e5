"""GCS's V4 signed URLs, signed with a service account's RSA key (no request to GCS).

gcloud-aio-storage signs these too, but lowercases every signed header's value, as
Google's old sample does: a Content-MD5 (base64, case matters) signed so would never
match the header its caller sends. Here header values are only trimmed, as GCS
canonicalises them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

GCS_HOST = "storage.googleapis.com"
ALGORITHM = "GOOG4-RSA-SHA256"


@dataclass(frozen=True, slots=True)
class ServiceAccountSigner:
    client_email: str
    private_key: rsa.RSAPrivateKey

    @classmethod
    def of(cls, client_email: str, private_key_pem: str) -> ServiceAccountSigner:
        key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("a service account's private key is an RSA key")
        return cls(client_email, key)

    def signed_url(
        self,
        method: str,
        bucket: str,
        key: str,
        expires_in_s: int,
        headers: Mapping[str, str] | None = None,
        *,
        now: datetime | None = None,
    ) -> str:
        """A URL of `method` on gs://bucket/key for `expires_in_s` seconds; the caller
        sends `headers` exactly (they are signed) beside its unsigned ones (Range)."""
        now = now or datetime.now(UTC)
        timestamp = now.strftime("%Y%m%dT%H%M%SZ")
        scope = f"{now:%Y%m%d}/auto/storage/goog4_request"
        canonical_headers = {"host": GCS_HOST} | {
            name.lower().strip(): " ".join(value.split()) for name, value in (headers or {}).items()
        }
        signed_headers = ";".join(sorted(canonical_headers))
        query = {
            "X-Goog-Algorithm": ALGORITHM,
            "X-Goog-Credential": f"{self.client_email}/{scope}",
            "X-Goog-Date": timestamp,
            "X-Goog-Expires": str(expires_in_s),
            "X-Goog-SignedHeaders": signed_headers,
        }
        query_string = "&".join(
            f"{quote(name, safe='')}={quote(value, safe='')}"
            for name, value in sorted(query.items())
        )
        path = f"/{bucket}/{quote(key, safe='/~')}"
        canonical_request = "\n".join(
            [
                method,
                path,
                query_string,
                "".join(
                    f"{name}:{canonical_headers[name]}\n" for name in sorted(canonical_headers)
                ),
                signed_headers,
                "UNSIGNED-PAYLOAD",
            ]
        )
        digest = hashlib.sha256(canonical_request.encode()).hexdigest()
        to_sign = f"{ALGORITHM}\n{timestamp}\n{scope}\n{digest}"
        signature = self.private_key.sign(to_sign.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"https://{GCS_HOST}{path}?{query_string}&X-Goog-Signature={signature.hex()}"
