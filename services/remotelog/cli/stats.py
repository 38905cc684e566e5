"""`remotelog stats ADDRESS...`: the current metrics of running services, as a table.

ADDRESS is a service's `metrics.listen.address` (its Prometheus endpoint). Exit 0
when every address answered; 1 when one did not (the others are still printed,
and one line on stderr names each that failed); 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from remotelog.cli.errors import CliError
from remotelog.core.addresses import host_port_problem

_ADDRESS = re.compile(r"([^\s:/]+|\[[0-9a-fA-F:]+\]):\d+")
# Labels every sample carries that say nothing about the sample.
_SCOPE_LABELS = ("otel_scope_name", "otel_scope_schema_url", "otel_scope_version")


@dataclass(frozen=True)
class Row:
    address: str
    service: str
    metric: str
    labels: str
    value: float


def add_stats_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stats = commands.add_parser(
        "stats", help="print the current metrics of running services (their metrics.listen.address)"
    )
    stats.add_argument("addresses", nargs="+", metavar="ADDRESS", help="host:port of /metrics")
    stats.add_argument("--match", default="", help="only metrics whose name contains this")
    stats.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for each (default 5)"
    )
    stats.set_defaults(run=run_stats)


def scrape(address: str, timeout_s: float) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as response:
        return str(response.read().decode("utf-8"))


def rows(address: str, text: str, match: str) -> Iterator[Row]:
    families = list(text_string_to_metric_families(text))
    service = next(
        (
            sample.labels.get("service_name", "")
            for family in families
            if family.name == "target_info"
            for sample in family.samples
        ),
        "",
    )
    for family in families:
        if family.name == "target_info":
            continue
        for sample in family.samples:
            if sample.name.endswith("_created") or match.lower() not in sample.name.lower():
                continue
            labels = ",".join(
                f"{key}={value}"
                for key, value in sorted(sample.labels.items())
                if key not in _SCOPE_LABELS
            )
            yield Row(address, service, sample.name, labels, sample.value)


def table(found: list[Row]) -> list[str]:
    header = ("ADDRESS", "SERVICE", "METRIC", "LABELS", "VALUE")
    cells = [header] + [(r.address, r.service, r.metric, r.labels, f"{r.value:g}") for r in found]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def run_stats(args: argparse.Namespace) -> int:
    for address in args.addresses:
        if not _ADDRESS.fullmatch(address):
            raise CliError(f"stats: address {address!r} is not host:port")
        if (problem := host_port_problem(address)) is not None:
            raise CliError(f"stats: address {address!r}: {problem}")
    if args.timeout <= 0:
        raise CliError(f"stats: --timeout {args.timeout} must be more than 0 seconds")
    found: list[Row] = []
    failed = 0
    for address in args.addresses:
        try:
            found.extend(rows(address, scrape(address, args.timeout), args.match))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            print(f"remotelog: stats: {address}: no metrics ({reason})", file=sys.stderr)
            failed += 1
    print("\n".join(table(found)))
    return 1 if failed else 0
