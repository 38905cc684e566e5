"""Version-2 segments in the store: the log and indexes cut into chunks, each compressed
and encrypted on the way in, and only the chunks a read needs fetched and opened on
the way out. Chunks are encoded and decoded in the store's bounded executor."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from remotelog.core.errors import RemoteStorageError
from remotelog.core.model import RemoteLogSegmentMetadata
from remotelog.kafka.records import batches_compressed
from remotelog.segmentstore.backend import Chunk, Upload
from remotelog.segmentstore.key_providers import UnwrappedKeys
from remotelog.segmentstore.layout import Manifest, SegmentTransforms, WrappedDataKey
from remotelog.transforms.chunks import (
    ChunkCodec,
    ChunkIndex,
    DataKey,
    SegmentObjectKind,
)

ZSTD = "zstd"


@dataclass(frozen=True, slots=True)
class TransformOptions:
    """How the store writes new segments, and what it reads transformed ones with."""

    chunk_size: int
    compression_level: int | None  # None: new segments are not compressed
    compression_heuristic: bool  # skip a segment whose batches Kafka already compressed
    encrypt: bool  # new segments are encrypted under `keys`' active key
    keys: UnwrappedKeys | None  # None: no key provider, encrypted segments are unreadable
    threads: int = 4  # the executor that encodes and decodes chunks
    decoded_cache_bytes: int = 64 * 1024 * 1024  # chunks kept decoded (DecodedChunks)

    @property
    def transforms_new_segments(self) -> bool:
        return self.compression_level is not None or self.encrypt


def codec_of(
    metadata: RemoteLogSegmentMetadata,
    kind: SegmentObjectKind,
    compression_level: int | None,
    data_key: DataKey | None,
) -> ChunkCodec:
    segment_id = metadata.remote_log_segment_id
    return ChunkCodec(
        segment_id.topic_id_partition.topic_id, segment_id.id, kind, compression_level, data_key
    )


class ChunkingUpload:
    """An upload of an object's stored chunks: bytes written are cut into chunks of the
    original, each encoded in `executor` and written as it is ready. The first chunk
    decides, where the heuristic is on, whether the segment is compressed at all."""

    def __init__(
        self,
        upload: Upload,
        chunk_size: int,
        encode: Callable[[int, bytes], Awaitable[bytes]],
    ) -> None:
        self._upload, self._chunk_size, self._encode = upload, chunk_size, encode
        self._pending = bytearray()
        self._stored_sizes: list[int] = []
        self._original_size = 0

    async def write(self, data: Chunk) -> None:
        self._pending += data
        self._original_size += len(data)
        while len(self._pending) >= self._chunk_size:
            chunk = bytes(self._pending[: self._chunk_size])
            del self._pending[: self._chunk_size]
            await self._write_chunk(chunk)

    async def _write_chunk(self, chunk: bytes) -> None:
        stored = await self._encode(len(self._stored_sizes), chunk)
        self._stored_sizes.append(len(stored))
        await self._upload.write(stored)

    async def complete(self) -> int:
        """The upload made visible; its bytes stored (its chunks' index: `index`)."""
        if self._pending:
            await self._write_chunk(bytes(self._pending))
            self._pending.clear()
        return await self._upload.complete()

    @property
    def index(self) -> ChunkIndex:
        return ChunkIndex(self._chunk_size, self._original_size, tuple(self._stored_sizes))

    async def abort(self) -> None:
        await self._upload.abort()


class SegmentEncoder:
    """What one copy needs to write a version-2 segment: its data key (fresh, from the
    provider's active key) and a codec per object."""

    def __init__(
        self,
        options: TransformOptions,
        executor: Executor,
        metadata: RemoteLogSegmentMetadata,
        data_key: DataKey | None,
    ) -> None:
        self.options, self.executor, self.metadata = options, executor, metadata
        self.data_key = data_key
        self.compression_level = options.compression_level
        self._decided = not options.compression_heuristic

    @classmethod
    async def new(
        cls, options: TransformOptions, executor: Executor, metadata: RemoteLogSegmentMetadata
    ) -> SegmentEncoder:
        data_key = None
        if options.encrypt:
            assert options.keys is not None
            data_key = await options.keys.new_data_key()
        return cls(options, executor, metadata, data_key)

    async def _encode(self, kind: SegmentObjectKind, number: int, chunk: bytes) -> bytes:
        if kind is SegmentObjectKind.LOG and not self._decided:
            self._decided = True
            if self.compression_level is not None and batches_compressed(chunk):
                self.compression_level = None
        codec = codec_of(self.metadata, kind, self.compression_level, self.data_key)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, codec.encode, number, chunk)

    def log_upload(self, upload: Upload) -> ChunkingUpload:
        async def encode(number: int, chunk: bytes) -> bytes:
            return await self._encode(SegmentObjectKind.LOG, number, chunk)

        return ChunkingUpload(upload, self.options.chunk_size, encode)

    async def indexes(self, body: bytes) -> tuple[ChunkIndex, bytes]:
        chunk_size = self.options.chunk_size
        stored = [
            await self._encode(SegmentObjectKind.INDEXES, number, body[start : start + chunk_size])
            for number, start in enumerate(range(0, len(body), chunk_size))
        ]
        index = ChunkIndex(chunk_size, len(body), tuple(len(s) for s in stored))
        return index, b"".join(stored)

    def transforms(self, log: ChunkIndex, indexes: ChunkIndex) -> SegmentTransforms:
        key = self.data_key
        wrapped = None if key is None else WrappedDataKey(key.key_provider, key.key_id, key.wrapped)
        return SegmentTransforms(
            log, indexes, ZSTD if self.compression_level is not None else None, wrapped
        )


async def data_key_of(
    manifest: Manifest, keys: UnwrappedKeys | None, source: str
) -> DataKey | None:
    """The segment's data key, unwrapped (None: the segment is not encrypted)."""
    transforms = manifest.transforms
    assert transforms is not None
    wrapped = transforms.encryption
    if wrapped is None:
        return None
    if keys is None:
        raise RemoteStorageError(
            f"{source}: encrypted under key {wrapped.key_id} of key provider "
            f"{wrapped.key_provider}, and this store has none (encryption.key.provider)"
        )
    plaintext = await keys.plaintext(wrapped)
    return DataKey(plaintext, wrapped.key_provider, wrapped.key_id, wrapped.wrapped)


class DecodedChunks:
    """Chunks decoded lately, within `max_bytes`: Kafka reads a segment one fetch (1 MiB)
    at a time, and each fetch would otherwise decode its whole chunk (4 MiB) again."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0

    def get(self, key: str, number: int) -> bytes | None:
        found = self._chunks.get((key, number))
        if found is not None:
            self._chunks.move_to_end((key, number))
        return found

    def put(self, key: str, number: int, original: bytes) -> None:
        if len(original) > self.max_bytes or (key, number) in self._chunks:
            return
        self._chunks[key, number] = original
        self._bytes += len(original)
        while self._bytes > self.max_bytes:
            _, dropped = self._chunks.popitem(last=False)
            self._bytes -= len(dropped)


async def read_original(
    manifest: Manifest,
    kind: SegmentObjectKind,
    first: int,
    last: int,
    data_key: DataKey | None,
    read: Callable[[int, int], AsyncGenerator[Chunk, None]],
    executor: Executor,
    decoded: DecodedChunks,
    key: str,
    piece_bytes: int,
) -> AsyncGenerator[Chunk, None]:
    """Original bytes `first`..`last` of a version-2 object (`key`), by its chunks: `read`
    (stored first..last) fetches one chunk's stored bytes, each authenticated and
    decoded whole before any of its bytes is yielded; chunks decoded lately are taken
    from `decoded`."""
    transforms = manifest.transforms
    assert transforms is not None
    if last < first:
        return
    index = transforms.log_chunks if kind is SegmentObjectKind.LOG else transforms.indexes_chunks
    first_chunk, last_chunk = index.chunks_of(first, last)
    # Decoding needs no compression level: the flag of each chunk says.
    codec = codec_of(manifest.metadata, kind, None, data_key)
    loop = asyncio.get_running_loop()
    for number in range(first_chunk, last_chunk + 1):
        original = decoded.get(key, number)
        if original is None:
            stored_first, stored_last = index.stored_range(number, number)
            pieces = []
            chunks = read(stored_first, stored_last)
            async with contextlib.aclosing(chunks):
                async for piece in chunks:
                    pieces.append(bytes(piece))
            stored = b"".join(pieces)
            if len(stored) != index.stored_sizes[number]:
                raise RemoteStorageError(
                    f"segment {manifest.metadata.remote_log_segment_id.id}: its "
                    f"{kind.name.lower()} object ends within chunk {number}"
                )
            original = await loop.run_in_executor(
                executor, codec.decode, number, stored, index.original_size_of(number)
            )
            decoded.put(key, number, original)
        part = index.within(number, first, last)
        # In pieces no larger than a plain read's: Kafka takes one fetch (1 MiB) and
        # closes, and what was already sent of a whole 4 MiB chunk is wasted.
        view = memoryview(original)
        for start in range(part.start, part.stop, piece_bytes):
            yield view[start : min(start + piece_bytes, part.stop)]
