"""A service's log lines: text and JSON, with time, level, service, logger and message."""

import io
import json
import logging
import re

import pytest

from remotelog.rpc.logs import configure_logging


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_text_lines_carry_time_level_service_and_logger(restore_root_logger):
    out = io.StringIO()
    configure_logging("segment-store", "INFO", "text", out)
    logging.getLogger("remotelog.segmentstore.x").info("copied %d bytes", 42)
    logging.getLogger("remotelog.segmentstore.x").debug("not at INFO")
    (line,) = out.getvalue().splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO segment-store "
        r"remotelog\.segmentstore\.x: copied 42 bytes",
        line,
    ), line


def test_json_lines_are_one_object_each_with_the_traceback_inside(restore_root_logger):
    out = io.StringIO()
    configure_logging("remote-fetch", "WARNING", "json", out)
    log = logging.getLogger("remotelog.fetch.y")
    log.info("below the level")
    try:
        raise ValueError("bad offset")
    except ValueError:
        log.exception("read of %s failed", "orders-0")
    (line,) = out.getvalue().splitlines()
    entry = json.loads(line)
    assert entry.keys() == {"time", "level", "service", "logger", "message", "exception"}
    assert (entry["level"], entry["service"], entry["logger"], entry["message"]) == (
        "ERROR",
        "remote-fetch",
        "remotelog.fetch.y",
        "read of orders-0 failed",
    )
    assert entry["exception"].endswith("ValueError: bad offset")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])


def test_configuring_twice_leaves_one_handler(restore_root_logger):
    first, second = io.StringIO(), io.StringIO()
    configure_logging("copy-scheduler", "INFO", "text", first)
    configure_logging("copy-scheduler", "INFO", "text", second)
    logging.getLogger("remotelog.scheduler").info("once")
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
