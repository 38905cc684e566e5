"""`remotelog keys`: a new key for the local key ring, and re-wrapping segments' data keys
under another key-encryption key without rewriting a byte of their chunks."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from remotelog.core.errors import InvalidArgumentError
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.factory import open_backend, open_key_provider
from remotelog.segmentstore.key_providers import KeyProvider, new_key_file
from remotelog.segmentstore.layout import Manifest, parse_segment_key, validate_key_prefix

# Manifests re-wrapped at once: each is a KMS call and a small PUT.
_CONCURRENCY = 16
_PROGRESS_EVERY_S = 2.0


def new_key(ring: Path, key_id: str, out: Callable[[str], None]) -> None:
    if not key_id or "/" in key_id or key_id.startswith("."):
        raise InvalidArgumentError("KEY_ID", f"{key_id!r} cannot name a key file")
    try:
        path = new_key_file(ring, key_id)
    except FileExistsError:
        raise InvalidArgumentError("KEY_ID", f"key {key_id} already exists in {ring}") from None
    out(f"wrote key {key_id} to {path} (readable by its owner only); set encryption.key.id")


@dataclass
class RewrapReport:
    rewrapped: list[str] = field(default_factory=list)  # manifest keys
    already: int = 0  # under the target key already
    plain: int = 0  # not encrypted: nothing to re-wrap
    other_provider: list[str] = field(default_factory=list)


async def run_rewrap(
    config: SegmentStoreConfig,
    *,
    to_key_id: str | None,
    topic: str | None,
    dry_run: bool,
    out: Callable[[str], None],
) -> RewrapReport:
    """Every encrypted segment's data key under `to_key_id` (default: the active key),
    its manifest rewritten in place; a second run finds nothing to do."""
    prefix = validate_key_prefix(config.key_prefix)
    provider = await open_key_provider(config)
    if provider is None:
        raise InvalidArgumentError(
            "encryption.key.provider", "names no key provider: there is nothing to re-wrap with"
        )
    target = to_key_id or provider.active_key_id
    backend = await open_backend(config, config.backoff())
    report = RewrapReport()
    try:
        keys = [
            o.key
            async for o in backend.list(prefix + (f"{topic}-" if topic else ""))
            if (parsed := parse_segment_key(prefix, o.key)) is not None
            and parsed.suffix == "rsm-manifest"
            and (topic is None or parsed.topic_id_partition.topic == topic)
        ]
        progress = _Progress(len(keys), out)
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def one(key: str) -> None:
            async with limit:
                await _rewrap_one(backend, provider, key, target, dry_run, report)
                progress.step()

        await asyncio.gather(*(one(key) for key in keys))
    finally:
        await backend.close()
        await provider.close()
    verb = "would re-wrap" if dry_run else "re-wrapped"
    for key in report.rewrapped if dry_run else ():
        out(f"rewrap  {key}")
    for key in report.other_provider:
        out(f"skipped {key}  (wrapped by another key provider)")
    out(
        f"{verb} {len(report.rewrapped)} data keys under {target}; {report.already} already "
        f"under it, {report.plain} segments not encrypted, {len(report.other_provider)} "
        f"of another key provider ({len(keys)} manifests)"
    )
    return report


async def _rewrap_one(
    objects: ObjectStore,
    provider: KeyProvider,
    key: str,
    target: str,
    dry_run: bool,
    report: RewrapReport,
) -> None:
    manifest = Manifest.from_json(await objects.get(key), key)
    transforms = manifest.transforms
    wrapped = transforms.encryption if transforms is not None else None
    if transforms is None or wrapped is None:
        report.plain += 1
        return
    if wrapped.key_provider != provider.name:
        report.other_provider.append(key)
        return
    if wrapped.key_id == target:
        report.already += 1
        return
    report.rewrapped.append(key)
    if dry_run:
        return
    rewrapped = await provider.rewrap(wrapped, target)
    changed = dataclasses.replace(
        manifest, transforms=dataclasses.replace(transforms, encryption=rewrapped)
    )
    # One PUT replaces the manifest whole (S3, and the filesystem's rename): a reader
    # finds the old wrapping or the new, both of which open the same data key.
    await objects.put(key, changed.to_json())


class _Progress:
    def __init__(self, total: int, out: Callable[[str], None]) -> None:
        self.total, self.done, self.out = total, 0, out
        self._last = time.monotonic()

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self._last >= _PROGRESS_EVERY_S and self.done < self.total:
            self._last = now
            self.out(f"... {self.done}/{self.total} manifests")
