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


def raise_execute_batch_error():
    from grpc._cython.cygrpc import ExecuteBatchError

    raise ExecuteBatchError("Failed execute_batch")


@pytest.mark.parametrize(("level", "lines"), [("INFO", 1), ("DEBUG", 2)])
def test_a_caller_gone_before_its_answer_is_one_debug_line_not_an_error(
    restore_root_logger, level, lines
):
    out = io.StringIO()
    configure_logging("metadata-manager", level, "text", out)
    grpc_log = logging.getLogger("grpc._cython.cygrpc")
    try:
        raise_execute_batch_error()
    except Exception:
        grpc_log.exception("ExecuteBatchError raised in core by servicer method [/pkg.Svc/Get]")
    try:
        raise ValueError("a real fault")
    except ValueError:
        grpc_log.exception("Unexpected error in a handler")
    text = out.getvalue()
    assert text.count("Traceback") == 1  # the real fault's only
    assert "ValueError: a real fault" in text
    assert len([line for line in text.splitlines() if " metadata-manager " in line]) == lines
    if level == "DEBUG":
        assert "DEBUG metadata-manager remotelog.rpc.logs: a caller went away" in text
