"""`remotelog`: the operator's command line.

Every failure is one line on stderr naming what is wrong and exit status 2;
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from remotelog.cli.services import SERVICE_CONFIGS, all_config_keys
from remotelog.core.config import ConfigError, load_config, render
from remotelog.core.version import __version__


def _config_check(args: argparse.Namespace) -> int:
    cls = SERVICE_CONFIGS[args.service]
    config, sources = load_config(
        cls,
        Path(args.file),
        os.environ,
        service=args.service,
        all_known_keys=all_config_keys(),
    )
    print(f"# effective configuration of {args.service}")
    print("\n".join(render(config, sources)))
    return 0


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

    config = commands.add_parser("config", help="inspect service configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = config_commands.add_parser(
        "check",
        help="validate a .properties file (plus REMOTELOG_* environment) and print the result",
    )
    check.add_argument("--service", required=True, choices=sorted(SERVICE_CONFIGS))
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
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
