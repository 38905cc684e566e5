"""moto's S3 server with a fault-injection hook, on a free loopback port.

Run as a script: prints `PORT <n>` once listening. POST /__faults__ with JSON
{"mode": "503" | "500" | "403" | "drop" | "truncate" | "slow", "count": N,
"method": "GET"|"PUT"|..., "delay_ms": D} makes the next N matching requests
fail: a 503 SlowDown, 500 InternalError or 403 AccessDenied (an expired
presigned URL) S3 error, a connection closed before any response, or a GET
whose body is cut off halfway; "slow" answers them normally after D ms.
DELETE /__faults__ clears pending faults; GET returns what is left.
Used by the segment store's tests and benchmark as a real S3 endpoint.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

_ERRORS = {
    "503": ("503 Service Unavailable", "SlowDown", "Please reduce your request rate."),
    "500": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
    "403": ("403 Forbidden", "AccessDenied", "Request has expired"),
}


class FaultInjector:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []

    def _take(self, method: str) -> dict[str, Any] | None:
        with self.lock:
            for fault in self.faults:
                if fault.get("method") in (None, method) and fault["count"] > 0:
                    fault["count"] -= 1
                    self.faults = [f for f in self.faults if f["count"] > 0]
                    return fault
        return None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/__faults__":
            return self._control(environ, start_response)
        fault = self._take(environ["REQUEST_METHOD"]) or {}
        mode = fault.get("mode")
        if mode == "slow":
            time.sleep(int(fault.get("delay_ms", 1000)) / 1000)
        if mode in _ERRORS:
            _drain(environ)
            status, code, message = _ERRORS[mode]
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error>"
            ).encode()
            start_response(
                status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
            )
            return [body]
        if mode == "drop":
            _drain(environ)
            _close(environ)
            start_response("500 Dropped", [("Content-Length", "0")])
            return []
        if mode == "truncate":
            return self._truncated(environ, start_response)
        return self.app(environ, start_response)

    def _truncated(self, environ: dict[str, Any], start_response: Any) -> Any:
        """Send the headers and half the body, then close the connection."""
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        body = b"".join(self.app(environ, capture))
        start_response(captured["status"], captured["headers"])

        def half() -> Any:
            yield body[: len(body) // 2]
            _close(environ)

        return half()

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


def _drain(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return environ["wsgi.input"].read(length) if length else b""


def _close(environ: dict[str, Any]) -> None:
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(2)
        sock.close()


def main() -> None:
    app = FaultInjector(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"PORT {server.server_port}", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
