"""A connection's kernel send buffer grows only once its client has read (httpd/wire.py): a
client that took a whole answer the kernel could not hold at once gets EARNED_SEND_BUFFER, so
its next answer goes out in one or two sends; a client that never reads keeps the listener's
small buffer, and with it the kernel memory it can pin. Real sockets on loopback, a real
event loop, the listener's own socket options."""

from __future__ import annotations

import asyncio
import socket
import time

from kube_gpu_exporter.exporter.httpd.listener import RECEIVE_BUFFER, SEND_BUFFER
from kube_gpu_exporter.exporter.httpd.wire import EARNED_SEND_BUFFER, Wire

ANSWER = b"x" * (600 << 10)  # past the small buffer and a never-reader's receive buffer


class Sink:
    """The connection above the wire: it takes nothing and asks nothing."""

    def connection_made(self, wire: Wire) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> None: ...

    def connection_lost(self, exc: BaseException | None) -> None: ...


async def answered(reads: bool) -> tuple[int, int]:
    """The server side's SO_SNDBUF before and after one answer to a client that `reads`."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(listener.getsockname())
    accepted, _ = listener.accept()
    accepted.setblocking(False)
    wire = Wire(
        accepted, Sink(), client="c", write_timeout=30, handshake_timeout=0, on_lost=lambda _: None
    )
    assert wire.start()
    before = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    wire.write(ANSWER)
    loop = asyncio.get_running_loop()
    if reads:
        got = 0
        client.setblocking(False)
        deadline = time.monotonic() + 20
        while got < len(ANSWER) and time.monotonic() < deadline:
            try:
                got += len(client.recv(1 << 20))
            except BlockingIOError:
                await asyncio.sleep(0.005)
        assert got == len(ANSWER)
        for _ in range(200):  # the loop's writer callback sees the buffer drained
            if wire.drained:
                break
            await asyncio.sleep(0.01)
        assert wire.drained
    else:
        await asyncio.sleep(0.5)
        assert not wire.drained  # the kernel holds what it could; the rest waits in views
    after = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    wire.cut()
    client.close()
    listener.close()
    await loop.shutdown_asyncgens()
    return before, after


def test_a_client_that_read_an_answer_earns_a_send_buffer_that_holds_the_next() -> None:
    before, after = asyncio.run(answered(reads=True))
    assert before == 2 * SEND_BUFFER  # Linux doubles what is asked, for its bookkeeping
    assert after == 2 * EARNED_SEND_BUFFER


def test_a_client_that_never_reads_keeps_the_small_buffer() -> None:
    before, after = asyncio.run(answered(reads=False))
    assert before == after == 2 * SEND_BUFFER
