"""RemoteIndexCache: the offset, time and transaction indexes of remote segments, on disk.

Files are Kafka's: `<start offset>_<segment uuid>.index`, `.timeindex`,
`.txnindex` in one directory, the offset index always in KIP-1333's 12-byte
entries whichever format the broker wrote (a cache of an older remotelog,
without the FORMAT file that says so, is emptied at start). Each is written
to a `.tmp` name, fsynced and renamed, and `.index` is renamed last, so an
entry exists exactly when its `.index` does; at start `.tmp` files and
incomplete entries are deleted and
the rest are reused (a restart does not refetch what it had).

The cache is bounded by the bytes of its files, evicting the least recently
used entry. Lookups binary-search memory-mapped files, so the page cache, not
the Python heap, holds them. Concurrent misses for one segment share one
fetch. An optional second level (Redis, shared by several fetch instances)
is asked before the segment store and filled after it; its failures only
cost a store fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.core.metrics import (
    FETCH,
    REMOTE_INDEX_CACHE_EVICTIONS,
    REMOTE_INDEX_CACHE_HITS,
    REMOTE_INDEX_CACHE_MISSES,
    Instruments,
)
from remotelog.core.model import IndexType, RemoteLogSegmentMetadata, kafka_uuid_str
from remotelog.core.ports import SegmentReader
from remotelog.core.setting_paths import make_directory
from remotelog.fetch.metrics import SCOPE
from remotelog.kafka.indexes import (
    TIME_ENTRY,
    WIDE_OFFSET_ENTRY,
    AbortedTxn,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    lookup_offset_in,
    lookup_timestamp_in,
    parse_transaction_index,
    position_after_in,
)

log = logging.getLogger(__name__)

SUFFIXES = (".txnindex", ".timeindex", ".index")  # write order: `.index` last marks complete
# Written into the directory: what its `.index` files hold. A directory without it is
# an older remotelog's cache of 8-byte entries, whose sizes need not tell them apart.
FORMAT_FILE = "FORMAT"
FORMAT = "offset-index-entry-bytes=12\n"
_KINDS = {
    ".index": IndexType.OFFSET,
    ".timeindex": IndexType.TIMESTAMP,
    ".txnindex": IndexType.TRANSACTION,
}


class SecondLevel(Protocol):
    """A shared store of index bytes by segment (Redis); misses return None."""

    async def get(self, key: str) -> dict[str, bytes] | None: ...

    async def put(self, key: str, files: dict[str, bytes]) -> None: ...


def _map(path: Path) -> bytes | mmap.mmap:
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""


@dataclass
class IndexEntry:
    """One segment's indexes: mapped on first use, unmapped on eviction."""

    base_offset: int
    stem: Path
    size_bytes: int
    _maps: dict[str, bytes | mmap.mmap] = field(default_factory=dict)
    _aborted: list[AbortedTxn] | None = None

    def _buffer(self, suffix: str) -> bytes | mmap.mmap:
        buffer = self._maps.get(suffix)
        if buffer is None:
            buffer = self._maps[suffix] = _map(self.stem.with_name(self.stem.name + suffix))
        return buffer

    def lookup_offset(self, offset: int) -> OffsetPosition:
        return lookup_offset_in(self._buffer(".index"), self.base_offset, offset, WIDE_OFFSET_ENTRY)

    def position_after(self, last_offset: int, log_size: int) -> int:
        return position_after_in(
            self._buffer(".index"), self.base_offset, last_offset, log_size, WIDE_OFFSET_ENTRY
        )

    def lookup_timestamp(self, timestamp: int) -> TimestampOffset:
        return lookup_timestamp_in(self._buffer(".timeindex"), self.base_offset, timestamp)

    def aborted_transactions(self) -> list[AbortedTxn]:
        if self._aborted is None:
            self._aborted = parse_transaction_index(bytes(self._buffer(".txnindex")))
        return self._aborted

    def close(self) -> None:
        for buffer in self._maps.values():
            if isinstance(buffer, mmap.mmap):
                buffer.close()
        self._maps.clear()

    def delete(self) -> None:
        self.close()
        for suffix in reversed(SUFFIXES):  # `.index` first: the entry stops existing at once
            with contextlib.suppress(FileNotFoundError):
                self.stem.with_name(self.stem.name + suffix).unlink()


def _validated(
    metadata: RemoteLogSegmentMetadata, files: dict[str, bytes], source: str
) -> dict[str, bytes]:
    """Parse what was fetched (a corrupt index fails here, not in a lookup), trim it, and
    write the offset index in 12-byte entries."""
    base = metadata.start_offset
    size = metadata.segment_size_in_bytes
    offsets = OffsetIndex.parse(files[".index"], base, f"{source}.index", log_size=size)
    offsets.check_against_segment_end(size, f"{source}.index")
    times = TimeIndex.parse(files[".timeindex"], base, f"{source}.timeindex")
    parse_transaction_index(files[".txnindex"], f"{source}.txnindex")
    return {
        ".index": offsets.to_bytes(WIDE_OFFSET_ENTRY),
        ".timeindex": files[".timeindex"][: len(times.entries) * TIME_ENTRY.size],
        ".txnindex": files[".txnindex"],
    }


class RemoteIndexCache:
    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        store: SegmentReader,
        *,
        second_level: SecondLevel | None = None,
        run_blocking: Callable[..., Awaitable[object]] | None = None,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._metrics = Instruments(SCOPE, FETCH)
        self.store = store
        self.second_level = second_level
        self._entries: OrderedDict[str, IndexEntry] = OrderedDict()
        self._loading: dict[str, asyncio.Future[IndexEntry]] = {}
        self.size_bytes = 0
        self.store_fetches = 0
        self._run_blocking = run_blocking or (lambda fn, *args: asyncio.to_thread(fn, *args))

    # -- start ------------------------------------------------------------------------

    def load(self) -> None:
        """Delete partial files and incomplete entries; reuse the complete ones, oldest first."""
        make_directory(self.directory, "remote.log.index.file.cache.dir")
        for leftover in self.directory.glob("*.tmp"):
            leftover.unlink(missing_ok=True)
        marker = self.directory / FORMAT_FILE
        if not marker.exists() or marker.read_text() != FORMAT:
            for older in self.directory.iterdir():
                if older.suffix in _KINDS:
                    older.unlink(missing_ok=True)
            marker.write_text(FORMAT)
        stems: dict[str, dict[str, Path]] = {}
        for path in self.directory.iterdir():
            if path.suffix in _KINDS and "_" in path.stem:
                stems.setdefault(path.stem, {})[path.suffix] = path
        found = []
        for stem, files in stems.items():
            if len(files) != len(SUFFIXES):
                for path in files.values():
                    path.unlink(missing_ok=True)
                continue
            base, _, segment = stem.partition("_")
            if not base.isdigit():
                continue
            stats = [files[s].stat() for s in SUFFIXES]
            entry = IndexEntry(int(base), self.directory / stem, sum(s.st_size for s in stats))
            found.append((stats[-1].st_mtime, segment, entry))
        for _, segment, entry in sorted(found, key=lambda item: item[0]):
            self._insert(segment, entry)
        self._evict()

    # -- lookups ------------------------------------------------------------------------

    def __contains__(self, metadata: RemoteLogSegmentMetadata) -> bool:
        return kafka_uuid_str(metadata.remote_log_segment_id.id) in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    async def entry(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> IndexEntry:
        """The segment's indexes, fetched (once, however many ask) on a miss."""
        key = kafka_uuid_str(metadata.remote_log_segment_id.id)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._metrics.add(REMOTE_INDEX_CACHE_HITS, 1)
            return entry
        self._metrics.add(REMOTE_INDEX_CACHE_MISSES, 1)
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.ensure_future(self._fetch(key, metadata, timeout_s))
            self._loading[key] = loading
            loading.add_done_callback(partial(self._loaded, key))
        # Shielded: a caller that gives up does not cancel the fetch others wait for.
        return await asyncio.shield(loading)

    def _loaded(self, key: str, loading: asyncio.Future[IndexEntry]) -> None:
        self._loading.pop(key, None)
        if not loading.cancelled():
            # Retrieved here: when every caller gave up before the fetch failed,
            # nobody else would, and asyncio would report the error as lost.
            loading.exception()

    async def _fetch(
        self, key: str, metadata: RemoteLogSegmentMetadata, timeout_s: float | None
    ) -> IndexEntry:
        files = None
        if self.second_level is not None:
            try:
                files = await self.second_level.get(key)
            except Exception as exc:  # a shared cache that is down only costs a fetch
                log.warning("index cache second level unavailable: %s", exc)
        if files is None or set(files) != set(SUFFIXES):
            files = await self._fetch_from_store(metadata, timeout_s)
            if self.second_level is not None:
                try:
                    await self.second_level.put(key, files)
                except Exception as exc:
                    log.warning("index cache second level unavailable: %s", exc)
        stem = self.directory / f"{metadata.start_offset}_{key}"
        files = _validated(metadata, files, str(stem))
        await self._run_blocking(_write_entry, stem, files)
        entry = IndexEntry(metadata.start_offset, stem, sum(len(b) for b in files.values()))
        self._insert(key, entry)
        self._evict(keep=key)
        return entry

    async def _fetch_from_store(
        self, metadata: RemoteLogSegmentMetadata, timeout_s: float | None
    ) -> dict[str, bytes]:
        self.store_fetches += 1
        files = {}
        # The offset index first: a deleted segment fails here, before anything else.
        for suffix in (".index", ".timeindex"):
            files[suffix] = await self.store.fetch_index(
                metadata, _KINDS[suffix], timeout_s=timeout_s
            )
        files[".txnindex"] = b""
        if not metadata.txn_index_empty:
            # Optional: a segment without aborted transactions may have none (Kafka
            # then caches an empty file, as here).
            with contextlib.suppress(RemoteResourceNotFoundError):
                files[".txnindex"] = await self.store.fetch_index(
                    metadata, IndexType.TRANSACTION, timeout_s=timeout_s
                )
        return files

    # -- bookkeeping --------------------------------------------------------------------

    def _insert(self, key: str, entry: IndexEntry) -> None:
        previous = self._entries.pop(key, None)
        if previous is not None:
            self.size_bytes -= previous.size_bytes
        self._entries[key] = entry
        self.size_bytes += entry.size_bytes

    def _evict(self, keep: str | None = None) -> None:
        """Drop least recently used entries until within the bound (never the one just added)."""
        while self.size_bytes > self.max_bytes and self._entries:
            key = next(iter(self._entries))
            if key == keep:
                if len(self._entries) == 1:
                    return  # one entry larger than the whole bound stays until the next
                self._entries.move_to_end(key)
                continue
            entry = self._entries.pop(key)
            self.size_bytes -= entry.size_bytes
            entry.delete()
            self._metrics.add(REMOTE_INDEX_CACHE_EVICTIONS, 1)

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Forget a segment (it was deleted remotely)."""
        entry = self._entries.pop(kafka_uuid_str(metadata.remote_log_segment_id.id), None)
        if entry is not None:
            self.size_bytes -= entry.size_bytes
            entry.delete()

    def close(self) -> None:
        for entry in self._entries.values():
            entry.close()


def _write_entry(stem: Path, files: dict[str, bytes]) -> None:
    for suffix in SUFFIXES:
        final = stem.with_name(stem.name + suffix)
        partial = final.with_name(final.name + ".tmp")
        with partial.open("wb") as out:
            out.write(files[suffix])
            out.flush()
            os.fsync(out.fileno())
        partial.replace(final)
