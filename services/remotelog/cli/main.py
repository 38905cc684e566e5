"""`remotelog`: the operator's command line.

Every failure is one line on stderr naming what is wrong and exit status 2;
never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from remotelog.cli.dev import add_dev_commands
from remotelog.cli.errors import CliError
from remotelog.cli.health import add_health_command
from remotelog.cli.keys import new_key, run_rewrap
from remotelog.cli.recover import INCOMPLETE, run_recover
from remotelog.cli.scrub import parse_duration_s, run_scrub
from remotelog.cli.services import (
    COMMAND_CONFIGS,
    SERVICE_CONFIGS,
    SERVICE_STARTERS,
    all_config_keys,
)
from remotelog.cli.stats import add_stats_command
from remotelog.core.config import ConfigError, load_config, render, shown_settings
from remotelog.core.errors import RemoteLogError
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.settings import KafkaClusterSettings
from remotelog.core.version import __version__
from remotelog.kafka.dump import dump
from remotelog.process.memory import keep_freed_memory, long_lived_objects_frozen
from remotelog.recovery.config import RecoverConfig
from remotelog.recovery.rebuild import RecoveryReport
from remotelog.remover.config import ScrubConfig
from remotelog.rpc.logs import configure_logging
from remotelog.rpc.serve import serve_until_signal
from remotelog.scheduler.config import DiscoverySettings
from remotelog.segmentstore.config import SegmentStoreConfig

# Named, not __name__: run as `python -m remotelog.cli.main` that is "__main__".
log = logging.getLogger("remotelog.cli")


def _config_check(args: argparse.Namespace) -> int:
    cls = COMMAND_CONFIGS[args.service]
    config, sources = load_config(
        cls,
        Path(args.file),
        os.environ,
        service=args.service,
        all_known_keys=all_config_keys(),
    )
    # What the service would refuse at start: settings that only make sense together.
    try:
        if isinstance(config, KafkaClusterSettings):
            kafka_client_config(config)
        if isinstance(config, DiscoverySettings):
            config.discovery_log_dirs()
    except RemoteLogError as exc:
        raise CliError(f"config check: {exc}") from None
    print(f"# effective configuration of {args.service}")
    print("\n".join(render(config, sources)))
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if not target.exists():
        raise CliError(f"dump-log: {target}: no such file or directory")
    summary = dump(target, print_data=args.print_data, verify_index=args.verify_index, out=print)
    return 0 if not summary.problems else 1


def _serve(args: argparse.Namespace) -> int:
    cls = SERVICE_CONFIGS[args.service]
    path = Path(args.config) if args.config else None
    if path is not None and not path.is_file():
        raise CliError(f"serve: --config {path}: no such file")
    config, _ = load_config(
        cls, path, os.environ, service=args.service, all_known_keys=all_config_keys()
    )
    configure_logging(args.service, config.log_level, config.log_format)
    log.info(
        "starting %s %s with %s",
        args.service,
        __version__,
        " ".join(f"{key}={value}" for key, value in shown_settings(config)),
    )
    start = SERVICE_STARTERS[args.service]  # argparse admits only these names
    ready_file = Path(args.ready_file) if args.ready_file else None
    if ready_file is not None and not ready_file.parent.is_dir():
        raise CliError(f"serve: --ready-file {ready_file}: {ready_file.parent} is not a directory")
    keep_freed_memory()  # this process is the service's: its heap tuned once, here
    try:
        asyncio.run(
            serve_until_signal(
                args.service,
                config,
                lambda: start(config),
                ready_file=ready_file,
                while_serving=long_lived_objects_frozen,
            )
        )
    except RemoteLogError as exc:
        raise CliError(f"serve {args.service}: {exc}") from None
    except OSError as exc:
        raise CliError(f"serve {args.service}: {exc}") from None
    return 0


T = TypeVar("T")


def _operator_command(
    command: str,
    config_class: type[T],
    args: argparse.Namespace,
    run: Callable[[T], Coroutine[Any, Any, object]],
    status: Callable[[Any], int] = lambda _: 0,
) -> int:
    """An operator command over the services' storage and metadata manager: its config
    file loaded and checked, `run` on it, and any failure one line naming the command;
    `status` makes the exit status of what `run` returned."""
    path = Path(args.config) if args.config else None
    if path is not None and not path.is_file():
        raise CliError(f"{command}: --config {path}: no such file")
    config, _ = load_config(
        config_class, path, os.environ, service=command, all_known_keys=all_config_keys()
    )
    try:
        result = asyncio.run(run(config))
    except RemoteLogError as exc:
        raise CliError(f"{command}: {exc}") from None
    except OSError as exc:
        raise CliError(f"{command}: {exc}") from None
    return status(result)


def _scrub(args: argparse.Namespace) -> int:
    def run(config: ScrubConfig) -> Coroutine[Any, Any, object]:
        older_than_s = parse_duration_s(args.older_than)
        return run_scrub(config, older_than_s=older_than_s, delete=args.delete, out=print)

    return _operator_command("scrub", ScrubConfig, args, run)


def _recover(args: argparse.Namespace) -> int:
    def run(config: RecoverConfig) -> Coroutine[Any, Any, object]:
        return run_recover(
            config,
            topic=args.topic,
            topic_id=args.topic_id,
            bootstrap_server=args.bootstrap_server,
            dry_run=args.dry_run,
            out=print,
        )

    def status(report: RecoveryReport) -> int:
        return 0 if report.whole else INCOMPLETE

    return _operator_command("recover", RecoverConfig, args, run, status)


def _keys_new(args: argparse.Namespace) -> int:
    try:
        new_key(Path(args.ring).expanduser(), args.key_id, print)
    except RemoteLogError as exc:
        raise CliError(f"keys new: {exc}") from None
    except OSError as exc:
        raise CliError(f"keys new: {exc}") from None
    return 0


def _keys_rewrap(args: argparse.Namespace) -> int:
    def run(config: SegmentStoreConfig) -> Coroutine[Any, Any, object]:
        return run_rewrap(
            config, to_key_id=args.to, topic=args.topic, dry_run=args.dry_run, out=print
        )

    return _operator_command("keys rewrap", SegmentStoreConfig, args, run)


def _version(_: argparse.Namespace) -> int:
    print(f"remotelog {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remotelog", description="Kafka Tiered Storage (KIP-405) as gRPC services."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    version = commands.add_parser("version", help="print the remotelog version")
    version.set_defaults(run=_version)

    dump_log = commands.add_parser(
        "dump-log", help="print the record batches of a segment file or partition directory"
    )
    dump_log.add_argument("path", help="a .log file or a <topic>-<partition> directory")
    dump_log.add_argument("--print-data", action="store_true", help="print every record too")
    dump_log.add_argument(
        "--verify-index", action="store_true", help="check .index entries against the log"
    )
    dump_log.set_defaults(run=_dump_log)

    serve = commands.add_parser("serve", help="run a service until SIGTERM or SIGINT")
    serve.add_argument("service", choices=sorted(SERVICE_CONFIGS))
    serve.add_argument("--config", help="Kafka-style .properties file (default: built-in defaults)")
    serve.add_argument(
        "--ready-file",
        help="write {service, address, pid} as JSON here once serving; removed at shutdown",
    )
    serve.set_defaults(run=_serve)

    scrub = commands.add_parser(
        "scrub",
        help="report remote objects no live metadata references (and delete them with --delete)",
    )
    scrub.add_argument(
        "--config",
        help="properties with storage.* and metadata.manager.address (default: built-in)",
    )
    scrub.add_argument(
        "--older-than",
        default="1h",
        help="grace period: younger objects may belong to a copy in flight (default 1h)",
    )
    scrub.add_argument(
        "--delete", action="store_true", help="delete the orphans and abort old uploads"
    )
    scrub.set_defaults(run=_scrub)

    recover = commands.add_parser(
        "recover",
        help="rebuild the metadata topic from the manifests in the bucket or directory",
        description=(
            "List the segment manifests under key.prefix and write each segment "
            "the metadata manager does not know, as Kafka's copy would have: "
            "COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED (one it knows only as "
            "STARTED gets its FINISHED). Other segments it knows are left as they are, so "
            "a second run writes nothing. A partition being recovered is not ready to "
            "Kafka, and a second run on it is refused. Objects without a manifest are "
            "not segments (see scrub). Gaps and overlaps of offsets are reported; "
            "manifests of a newer version, damaged or misplaced ones are reported and "
            "skipped, and so are partitions the manager refuses as deleted. Exits 0 when "
            "everything was written, 3 when something was reported (gaps, overlaps, "
            "skipped manifests, refused partitions, a topic of two ids), 2 on an error. "
            "See docs/disaster-recovery.md."
        ),
    )
    recover.add_argument(
        "--config",
        help="properties with storage.* and metadata.manager.address (default: built-in)",
    )
    recover.add_argument("--topic", help="recover only this topic's partitions")
    recover.add_argument(
        "--topic-id",
        help="with --topic: only this incarnation of it (its Kafka topic id, as "
        "kafka-topics.sh --describe prints it), where the bucket holds an earlier one's too",
    )
    recover.add_argument(
        "--bootstrap-server",
        help="recover only the topic ids this Kafka cluster has (under the config's Kafka "
        "security settings): partitions of any other id, a deleted incarnation's "
        "leftovers, are reported as left and not written",
    )
    recover.add_argument(
        "--dry-run",
        action="store_true",
        help="print the segments it would write, and write nothing",
    )
    recover.set_defaults(run=_recover)

    keys = commands.add_parser(
        "keys", help="key-encryption keys of encrypted segments (docs/segment-store.md)"
    )
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    new = keys_commands.add_parser(
        "new", help="write a new random key into a local key ring (never over one)"
    )
    new.add_argument("--ring", required=True, help="the key ring's directory")
    new.add_argument("key_id", metavar="KEY_ID", help="the key's id: its file is KEY_ID.key")
    new.set_defaults(run=_keys_new)
    rewrap = keys_commands.add_parser(
        "rewrap",
        help="re-wrap encrypted segments' data keys under another key, rewriting only "
        "their manifests",
        description=(
            "Lists the segment manifests under key.prefix and re-wraps the data key of "
            "each segment encrypted under another key of the configured key provider, "
            "then rewrites its manifest in one PUT: no segment byte is read or written. "
            "Segments under the target key already, plain ones and those of another key "
            "provider are counted and left. A second run re-wraps nothing."
        ),
    )
    rewrap.add_argument(
        "--config",
        help="the segment store's properties (storage.*, encryption.*; default: built-in)",
    )
    rewrap.add_argument("--to", help="the key to wrap under (default: encryption.key.id)")
    rewrap.add_argument("--topic", help="only this topic's segments")
    rewrap.add_argument(
        "--dry-run", action="store_true", help="print what it would re-wrap; write nothing"
    )
    rewrap.set_defaults(run=_keys_rewrap)

    add_dev_commands(commands)
    add_health_command(commands)
    add_stats_command(commands)

    config = commands.add_parser("config", help="inspect service configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = config_commands.add_parser(
        "check",
        help="validate a .properties file (plus REMOTELOG_* environment) and print the result",
    )
    check.add_argument("--service", required=True, choices=sorted(COMMAND_CONFIGS))
    check.add_argument("file", help="Kafka-style .properties file")
    check.set_defaults(run=_config_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except ConfigError as exc:
        print(f"remotelog: config error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"remotelog: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
