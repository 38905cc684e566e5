"""`remotelog dev` and `remotelog demo`: the whole stack on this machine."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from remotelog.cli.errors import CliError
from remotelog.dev.broker import BrokerError
from remotelog.dev.demo import MIN_RECORDS, DemoConfig, DemoMismatch, DemoReport, run_demo
from remotelog.dev.kafka_broker import kafka_libs, plugin_jar
from remotelog.dev.kafka_demo import MIN_RECORDS as KAFKA_MIN_RECORDS
from remotelog.dev.kafka_demo import KafkaDemoReport, run_kafka_demo
from remotelog.dev.kafka_jars import compat_jar_of
from remotelog.dev.stack import (
    BROKERS,
    SIDECAR_TOPIC_PATTERN,
    DevConfig,
    DevStack,
    DevStackError,
    run_until_stopped,
)
from remotelog.dev.table import format_table

REDIS_URL = re.compile(r"(rediss?|unix)://.+")
MAX_BASE_PORT = 65535 - 5


def add_dev_commands(commands: Any) -> None:
    dev = commands.add_parser(
        "dev",
        help="run Apache Kafka and the five services here until Ctrl-C",
        description="Start Apache Kafka, tiering through the remotelog plugin, and the "
        "five services as child processes with a filesystem segment store; Ctrl-C or "
        "SIGTERM stops them all.",
    )
    _stack_flags(dev)
    dev.add_argument(
        "--mode",
        choices=("plugin", "sidecar"),
        default=None,
        help="plugin (the default): Kafka loads the remotelog plugin and tiers topics "
        "created with remote.storage.enable=true; sidecar: Kafka without remote storage, "
        "and the copy scheduler finds and tiers every topic but internal and compacted ones",
    )
    dev.set_defaults(run=_dev)

    demo = commands.add_parser(
        "demo",
        help="watch the services tier, serve and delete a topic on a fresh dev stack",
        description="Write a three-partition topic as a broker does, tier it, free the "
        "local disk, read every record back and verify it, count it with Spark, delete "
        "it; then print a report. Exit 1 on any difference.",
    )
    demo.add_argument(
        "--records",
        type=int,
        default=DemoConfig.records,
        help=f"records to write over the three partitions (default {DemoConfig.records:,})",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the stack's directory (configs, logs, store)"
    )
    _broker_flag(demo)
    demo.set_defaults(run=_demo)

    plugin = commands.add_parser(
        "kafka-plugin", help="the remotelog plugin for Apache Kafka that this remotelog carries"
    )
    actions = plugin.add_subparsers(dest="plugin_command", required=True, metavar="ACTION")
    path = actions.add_parser(
        "path",
        help="print the plugin jar's path, for remote.log.storage.manager.class.path and "
        "remote.log.metadata.manager.class.path",
    )
    path.set_defaults(run=_plugin_path)
    compat = actions.add_parser(
        "compat-path",
        help="print the compat jar's path: Kafka 3.7-4.0 lack the Monitorable interface the "
        "plugin implements, and take it from this jar in libs/ or beside the plugin jar in "
        "both class.path settings (never on Kafka 4.1+)",
    )
    compat.set_defaults(run=_compat_path)


def _stack_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        help="an empty or new directory for configs, logs and segments (default: a new one "
        "under the system's temporary directory)",
    )
    parser.add_argument(
        "--redis", default="", help="redis:// URL for the leases (default: in-process leases)"
    )
    _broker_flag(parser)
    parser.add_argument(
        "--base-port",
        type=int,
        default=0,
        help="broker on this port, services on the next five (default: free ports)",
    )


def _broker_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="kafka",
        help="Apache Kafka (KRaft, from the jars `make setup` resolves; the default) or "
        "Tansu (starts faster, keeps nothing across a restart)",
    )


def stack_config(args: argparse.Namespace, command: str) -> DevConfig:
    """The flags checked, each failure naming its flag."""
    if args.redis and not REDIS_URL.fullmatch(args.redis):
        raise CliError(
            f"{command}: --redis {args.redis!r}: not a redis://, rediss:// or unix:// URL"
        )
    if args.base_port and not 1024 <= args.base_port <= MAX_BASE_PORT:
        raise CliError(f"{command}: --base-port {args.base_port}: not in 1024..{MAX_BASE_PORT}")
    if args.data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix=f"remotelog-{command}-"))
    else:
        data_dir = Path(args.data_dir)
        if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
            # The broker keeps the metadata in memory: segments of an earlier stack
            # would be orphans no metadata names.
            raise CliError(f"{command}: --data-dir {data_dir}: not an empty directory")
    return DevConfig(
        data_dir,
        redis_url=args.redis,
        broker=args.broker,
        mode=_mode(args, command),
        base_port=args.base_port,
    )


def _mode(args: argparse.Namespace, command: str) -> str:
    """Kafka tiers through the plugin unless told otherwise; Tansu, which can neither
    load it nor keep log directories, only holds the metadata topic."""
    mode: str | None = getattr(args, "mode", None)
    if args.broker == "tansu":
        if mode is not None:
            raise CliError(f"{command}: --mode {mode}: Apache Kafka only (not --broker tansu)")
        return "simulated"
    return mode or "plugin"


def _raise_interrupt(*_: object) -> NoReturn:
    raise KeyboardInterrupt


def _plugin_path(_: argparse.Namespace) -> int:
    try:
        print(plugin_jar())
    except BrokerError as exc:
        raise CliError(f"kafka-plugin path: {exc}") from None
    return 0


def _compat_path(_: argparse.Namespace) -> int:
    try:
        compat = compat_jar_of(plugin_jar())
    except BrokerError as exc:
        raise CliError(f"kafka-plugin compat-path: {exc}") from None
    if not compat.is_file():
        raise CliError(f"kafka-plugin compat-path: {compat}: not beside the plugin jar")
    print(compat)
    return 0


def started(config: DevConfig, command: str) -> DevStack:
    """The stack, up; SIGTERM while it starts stops what did start."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if config.broker == "kafka":  # fetched into the cache on first use, said first
            kafka_libs(announce=lambda line: print(f"remotelog {command}: {line}", file=sys.stderr))
        return DevStack(config).start()
    except (DevStackError, BrokerError, OSError) as exc:
        raise CliError(f"{command}: {exc}") from None


def services_table(stack: DevStack) -> str:
    return format_table(
        ["service", "runs", "address", "pid", "config file", "log file"],
        [(c.name, c.runs, c.address, c.pid, c.config or "-", c.log) for c in stack.children],
    )


def _dev(args: argparse.Namespace) -> int:
    stack = started(stack_config(args, "dev"), "dev")
    print(services_table(stack), flush=True)
    print(f"\n{_how_to_tier(stack)}", flush=True)
    print(f"segments under {stack.segments_dir}; Ctrl-C stops every service.", flush=True)
    return run_until_stopped(stack)


def _how_to_tier(stack: DevStack) -> str:
    mode = stack.config.mode
    if mode == "plugin":
        return (
            "plugin mode: Kafka tiers each topic created with remote.storage.enable=true "
            "through the remotelog plugin."
        )
    if mode == "sidecar":
        return (
            "sidecar mode: the copy scheduler tiers every topic whose name matches "
            f"{SIDECAR_TOPIC_PATTERN!r} (never internal or compacted ones); Kafka itself "
            "has no remote storage."
        )
    return "Tansu holds the metadata topic; assign log directories to the copy scheduler."


def _demo(args: argparse.Namespace) -> int:
    # Apache Kafka tiers through the plugin; Tansu, which cannot load it, gets the
    # sidecar demo (remotelog's writer plays the broker, the copy scheduler tiers).
    mode = _mode(args, "demo")
    plugin = mode == "plugin"
    least = KAFKA_MIN_RECORDS if plugin else MIN_RECORDS
    if args.records < least:
        raise CliError(
            f"demo: --records {args.records}: at least {least} with --broker {args.broker}"
        )
    with _spark_factory() as spark:
        data_dir = Path(tempfile.mkdtemp(prefix="remotelog-demo-"))
        stack = started(DevConfig(data_dir, broker=args.broker, mode=mode), "demo")
        config = DemoConfig(records=args.records)
        report: DemoReport | KafkaDemoReport
        try:
            print(services_table(stack), end="\n\n", flush=True)
            with _progress_bar("offset" if plugin else "segment") as progress:
                if plugin:
                    report = asyncio.run(
                        run_kafka_demo(stack, config, spark=spark, progress=progress)
                    )
                else:
                    report = asyncio.run(run_demo(stack, config, spark=spark, progress=progress))
        except DemoMismatch as exc:
            print(f"remotelog demo: FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            stack.stop()
            if args.keep:
                print(f"kept {data_dir}", file=sys.stderr)
            else:
                shutil.rmtree(data_dir, ignore_errors=True)
    print(format_table(["demo", "result"], report.rows()))
    return 0


@contextmanager
def _spark_factory() -> Iterator[Callable[[], Any] | None]:
    """The demo's SparkSession, started now (None without pyspark); stopped after.

    Started before this process opens any gRPC channel: PySpark forks to launch
    the JVM, and a fork while gRPC's threads are busy can leave the child broken
    (CI once saw the gateway exit at once, after "skipping fork() handlers").
    """
    if importlib.util.find_spec("pyspark") is None:
        yield None
        return
    from remotelog.dev.spark_session import local_session

    try:
        session = local_session("remotelog-demo", {"spark.ui.showConsoleProgress": "false"})
    except Exception as exc:  # Spark reports a missing Java as a runtime error
        raise CliError(f"demo: Spark did not start (it needs Java 17+): {exc}") from None
    try:
        yield lambda: session
    finally:
        session.stop()


@contextmanager
def _progress_bar(unit: str) -> Iterator[Callable[[int, int], None]]:
    """What is tiered of what there is, as a bar on a terminal's stderr."""
    from tqdm import tqdm

    with tqdm(desc="tiering", unit=unit, file=sys.stderr, disable=None) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield progress
