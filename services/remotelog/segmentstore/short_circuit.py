"""The segment store's short-circuit channel: descriptors instead of bytes, for clients
on the same host (protos/.../short_circuit.proto; HDFS's short-circuit local reads).

A fetch is answered with a read-only descriptor of the stored log file, so the
caller reads the page cache itself: no byte crosses a socket, where the
FetchLogSegment stream copies each one four times and puts it through TCP. A
copy brings the descriptors of the broker's segment files; the filesystem
backend has the kernel copy them (copy_file_range), the S3 backend reads them
in blocks. Requests are checked and counted as the gRPC calls are, by the same
SegmentStore; errors travel as the google.rpc.Status a call would end with.

Who may connect is the socket file's mode (owner and group) and the directory
it is in, as for any unix socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator

from google.protobuf.message import DecodeError

from remotelog.api.segmentstore.v1 import segment_store_pb2
from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb
from remotelog.core.deadline import deadline_after
from remotelog.core.errors import DeadlineExceededError, InvalidArgumentError
from remotelog.core.model import SegmentFile
from remotelog.fileio import descriptor_socket
from remotelog.protocol.convert import segment_file_from_proto, segment_metadata_from_proto
from remotelog.rpc.errors import status_for
from remotelog.rpc.server import unix_socket_in_use
from remotelog.segmentstore.store import FileSlice, SegmentChunk, SegmentStore

log = logging.getLogger(__name__)
# A request is a segment's metadata; its leader epochs make the largest ones.
MAX_REQUEST_BYTES = 1024 * 1024
# The files of a segment: log, three indexes, producer snapshot, epoch checkpoint.
MAX_FILES = len(SegmentFile)
# Without a caller's timeout, the most a request may take (a copy to S3).
DEFAULT_TIMEOUT_S = 300.0
SOCKET_MODE = 0o660
_FETCH = "/remotelog.api.segmentstore.v1.ShortCircuit/FetchLogSegment"
_COPY = "/remotelog.api.segmentstore.v1.ShortCircuit/CopyLogSegmentData"


def _lent_files(copy: pb.ShortCircuitCopy, fds: list[int]) -> list[tuple[SegmentFile, int, int]]:
    """(file, descriptor, size) of each lent file, after checking what came is usable."""
    if len(fds) != len(copy.files):
        raise InvalidArgumentError(
            "files", f"{len(copy.files)} files named but {len(fds)} descriptors came"
        )
    lent, seen = [], set()
    for kind, fd in zip(copy.files, fds, strict=True):
        file = segment_file_from_proto(kind, "files")
        if file in seen:
            raise InvalidArgumentError("files", f"the {file.value} file is named twice")
        seen.add(file)
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise InvalidArgumentError("files", f"the {file.value} descriptor is not a file")
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
            raise InvalidArgumentError("files", f"the {file.value} descriptor is not readable")
        lent.append((file, fd, status.st_size))
    return lent


class ShortCircuitServer:
    def __init__(self, path: str, store: SegmentStore) -> None:
        self.path = path
        self.store = store
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # requests being answered

    async def start(self) -> None:
        if unix_socket_in_use(self.path, socket.SOCK_SEQPACKET):
            raise OSError(f"short.circuit.socket.path: {self.path!r} is in use by a running server")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)  # left by a server that was killed
        listener = descriptor_socket.seqpacket_socket()
        try:
            listener.bind(self.path)
            os.chmod(self.path, SOCKET_MODE)
            listener.listen(128)
        except OSError as exc:
            listener.close()
            raise OSError(
                f"short.circuit.socket.path: cannot listen on {self.path!r} ({exc.strerror})"
            ) from None
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept(listener))

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(listener)
            connection.setblocking(False)
            task = asyncio.create_task(self._serve(connection))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, connection: socket.socket) -> None:
        with connection:
            while True:
                try:
                    received = await descriptor_socket.receive(
                        connection, MAX_REQUEST_BYTES, MAX_FILES
                    )
                except OSError as exc:
                    log.warning("short circuit: dropping a connection: %s", exc)
                    return
                if received is None:
                    return
                answer = asyncio.create_task(self._answer(connection, *received))
                self._busy.add(answer)
                answer.add_done_callback(self._busy.discard)
                try:
                    await answer
                except OSError as exc:  # the caller left before its answer
                    log.info("short circuit: could not answer: %s", exc)
                    return

    async def _answer(self, connection: socket.socket, data: bytes, fds: list[int]) -> None:
        sent: list[int] = []
        try:
            response = await self._handle(data, fds, sent)
            await descriptor_socket.send(connection, response.SerializeToString(), sent)
        finally:
            descriptor_socket.close_all([*fds, *sent])

    async def _handle(
        self, data: bytes, fds: list[int], sent: list[int]
    ) -> pb.ShortCircuitResponse:
        method = ""
        timeout_s = DEFAULT_TIMEOUT_S
        try:
            try:
                request = pb.ShortCircuitRequest.FromString(data)
            except DecodeError:
                raise InvalidArgumentError("request", "not a ShortCircuitRequest") from None
            timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else DEFAULT_TIMEOUT_S
            which = request.WhichOneof("request")
            with deadline_after(timeout_s):
                async with asyncio.timeout(timeout_s):
                    if which == "fetch_log_segment":
                        method = _FETCH
                        if fds:
                            raise InvalidArgumentError("files", "a fetch brings no descriptors")
                        return await self._fetch(request.fetch_log_segment, sent)
                    if which == "copy_log_segment_data":
                        method = _COPY
                        return await self._copy(request.copy_log_segment_data, fds)
            raise InvalidArgumentError("request", "names neither a fetch nor a copy")
        except TimeoutError:
            error = DeadlineExceededError(f"not done within {timeout_s:g} s")
            return pb.ShortCircuitResponse(status=status_for(error, method)[1].SerializeToString())
        except Exception as exc:
            _, status = status_for(exc, method)
            return pb.ShortCircuitResponse(status=status.SerializeToString())

    async def _fetch(
        self, request: segment_store_pb2.FetchLogSegmentRequest, sent: list[int]
    ) -> pb.ShortCircuitResponse:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        end = request.end_position if request.HasField("end_position") else None
        fd, size = await self.store.open_log_segment(metadata, request.start_position, end)
        sent.append(fd)
        return pb.ShortCircuitResponse(object_size=size)

    async def _copy(self, copy: pb.ShortCircuitCopy, fds: list[int]) -> pb.ShortCircuitResponse:
        metadata = segment_metadata_from_proto(copy.metadata, "metadata")
        lent = _lent_files(copy, fds)
        for file, _, size in lent:
            if file is SegmentFile.LOG and size != metadata.segment_size_in_bytes:
                raise InvalidArgumentError(
                    "metadata.segment_size_in_bytes",
                    f"is {metadata.segment_size_in_bytes} but the lent log file has {size} bytes",
                )

        async def chunks() -> AsyncIterator[SegmentChunk]:
            for file, fd, size in lent:
                yield SegmentChunk(file, 0, FileSlice(fd, 0, size))

        custom = await self.store.copy_log_segment_data(metadata, chunks())
        return pb.ShortCircuitResponse(custom_metadata=custom)

    async def close(self, drain_s: float = 10.0) -> None:
        """Stop taking connections; requests under way get `drain_s` to finish."""
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        if self._busy:
            await asyncio.wait(set(self._busy), timeout=drain_s)
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
