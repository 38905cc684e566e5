"""A bare grpc.aio stream of files: the contender of the services' bulk reads.

A server in its own process (as the services run) streams the files' bytes in
chunks over one unary-stream method, raw bytes, no protobuf: what gRPC itself
costs on this machine, with none of remotelog's work. Run as
`bare_stream.py <chunk bytes> <files...>`; it prints `bare serving on <address>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
from common import start

from remotelog.process.memory import keep_freed_memory

METHOD = "/bench.Bare/Stream"
MAX_MESSAGE = 16 * 1024 * 1024


async def serve(chunk: int, paths: list[str]) -> None:
    async def stream(request: bytes, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        for path in paths:
            with open(path, "rb") as handle:  # noqa: ASYNC230 - the baseline reads as simply as it can
                while data := handle.read(chunk):
                    yield data

    handler = grpc.method_handlers_generic_handler(
        "bench.Bare", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.aio.server(options=[("grpc.max_send_message_length", MAX_MESSAGE)])
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"bare serving on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


async def read(port: int) -> int:
    """One whole stream read; the bytes it held."""
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", MAX_MESSAGE)]
    ) as channel:
        call = channel.unary_stream(METHOD)(b"")
        return sum([len(chunk) async for chunk in call])


@contextlib.contextmanager
def bare_stream(chunk: int, files: list[Path]) -> Iterator[tuple[int, int]]:
    """The server running: (its pid, its port); stopped after."""
    process, line = start(
        [sys.executable, __file__, str(chunk), *map(str, files)], "bare serving on"
    )
    try:
        yield process.pid, int(line.rsplit(":", 1)[1])
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    keep_freed_memory()  # as the services do: the same heap for the baseline
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2:]))
