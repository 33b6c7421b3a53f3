"""The listening sockets: accepts connections itself, caps them, and sniffs plain HTTP on TLS.

aiohttp's TCPSite hands every accepted socket straight to asyncio, which offers no connection
cap and, with TLS, answers a plain-HTTP request with a failed handshake (an empty reply). This
site runs its own accept loop instead, so each connection passes three gates first:

- **the cap** (`--web.max-connections`): over it, a connection is closed at once (with a 503
  on plain HTTP), so a flood of sockets cannot grow the exporter's memory or file table.
- **plain HTTP on a TLS port** gets exporter-toolkit's answer, Go's net/http's exact bytes
  (`400 Bad Request`, "Client sent an HTTP request to an HTTPS server."), decided from the
  first bytes peeked before the handshake, as Go decides from the TLS record header.
- **the handshake** must finish within `--web.read-header-timeout`.

Then asyncio's own transport (`connect_accepted_socket`) serves it with a `Connection`.
Listening sockets get small kernel buffers, which accepted ones inherit: requests are a few
hundred bytes, so one read of a pipelining client adds at most 16 KiB, not asyncio's 256 KiB;
and a client that never reads pins 128 KiB of kernel memory, not the 4 MiB Linux would grow
its send buffer to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, Final

from aiohttp import web

from kube_gpu_exporter.exporter.serve.connection import Connection, ConnectionLimits

log = logging.getLogger(__name__)

RECEIVE_BUFFER: Final = 8 << 10  # SO_RCVBUF; Linux doubles it for its own bookkeeping
# SO_SNDBUF: Linux would grow it to 4 MiB per connection (tcp_wmem) for a client that does not
# read, kernel memory a pod's cgroup is charged for; 128 KiB in flight still fills a 10 ms path
# at 12 MB/s.
SEND_BUFFER: Final = 64 << 10
TLS_HANDSHAKE: Final = 0x16  # the content type of a TLS record carrying a ClientHello
# What Go's net/http takes for a plain-HTTP request on a TLS port (the first 5 bytes).
HTTP_STARTS: Final = frozenset({b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"})
HTTP_ON_TLS_PORT: Final = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
OVER_CAP: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 26\r\n"
    b"Connection: close\r\n\r\ntoo many open connections\n"
)
ACCEPT_RETRY_SECONDS: Final = 0.1  # after EMFILE and the like


class Listener(web.BaseSite):
    """A site for `web.AppRunner`: binds `host:port` (every address when host is empty)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        limits: ConnectionLimits,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._limits = limits
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: set[socket.socket] = set()  # accepted, not yet handed to asyncio
        self.open_connections = 0

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every listening socket: the bound port when 0 was asked."""
        return [sock.getsockname()[:2] for sock in self._sockets]

    async def start(self) -> None:
        await super().start()
        self._sockets = await _bind(self._host, self._port, self._backlog)
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            self._spawn(loop, self._accept(sock))

    async def stop(self) -> None:
        """Stop accepting, drop connections not yet handed over, and cut responses clients are
        not reading; aiohttp's runner then lets the other requests finish."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in (*self._sockets, *self._pending):
            sock.close()
        self._sockets.clear()
        if self._runner.server is not None:
            for connection in self._runner.server.connections:
                if isinstance(connection, Connection):
                    connection.stop()
        await super().stop()

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors, a connection reset in the queue
                log.debug("accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            sock.setblocking(False)
            if self.open_connections >= self._limits.max_connections:
                log.debug("client %s: over --web.max-connections; closing", _peer(peer))
                if self._ssl_context is None:
                    with contextlib.suppress(OSError):
                        sock.send(OVER_CAP)
                _discard(sock)
                continue
            self.open_connections += 1
            self._spawn(loop, self._serve(sock, peer))

    async def _serve(self, sock: socket.socket, peer: object) -> None:
        """Sniff (TLS only), then hand the socket to asyncio; the count drops once, whenever
        the connection ends."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open_connections -= 1

        self._pending.add(sock)
        try:
            if self._ssl_context is not None and not await self._is_tls(sock, peer):
                _discard(sock)
                release()
                return
            self._pending.discard(sock)
            loop = asyncio.get_running_loop()
            if self._ssl_context is None:
                await loop.connect_accepted_socket(lambda: self._connection(release), sock)
            else:
                await loop.connect_accepted_socket(
                    lambda: self._connection(release),
                    sock,
                    ssl=self._ssl_context,
                    ssl_handshake_timeout=self._limits.read_header_timeout or None,
                )
        except (OSError, TimeoutError, ConnectionError) as exc:  # ssl.SSLError is an OSError
            log.debug("client %s: %s: %s", _peer(peer), type(exc).__name__, exc)
            sock.close()
            release()
        except BaseException:
            sock.close()
            release()
            raise
        finally:
            self._pending.discard(sock)

    def _connection(self, release: Callable[[], None]) -> Connection:
        server = self._runner.server
        assert server is not None
        return Connection(
            server,
            self._limits,
            release,
            loop=asyncio.get_running_loop(),
            access_log=None,
        )

    async def _is_tls(self, sock: socket.socket, peer: object) -> bool:
        """Whether the client opens with a TLS record; plain HTTP gets Go's 400 here."""
        start = await _peek(sock, 5, self._limits.read_header_timeout)
        if start in HTTP_STARTS:
            log.debug("client %s: plain HTTP on the TLS port; answered 400", _peer(peer))
            with contextlib.suppress(OSError):
                sock.send(HTTP_ON_TLS_PORT)
            return False
        return bool(start)


async def _peek(sock: socket.socket, size: int, timeout: float) -> bytes:
    """The first `size` bytes without consuming them, so TLS still sees its ClientHello; fewer
    when the client opens with a TLS record or hangs up; TimeoutError after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    while True:
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), _settle, readable)
        try:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            await asyncio.wait_for(readable, left)
        finally:
            loop.remove_reader(sock.fileno())
        start = sock.recv(size, socket.MSG_PEEK)
        if len(start) >= size or not start or start[0] == TLS_HANDSHAKE:
            return start
        await asyncio.sleep(0.02)  # a partial start of a request: wait for the rest


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _discard(sock: socket.socket) -> None:
    """Close after reading what the client already sent, so the kernel sends a FIN (and our
    last words) rather than a reset that may destroy them."""
    with contextlib.suppress(OSError):
        for _ in range(4):
            if not sock.recv(RECEIVE_BUFFER):
                break
    sock.close()


async def _bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address `host` resolves to, as asyncio's create_server
    binds them; OSError when one cannot be bound."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _peer(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
