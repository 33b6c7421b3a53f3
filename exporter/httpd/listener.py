"""The listening sockets: accepts connections itself and shares them fairly by client address.

asyncio's servers hand every accepted socket straight to a transport and offer no connection
cap. The listener runs its own accept loop instead, so each connection passes the client table
first (client_shares.py):

- **its address's share** (`--web.max-connections-per-client`) and **the global cap**
  (`--web.max-connections`): a newcomer over either displaces an open connection that has no
  request in the app (its own address's first, then the heaviest address's, then anyone's),
  the one idle longest; a 429 (over its share) or a place in a small overflow (over the cap:
  OVERFLOW connections that answer the kubelet's probes and nothing else, 503 with
  Retry-After) only when every candidate is busy; beyond that, it is closed at once (503 on
  plain HTTP).

Then a `Wire` serves its socket (wire.py: views sent by sendmsg, the write timeout, a lingering
close; tls_wire.py on a TLS port: TLS by memory BIOs, Go's 400 for plain HTTP, the handshake
within `--web.read-header-timeout`) to a `Connection` (connection.py: HTTP/1.1).
Listening sockets get small kernel buffers, which accepted ones inherit: requests are a few
hundred bytes, so one read adds at most 16 KiB; and a client that never reads pins ~64 KiB of
kernel memory, not the 4 MiB Linux would grow its send buffer to.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Final

from kube_gpu_exporter.exporter.httpd.answer_head import raw_response
from kube_gpu_exporter.exporter.httpd.client_shares import (
    ConnectionTable,
    Verdict,
    client_address,
)
from kube_gpu_exporter.exporter.httpd.connection import Connection, ConnectionLimits
from kube_gpu_exporter.exporter.httpd.heap_trim import HeapTrim
from kube_gpu_exporter.exporter.httpd.tls_wire import TlsWire
from kube_gpu_exporter.exporter.httpd.web import App
from kube_gpu_exporter.exporter.httpd.wire import Wire

log = logging.getLogger(__name__)

RECEIVE_BUFFER: Final = 8 << 10  # SO_RCVBUF; Linux doubles it for its own bookkeeping
# SO_SNDBUF, doubled by Linux likewise: it would grow it to 4 MiB per connection (tcp_wmem)
# for a client that does not read, kernel memory a pod's cgroup is charged for; 64 KiB in
# flight still fills a 10 ms path at 6 MB/s, a gzipped scrape in a round trip or two. A client
# that has read a whole answer earns a larger one (wire.py's EARNED_SEND_BUFFER).
SEND_BUFFER: Final = 32 << 10
# Connections the kernel completes before we accept them. At 128 (the old default), thousands
# of addresses reconnecting overflowed it and the kernel dropped SYNs, the scraper's and the
# probes' among them (a retry a second later, then three: a probe timed out). Go's listeners
# ask for the system's maximum; a queued connection costs the kernel a socket and what its
# client sent, so 1,024 (capped by net.core.somaxconn).
BACKLOG: Final = 1024
ACCEPT_BATCH: Final = 16  # accepts between two turns of the loop (see _accept)
OVERFLOW: Final = 32  # probe-only connections beyond --web.max-connections
OVERFLOW_TIMEOUT: Final = 2.0  # seconds such a connection may take to ask
ACCEPT_RETRY_SECONDS: Final = 0.1  # after EMFILE and the like
DRAIN_POLL_SECONDS: Final = 0.02


class Listener:
    """`app` served on `host:port` (every address when host is empty)."""

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        limits: ConnectionLimits,
        ssl_context: ssl.SSLContext | None = None,
        ssl_contexts: Callable[[], ssl.SSLContext] | None = None,
        backlog: int = BACKLOG,
    ) -> None:
        self._app = app
        self._ssl_context = ssl_context
        # Asked on each new connection, when given: a certificate rotated in place is served
        # from the next connection on.
        self._ssl_contexts = ssl_contexts
        self._backlog = backlog
        self._host = host
        self._port = port
        self._limits = limits
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._table: ConnectionTable[Wire] = ConnectionTable(
            limits.max_connections, limits.max_connections_per_client, self._busy
        )
        self._overflow: set[Wire] = set()
        self._connections: dict[Wire, Connection] = {}
        self._heap = HeapTrim(lambda: len(self._connections), self._later)
        headers = limits.headers
        self._client_full = raw_response(
            429, "Too Many Requests", "too many connections from your address\n", headers, True
        )
        self._full = raw_response(
            503, "Service Unavailable", "too many open connections\n", headers, True
        )

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every listening socket: the bound port when 0 was asked."""
        return [sock.getsockname()[:2] for sock in self._sockets]

    @property
    def open_connections(self) -> int:
        return len(self._table) + len(self._overflow)

    async def start(self) -> None:
        self._sockets = await _bind(self._host, self._port, self._backlog)
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            self._spawn(loop, self._accept(sock))

    async def stop(self, drain_seconds: float) -> None:
        """Stop accepting; cut answers clients are not reading and close idle connections;
        let the requests being handled finish for `drain_seconds` at most, then end them all."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        for connection in list(self._connections.values()):
            connection.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_seconds
        while loop.time() < deadline and any(
            connection.task is not None or not wire.drained
            for wire, connection in self._connections.items()
        ):
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        for connection in list(self._connections.values()):
            if connection.task is not None:
                connection.task.cancel()
        for wire in list(self._connections):
            wire.cut()

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> None:
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        accepted = 0
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors, a connection reset in the queue
                log.debug("accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            sock.setblocking(False)
            self._admit(sock, client_address(peer))
            accepted += 1
            # An accept with a queue waiting completes without yielding. A turn of the loop
            # every ACCEPT_BATCH lets the connections just admitted read the requests they
            # have likely sent before a burst behind them could displace them as idle (fewer
            # than an address's share come in between); more often, and a crowd reconnecting
            # overflows the listen queue, whose SYNs the kernel then drops, probes' included.
            if accepted % ACCEPT_BATCH == 0:
                await asyncio.sleep(0)

    def _admit(self, sock: socket.socket, client: str) -> None:
        admission = self._table.admit(client)
        if admission.verdict is Verdict.CLIENT_FULL:
            log.debug("client %s: its every connection has a request in hand; closing", client)
            self._refuse(sock, self._client_full)
            return
        if admission.evicted is not None:
            log.debug(
                "client %s: connections full; displaced one of %s's, idle the longest",
                client,
                admission.evicted.client,
            )
            admission.evicted.cut()
        if admission.verdict is Verdict.ADMIT:
            wire = self._wire(sock, client, probes_only=False)
            wire.on_active = self._table.touch
            self._table.add(client, wire)
        elif len(self._overflow) < OVERFLOW:
            wire = self._wire(sock, client, probes_only=True)
            self._overflow.add(wire)
        else:
            log.debug("client %s: over --web.max-connections; closing", client)
            self._refuse(sock, self._full)
            return
        if wire.start():
            wire.read_now()

    def _refuse(self, sock: socket.socket, answer: bytes) -> None:
        if self._ssl_context is None:
            with contextlib.suppress(OSError):
                sock.send(answer)
        _discard(sock)

    def _wire(self, sock: socket.socket, client: str, probes_only: bool) -> Wire:
        limits = self._limits
        if probes_only:
            limits = replace(limits, read_header_timeout=OVERFLOW_TIMEOUT)
        connection = Connection(self._app, limits, probes_only=probes_only)
        tls = self._ssl_contexts() if self._ssl_contexts else self._ssl_context
        kind = Wire if tls is None else functools.partial(TlsWire, tls=tls)
        wire = kind(
            sock,
            connection,
            client=client,
            write_timeout=limits.write_timeout,
            handshake_timeout=limits.read_header_timeout,
            on_lost=self._lost,
        )
        self._connections[wire] = connection
        self._heap.changed()
        return wire

    def _later(self, delay: float, callback: Callable[[], None]) -> None:
        asyncio.get_running_loop().call_later(delay, callback)

    def _busy(self, wire: Wire) -> bool:
        """Whether the app is handling a request of `wire` (a password check): not displaced."""
        connection = self._connections.get(wire)
        return connection is not None and connection.task is not None

    def _lost(self, wire: Wire) -> None:
        self._table.remove(wire.client, wire)
        self._overflow.discard(wire)
        self._connections.pop(wire, None)
        self._heap.changed()


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
