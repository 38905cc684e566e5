"""A service's log: one line per record on stderr, as text or JSON, named by service.

Text: `2026-11-24T01:02:03.456Z INFO segment-store remotelog.x: message`. JSON:
one object per line with `time`, `level`, `service`, `logger`, `message` (and
`exception`, the traceback, when there is one), for log shippers.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

_log = logging.getLogger(__name__)


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record)} {record.levelname} {self.service} {record.name}: "
            f"{record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _timestamp(record),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class CallerGoneFilter(logging.Filter):
    """grpc logs an ERROR with a traceback (ExecuteBatchError) when a caller went away
    before its answer was sent: a client killed, or one that gave up at its deadline.
    Nothing failed here; it becomes one DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[0] if record.exc_info else None
        if error is None or error.__name__ != "ExecuteBatchError":
            return True
        _log.debug("a caller went away before its answer was sent: %s", record.getMessage())
        return False


def configure_logging(
    service: str, level: str, log_format: str, stream: TextIO | None = None
) -> logging.Handler:
    """The root logger at `level`, its one handler writing `log_format` lines to
    `stream` (stderr); returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter = JsonFormatter(service) if log_format == "json" else TextFormatter(service)
    handler.setFormatter(formatter)
    handler.addFilter(CallerGoneFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
