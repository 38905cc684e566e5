"""`remotelog scrub`: the scrub over the configured backend and metadata manager, as a report."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from remotelog.client import MetadataClient
from remotelog.client.service_options import service_client_options
from remotelog.core.errors import InvalidArgumentError
from remotelog.remover.config import ScrubConfig
from remotelog.remover.scrub import Scrub, ScrubReport
from remotelog.segmentstore.factory import open_backend, require_bucket, storage_location
from remotelog.segmentstore.layout import validate_key_prefix

_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_s(text: str, field: str = "--older-than") -> float:
    """`90s`, `30m`, `1h`, `2d`, `500ms` in seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise InvalidArgumentError(field, f"{text!r} is not a duration such as 30m, 1h or 2d")
    return float(match.group(1)) * _UNITS_S[match.group(2)]


def _size(n: int) -> str:
    value, unit = float(n), "B"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


def _age(now: float, then: float) -> str:
    seconds = max(0, int(now - then))
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 60}m{seconds % 60}s"


def render(report: ScrubReport, where: str, now: float) -> list[str]:
    lines = [
        f"orphan  {o.object.key}  {_size(o.object.size)}  age {_age(now, o.object.last_modified_s)}"
        f"  ({o.why})"
        for o in report.orphans
    ]
    lines += [
        f"upload  {u.key}  id {u.upload_id}  started {_age(now, u.initiated_s)} ago"
        "  (incomplete upload)"
        for u in report.uploads
    ]
    lines += [
        f"unknown {s.key}  (not written by remotelog; left alone)" for s in report.unrecognised
    ]
    summary = (
        f"scrubbed {where}: {report.objects_scanned} objects in {report.partitions_scanned} "
        f"partitions; {len(report.orphans)} orphans ({_size(report.orphan_bytes)}), "
        f"{len(report.uploads)} incomplete uploads, {report.too_young} unreferenced but "
        "younger than --older-than"
    )
    if report.deleted:
        summary += f"; deleted {len(report.orphans)} orphans, aborted {len(report.uploads)} uploads"
    elif report.orphans or report.uploads:
        summary += "; nothing deleted (pass --delete to remove them)"
    return [*lines, summary]


async def run_scrub(
    config: ScrubConfig,
    *,
    older_than_s: float,
    delete: bool,
    out: Callable[[str], None],
    clock: Callable[[], float] = time.time,
) -> ScrubReport:
    validate_key_prefix(config.key_prefix)
    require_bucket(config)
    backoff = config.backoff()
    backend = await open_backend(config, backoff)
    options = service_client_options(
        config, timeout_s=config.rpc_timeout_ms / 1000, backoff=backoff
    )
    metadata = MetadataClient(config.metadata_manager_address, options=options)
    try:
        scrub = Scrub(
            backend,
            metadata,
            key_prefix=config.key_prefix,
            grace_s=older_than_s,
            clock=clock,
            timeout_s=options.timeout_s,
        )
        report = await scrub.run(delete=delete)
    finally:
        await metadata.close()
        await backend.close()
    where = storage_location(config)
    for line in render(report, where, clock()):
        out(line)
    return report
