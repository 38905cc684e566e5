"""A URL read that fails names what failed, never the URL's signature: not in its
message, its cause or context, a traceback of it, or a log line of the reader's."""

import contextlib
import logging
import socket
import traceback

import pytest

from remotelog.client import url_reader
from remotelog.client.url_reader import UrlReader, UrlReadUnavailable, unsigned

SIGNED = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host&X-Amz-Signature=5ec4e7"


@contextlib.contextmanager
def connects_that_hang():
    """A loopback port whose accept queue is full: a new connection waits unanswered."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(0)
        fillers = []
        try:
            for _ in range(4):  # Linux takes backlog + 1 before it drops SYNs
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(listening.getsockname())
                fillers.append(filler)
            yield listening.getsockname()[1]
        finally:
            for filler in fillers:
                filler.close()


def chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


async def test_a_connect_timeout_keeps_the_signature_out_of_the_error_and_the_logs(
    caplog, monkeypatch
):
    monkeypatch.setattr(url_reader, "CONNECT_TIMEOUT_S", 0.3)
    reader = UrlReader()
    try:
        with connects_that_hang() as port, caplog.at_level(logging.DEBUG):
            url = f"http://127.0.0.1:{port}/tiered/orders-0/00000000000000000000.log?{SIGNED}"
            with pytest.raises(UrlReadUnavailable) as caught:
                async for _ in reader.read(url, 0, 99, what="segment s1", timeout_s=30):
                    pass
    finally:
        await reader.close()
    # aiohttp's own error here prints the URL whole ("Connection timeout to host ...").
    message = str(caught.value)
    assert "Timeout" in message
    assert "segment s1" in message
    assert f"127.0.0.1:{port}/tiered/orders-0/00000000000000000000.log" in message
    printed = "".join(traceback.format_exception(caught.value))
    for text in (printed, caplog.text, *map(str, chain(caught.value))):
        assert "X-Amz-Signature" not in text
        assert "5ec4e7" not in text
    assert chain(caught.value) == [caught.value]


def test_unsigned_cuts_every_urls_query_and_leaves_the_rest():
    said = f"GET https://b.s3.amazonaws.com/k.log?{SIGNED} failed; retry 'http://h/x?a=1' then"
    assert (
        unsigned(said) == "GET https://b.s3.amazonaws.com/k.log?… failed; retry 'http://h/x?…' then"
    )
    assert unsigned("no url? none") == "no url? none"


GCS_EXPIRED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code>"
    b"<Message>Invalid argument.</Message><Details>The provided token has expired.</Details>"
    b"</Error>"
)


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        (403, b"<Error><Code>AccessDenied</Code></Error>", True),  # S3, Azure: expired
        (400, GCS_EXPIRED, True),  # GCS answers an expired V4 URL so
        (400, b"<Error><Code>InvalidArgument</Code></Error>", False),
        (503, b"<Error><Code>SlowDown</Code></Error>", False),
    ],
)
async def test_each_clouds_refusal_of_a_url_is_told_from_other_failures(status, body, refused):
    """A refused URL is one the store signs again; another failure goes on by the RPC."""
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    reader = UrlReader()
    try:
        url = f"http://127.0.0.1:{port}/b/orders-0/0.log?{SIGNED}"
        with pytest.raises(UrlReadUnavailable) as caught:
            async for _ in reader.read(url, 0, 99, what="segment s1", timeout_s=10):
                pass
    finally:
        await reader.close()
        await runner.cleanup()
    assert caught.value.refused is refused
    assert str(status) in str(caught.value)
