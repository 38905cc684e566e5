"""moto's S3 server with a fault-injection hook, on a free loopback port.

Run as a script: prints `PORT <n>` once listening. POST /__faults__ with JSON
{"mode": "503" | "500" | "403" | "drop" | "truncate" | "stall" | "slow", "count": N,
"method": "GET"|"PUT"|..., "presigned": true, "delay_ms": D} makes the next N matching
requests (with "presigned", only those by a presigned URL)
fail: a 503 SlowDown, 500 InternalError or 403 AccessDenied (an expired
presigned URL) S3 error, a connection closed before any response, a GET
whose body is cut off halfway, or one that sends half its body and then nothing
for D ms (its connection open) before it is cut off; "slow" answers them
normally after D ms.
DELETE /__faults__ clears pending faults; GET returns what is left.
Used by the segment store's tests and benchmark as a real S3 endpoint.

`--link` puts object storage's network in front of it (Link): each request waits a
first-byte delay, the bytes each way share a bandwidth cap, and a fraction of requests
is answered 503 SlowDown or, for a GET, cut off midway. Flags override the link's
defaults (--first-byte-ms 50 --bandwidth-mb-s 50 --slow-down-fraction 0 --cut-fraction
0 --seed 0); POST /__link__ with the same settings in JSON (first_byte_ms, ...) sets
them at run time, DELETE /__link__ takes the link away, and GET /__link__ answers the
settings and what the link did (requests, slowed_down, cut, bytes_down, bytes_up).

`--upstream URL` serves no S3 of its own: the faults and the link stand in front of
another object store's server (GCS's emulator, Azurite), each request forwarded to it
(Forward), so retries and read-ahead are proven on each backend alike.

A signed ranged GET of an object is answered from the range's bytes alone (RangedReads):
moto reads and copies the whole object for every GET.

Where moto answers otherwise than S3, the server answers as S3 does (AsS3Does): a PUT
whose body is not its Content-MD5's is refused 400 BadDigest; a presigned (SigV4) request
without a header its URL signs is refused 403 SignatureDoesNotMatch; an SSE-KMS object's
or part's ETag is no MD5 of its bytes.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import http.client
import io
import json
import random
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit

from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import FakeKey, s3_backends
from werkzeug.serving import make_server

_ERRORS = {
    "503": ("503 Service Unavailable", "SlowDown", "Please reduce your request rate."),
    "500": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
    "403": ("403 Forbidden", "AccessDenied", "Request has expired"),
}


# The link sends in pieces this large, so concurrent responses interleave as on a wire.
_PIECE = 64 * 1024


@dataclass(frozen=True)
class Link:
    """Object storage's network, as a region's S3 looks from a broker: every request
    waits `first_byte_ms` before its answer, the bytes each way share one
    `bandwidth_mb_s` (MB = 10^6 bytes; 0: no cap), `slow_down_fraction` of the requests
    are answered 503 SlowDown and `cut_fraction` of the GETs lose their connection
    halfway through the body, drawn from a generator seeded with `seed`."""

    first_byte_ms: float = 50.0
    bandwidth_mb_s: float = 50.0
    slow_down_fraction: float = 0.0
    cut_fraction: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("first_byte_ms", "bandwidth_mb_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")
        for name in ("slow_down_fraction", "cut_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1")

    @classmethod
    def of(cls, settings: dict[str, Any]) -> Link:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"unknown link settings {unknown}; known: {sorted(known)}")
        return cls(**settings)


class Pipe:
    """One direction of the link: bytes leave in the order they are offered, at most
    `rate` a second all senders together, as over one wire."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = 0.0  # when the wire has sent what it was given

    def send(self, size: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            self.free_at = max(now, self.free_at) + size / self.rate
            done = self.free_at
        time.sleep(max(0.0, done - now))


@dataclass
class LinkState:
    """A link in use, and what it did."""

    link: Link
    down: Pipe
    up: Pipe
    rng: random.Random
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("requests", "slowed_down", "cut", "bytes_down", "bytes_up"), 0
        )
    )

    @classmethod
    def of(cls, link: Link) -> LinkState:
        rate = link.bandwidth_mb_s * 1e6
        return cls(link, Pipe(rate), Pipe(rate), random.Random(link.seed))

    def describe(self) -> dict[str, Any]:
        return {**asdict(self.link), **self.counts}


class ThrottledInput:
    """A request body read through the link's upward pipe."""

    def __init__(self, stream: Any, state: LinkState, lock: threading.RLock) -> None:
        self.stream, self.state, self.lock = stream, state, lock

    def read(self, *size: int) -> bytes:
        data: bytes = self.stream.read(*size)
        self._sent(len(data))
        return data

    def readline(self, *size: int) -> bytes:
        data: bytes = self.stream.readline(*size)
        self._sent(len(data))
        return data

    def _sent(self, size: int) -> None:
        for start in range(0, size, _PIECE):
            self.state.up.send(min(_PIECE, size - start))
        with self.lock:
            self.state.counts["bytes_up"] += size


class FaultInjector:
    def __init__(self, app: Any, link: Link | None = None) -> None:
        self.app = app
        self.lock = threading.RLock()  # _over draws a link's fault and takes a told one
        self.faults: list[dict[str, Any]] = []
        self.link = LinkState.of(link) if link is not None else None

    def _take(self, environ: dict[str, Any]) -> dict[str, Any] | None:
        method = environ["REQUEST_METHOD"]
        presigned = "Signature=" in environ.get("QUERY_STRING", "")
        with self.lock:
            for fault in self.faults:
                if fault.get("presigned") and not presigned:
                    continue
                if not environ.get("PATH_INFO", "").endswith(fault.get("suffix", "")):
                    continue
                if fault.get("method") in (None, method) and fault["count"] > 0:
                    fault["count"] -= 1
                    self.faults = [f for f in self.faults if f["count"] > 0]
                    return fault
        return None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/__faults__":
            return self._control(environ, start_response)
        if environ.get("PATH_INFO") == "/__link__":
            return self._link_control(environ, start_response)
        link = self.link
        if link is None:
            return self._answer(environ, start_response, self._take(environ))
        return self._over(link, environ, start_response)

    def _over(self, link: LinkState, environ: dict[str, Any], start_response: Any) -> Any:
        """The request and its answer over the link."""
        method = environ["REQUEST_METHOD"]
        with self.lock:
            link.counts["requests"] += 1
            fault = self._take(environ)
            if fault is None and link.rng.random() < link.link.slow_down_fraction:
                fault = {"mode": "503"}
                link.counts["slowed_down"] += 1
            elif fault is None and method == "GET" and link.rng.random() < link.link.cut_fraction:
                fault = {"mode": "truncate"}
                link.counts["cut"] += 1
        environ["wsgi.input"] = ThrottledInput(environ["wsgi.input"], link, self.lock)
        time.sleep(link.link.first_byte_ms / 1000)
        return self._sent_down(link, self._answer(environ, start_response, fault))

    def _sent_down(self, link: LinkState, body: Iterable[bytes]) -> Iterator[bytes]:
        try:
            for chunk in body:
                for start in range(0, len(chunk), _PIECE):
                    piece = chunk[start : start + _PIECE]
                    link.down.send(len(piece))
                    with self.lock:
                        link.counts["bytes_down"] += len(piece)
                    yield piece
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()

    def _answer(self, environ: dict[str, Any], start_response: Any, fault: Any) -> Any:
        fault = fault or {}
        mode = fault.get("mode")
        if mode == "slow":
            time.sleep(int(fault.get("delay_ms", 1000)) / 1000)
        if mode in _ERRORS:
            _drain(environ)
            return _error(start_response, *_ERRORS[mode])
        if mode == "drop":
            _drain(environ)
            _close(environ)
            start_response("500 Dropped", [("Content-Length", "0")])
            return []
        if mode == "truncate":
            return self._truncated(environ, start_response)
        if mode == "stall":
            return self._truncated(environ, start_response, int(fault.get("delay_ms", 60_000)))
        return self.app(environ, start_response)

    def _truncated(self, environ: dict[str, Any], start_response: Any, stall_ms: int = 0) -> Any:
        """Send the headers and half the body, then (after `stall_ms` of silence) close
        the connection."""
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        body = b"".join(self.app(environ, capture))
        start_response(captured["status"], captured["headers"])

        def half() -> Any:
            yield body[: len(body) // 2]
            time.sleep(stall_ms / 1000)
            _close(environ)

        return half()

    def _link_control(self, environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        try:
            if method == "POST":
                link = LinkState.of(Link.of(json.loads(_drain(environ) or b"{}")))
                with self.lock:
                    self.link = link
            elif method == "DELETE":
                with self.lock:
                    self.link = None
        except (ValueError, TypeError) as exc:
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [str(exc).encode()]
        with self.lock:
            body = json.dumps(self.link.describe() if self.link else None).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    def _control(self, environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        with self.lock:
            if method == "POST":
                self.faults.append(json.loads(_drain(environ)))
            elif method == "DELETE":
                self.faults.clear()
            body = json.dumps(self.faults).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_SIGV2 = {"AWSAccessKeyId", "Signature", "Expires"}


class RangedReads:
    """moto's app, except that a signed GET of `bytes=first-[last]` of a path-style
    object reads just that range of the object's stored bytes. moto reads and copies the
    whole object for each GET (about 60 ms a request for a 64 MiB segment here), which
    would set the pace of reads by range instead of the link. Anything else, an object
    not there or a range past its end among them, is moto's to answer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        found = self._range(environ)
        if found is None:
            return self.app(environ, start_response)
        key, first, last = found
        with key.lock:
            key._value_buffer.seek(first)
            body = key._value_buffer.read(last - first + 1)
        start_response(
            "206 Partial Content",
            [
                ("ETag", key.etag),
                ("Last-Modified", key.last_modified_RFC1123),
                ("Content-Type", key.metadata.get("Content-Type", "binary/octet-stream")),
                ("Accept-Ranges", "bytes"),
                ("Content-Range", f"bytes {first}-{last}/{key.size}"),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    @staticmethod
    def _range(environ: dict[str, Any]) -> tuple[Any, int, int] | None:
        matched = _RANGE.match(environ.get("HTTP_RANGE", ""))
        query = parse_qs(environ.get("QUERY_STRING", ""))
        # Signed by header, or presigned (SigV4's X-Amz-* or SigV2's fields).
        signed = "HTTP_AUTHORIZATION" in environ or {"X-Amz-Signature", "Signature"} & set(query)
        if environ["REQUEST_METHOD"] != "GET" or matched is None or not signed:
            return None
        if any(not name.startswith("X-Amz-") and name not in _SIGV2 for name in query):
            return None  # versionId, partNumber, response-* overrides: moto's
        bucket, _, name = unquote(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
        if not name:
            return None
        try:
            key = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_object(bucket, name)
        except Exception:  # no such bucket: moto says so
            return None
        if key is None or key.encryption is not None:
            return None
        first = int(matched[1])
        last = min(int(matched[2]) if matched[2] else key.size - 1, key.size - 1)
        return (key, first, last) if first <= last else None


class AsS3Does:
    """moto's app, except where S3 answers otherwise. moto checks no signature; this
    checks a presigned (SigV4) URL's, with its signed headers as sent, and its expiry,
    for the access keys in `secrets` (id -> secret), and a PUT's Content-MD5."""

    def __init__(self, app: Any, secrets: dict[str, str]) -> None:
        self.app = app
        self.secrets = secrets

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        refusal = self._presigned_refusal(environ)
        if refusal is not None:
            _drain(environ)
            return _error(start_response, "403 Forbidden", *refusal)
        stated = _header(environ, "content-md5")
        if environ["REQUEST_METHOD"] == "PUT" and stated is not None:
            body = _drain(environ)
            if base64.b64encode(hashlib.md5(body).digest()).decode() != stated:
                return _error(
                    start_response,
                    "400 Bad Request",
                    "BadDigest",
                    "The Content-MD5 you specified did not match what we received.",
                )
            environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)

    def _presigned_refusal(self, environ: dict[str, Any]) -> tuple[str, str] | None:
        """(code, message) of a presigned URL S3 would refuse; None: not one, or fine."""
        pairs = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        query = dict(pairs)
        if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            return None
        key_id, _, scope = query["X-Amz-Credential"].partition("/")
        secret = self.secrets.get(key_id)
        if secret is None:
            return None
        signed = query["X-Amz-SignedHeaders"].split(";")
        values = {h: _header(environ, h) for h in signed}
        if None in values.values():
            return "SignatureDoesNotMatch", f"unsent signed headers: {sorted(signed)}"
        issued = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        if datetime.now(UTC) > issued + timedelta(seconds=int(query["X-Amz-Expires"])):
            return "AccessDenied", "Request has expired"
        canonical = "\n".join(
            [
                environ["REQUEST_METHOD"],
                environ.get("RAW_URI", environ.get("PATH_INFO", "/")).partition("?")[0],
                "&".join(
                    f"{_encoded(k)}={_encoded(v)}"
                    for k, v in sorted(pairs)
                    if k != "X-Amz-Signature"
                ),
                "".join(f"{h}:{' '.join(str(values[h]).split())}\n" for h in signed),
                ";".join(signed),
                "UNSIGNED-PAYLOAD",
            ]
        )
        to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256",
                query["X-Amz-Date"],
                scope,
                hashlib.sha256(canonical.encode()).hexdigest(),
            ]
        )
        key = f"AWS4{secret}".encode()
        for part in scope.split("/"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature, query.get("X-Amz-Signature", "")):
            return "SignatureDoesNotMatch", "The request signature we calculated does not match"
        return None


def _encoded(value: str) -> str:
    return quote(value, safe="-_.~")


def _header(environ: dict[str, Any], name: str) -> str | None:
    if name == "host":
        return str(environ.get("HTTP_HOST", ""))
    key = name.upper().replace("-", "_")
    value = environ.get(key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}")
    return None if value is None else str(value)


def _error(start_response: Any, status: str, code: str, message: str) -> list[bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}</Message></Error>"
    ).encode()
    start_response(
        status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [body]


def etags_as_s3_makes_them() -> None:
    """S3's ETag of an object or part under SSE-KMS is no MD5 of its bytes; moto's is.
    Completing a multipart upload still takes the parts' ETags as listed."""
    md5_etag = FakeKey.etag

    def etag(key: FakeKey) -> str:
        tag = str(md5_etag.fget(key))  # type: ignore[attr-defined]
        if key.encryption != "aws:kms":
            return tag
        return f'"{hashlib.md5(b"sse-kms " + tag.encode()).hexdigest()}"'

    FakeKey.etag = property(etag)  # type: ignore[method-assign,assignment]


def _drain(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return environ["wsgi.input"].read(length) if length else b""


def _close(environ: dict[str, Any]) -> None:
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(2)
        sock.close()


# Hop-by-hop headers (RFC 9110): the connection's own, not forwarded.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
)


class Forward:
    """A WSGI app that forwards each request to `upstream` and streams its answer back."""

    def __init__(self, upstream: str) -> None:
        parsed = urlsplit(upstream)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        body = _drain(environ)
        headers = {
            name[5:].replace("_", "-").title(): value
            for name, value in environ.items()
            if name.startswith("HTTP_") and name[5:].lower().replace("_", "-") not in _HOP_BY_HOP
        }
        for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(name):
                headers[name.replace("_", "-").title()] = environ[name]
        headers["Host"] = f"{self.host}:{self.port}"
        # As the client sent it, encoded (werkzeug keeps it): the signatures cover it.
        target = environ.get("RAW_URI") or quote(environ.get("PATH_INFO", ""))
        if "RAW_URI" not in environ and environ.get("QUERY_STRING"):
            target += "?" + environ["QUERY_STRING"]
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        connection.request(environ["REQUEST_METHOD"], target, body=body, headers=headers)
        answer = connection.getresponse()
        kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP]
        start_response(f"{answer.status} {answer.reason}", kept)

        def relayed() -> Iterator[bytes]:
            try:
                while piece := answer.read(_PIECE):
                    yield piece
            finally:
                connection.close()

        return relayed()


def arguments_of(argv: list[str]) -> tuple[Link | None, str | None]:
    parser = argparse.ArgumentParser(description="moto's S3 server, maybe over a link")
    parser.add_argument("--link", action="store_true", help="put object storage's link in front")
    parser.add_argument("--upstream", help="forward to this server instead of serving S3")
    defaults = Link()
    for f in fields(Link):
        flag = "--" + f.name.replace("_", "-")
        kind = int if f.name == "seed" else float
        parser.add_argument(
            flag, type=kind, default=None, help=f"default {getattr(defaults, f.name)}"
        )
    arguments = parser.parse_args(argv)
    given = {f.name: getattr(arguments, f.name) for f in fields(Link)}
    given = {name: value for name, value in given.items() if value is not None}
    if given and not arguments.link:
        parser.error(f"--{next(iter(given)).replace('_', '-')} needs --link")
    return (Link.of(given) if arguments.link else None), arguments.upstream


def main() -> None:
    link, upstream = arguments_of(sys.argv[1:])
    if upstream is not None:
        app = FaultInjector(Forward(upstream), link)
    else:
        etags_as_s3_makes_them()
        # The tests' and benchmarks' S3 credentials: their URLs are checked as S3 checks them.
        secrets = {"test": "test"}
        moto = AsS3Does(RangedReads(DomainDispatcherApplication(create_backend_app)), secrets)
        app = FaultInjector(moto, link)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"PORT {server.server_port}", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
