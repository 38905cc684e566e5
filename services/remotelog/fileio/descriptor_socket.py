"""Messages with file descriptors over a unix socket, on the event loop.

The segment store's short-circuit channel (segmentstore/short_circuit.py) and
its client both speak it: SOCK_SEQPACKET, so each send is one whole message
(no framing to parse, no partial reads), and descriptors ride along as
SCM_RIGHTS. asyncio has no recvmsg/sendmsg of its own; these wait for the
socket with add_reader/add_writer and retry the non-blocking call.

Each message starts with a version byte: a message must never be empty (an
empty read is how SEQPACKET says the peer closed, and a protobuf message of
defaults serializes to nothing), and a later format can be told apart.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

VERSION = b"\x01"


class DescriptorSocketError(OSError):
    """The peer sent what the channel does not carry (a message or descriptors too many)."""


async def _ready(sock: socket.socket, *, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


async def receive(
    sock: socket.socket, max_bytes: int, max_fds: int
) -> tuple[bytes, list[int]] | None:
    """The next message and the descriptors it carried (now the caller's to close);
    None once the peer has closed."""
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(sock, max_bytes + 1, max_fds)
        except BlockingIOError:
            await _ready(sock, writable=False)
            continue
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            # The kernel closed the descriptors that did not fit; these are dropped too.
            close_all(fds)
            raise DescriptorSocketError(
                f"a message over {max_bytes} bytes or {max_fds} descriptors"
            )
        if not data and not fds:
            return None
        if data[:1] != VERSION:
            close_all(fds)
            raise DescriptorSocketError(f"a message of an unknown version {data[:1]!r}")
        return data[1:], fds


async def send(sock: socket.socket, data: bytes, fds: Sequence[int] = ()) -> None:
    """One message; the descriptors are duplicated into the peer, still the caller's here."""
    while True:
        try:
            socket.send_fds(sock, [VERSION, data], list(fds))
            return
        except BlockingIOError:
            await _ready(sock, writable=True)


def seqpacket_socket() -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setblocking(False)
    return sock
