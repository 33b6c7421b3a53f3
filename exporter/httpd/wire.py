"""The bytes between a client's socket and its connection: own socket I/O and a zero-copy outbox.

asyncio's own transports cost what an untrusted network can multiply. Its TLS transport keeps a
256 KiB read buffer per connection (RSS that is not returned after the close), and every
transport copies what the kernel does not take at once into a buffer of its own, so a client
that never reads pins a copy of a whole response. A `Wire` owns the accepted socket instead
(the event loop's reader and writer callbacks on its descriptor) and serves the connection
above it (connection.py):

- **reads** land in one buffer that every connection shares (each read is handed on before the
  next one starts); on a TLS port, `TlsWire` (tls_wire.py) decrypts them;
- **writes** are queued as views of the bytes given (a pre-rendered body is shared, never
  copied) and handed to the kernel a chunk at a time in one `sendmsg`; what the kernel
  refuses stays a view, so a client that does not read pins none of our memory beyond its
  kernel buffers (TLS: at most one encrypted record, RECORD bytes);
- **a send buffer earned by reading**: a connection starts with the listener's small kernel
  send buffer, and once the kernel first refused some of an answer and the client then took
  all of it, its buffer grows to hold a node's whole body (EARNED_SEND_BUFFER) and its chunks
  with it: a scraper's answer goes out in one or two sends instead of waiting on the client
  round after round, while a client that never reads keeps the small buffer;
- **the connection is never paused**: a handler never waits on a client; the connection reads
  no further request until the last answer is in the kernel instead (`drained`, `on_drained`);
- **the write timeout** (`--web.write-timeout`): output must reach the kernel within it, from
  the moment the kernel first refused some; otherwise the connection is `cut`: a reset, which
  also drops what the kernel still held for it (a plain close keeps that until the peer's
  window probes time out, about two minutes);
- **a close** sends what is queued, then reads (and drops) what the client already sent before
  closing the socket, which then ends with a FIN: closing with unread bytes would send a reset
  that can destroy the answer on its way;
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol

from kube_gpu_exporter.exporter.httpd.outbox import Outbox

log = logging.getLogger(__name__)

READ_SIZE: Final = 16 << 10  # one TLS record; the listener's receive buffer holds ~16 KiB
# Handed to the kernel per call. Views cost no memory while they wait, so a chunk bounds only
# the syscalls: smaller chunks mean more of them per body, and more CPU (bench/README.md). A
# chunk stays under half the send buffer: on loopback (64 KiB segments) one larger chunk in a
# full buffer is one segment the client's delayed ACK holds back 40 ms.
CHUNK: Final = 32 << 10
# SO_SNDBUF of a connection whose client has taken a whole answer that the kernel could not
# hold at once (Linux doubles it): the node's body fits, so the kernel takes it in one go; the
# listener's smaller buffer (listener.py's SEND_BUFFER) is what a client that never read keeps.
EARNED_SEND_BUFFER: Final = 128 << 10
EARNED_CHUNK: Final = 128 << 10
DISCARD_READS: Final = 4  # reads of what a client sent, dropped before a close
RESET_ON_CLOSE: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset

# Every read of every connection lands here first and is handed on before the next read.
_READ_BUFFER: Final = memoryview(bytearray(READ_SIZE))


class Above(Protocol):
    """What a wire serves: the connection (connection.py)."""

    def connection_made(self, wire: Wire) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> None:
        """The client sent its FIN: answer what it asked, then `close`."""

    def connection_lost(self, exc: BaseException | None) -> None: ...


class _Gone:
    """What a wire calls once it has ended and let its connection go: nothing."""

    def connection_made(self, wire: Wire) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> None: ...

    def connection_lost(self, exc: BaseException | None) -> None: ...


GONE: Final = _Gone()


class Wire:
    """One accepted plain-HTTP connection: its socket below, `app` above.

    `on_lost` runs once when the connection has ended, whatever ended it (the listener's
    count); `on_active` runs whenever the connection makes progress (a whole request read, an
    answer taken whole by the kernel), which tells the listener whom to evict last."""

    def __init__(
        self,
        sock: socket.socket,
        app: Above,
        *,
        client: str,
        write_timeout: float,
        handshake_timeout: float,
        on_lost: Callable[[Wire], None],
    ) -> None:
        self.client = client
        self.on_active: Callable[[Wire], None] | None = None
        self.on_drained: Callable[[], None] | None = None
        self._sock = sock
        self._fd = sock.fileno()
        self._app = app
        self._write_timeout = write_timeout
        self._handshake_timeout = handshake_timeout
        self._on_lost: Callable[[Wire], None] | None = on_lost
        self._loop = asyncio.get_running_loop()
        self._peer: Any = None
        self._outbox = Outbox()
        self._reading = False
        self._kernel_full = False  # the kernel refused some: waiting to be writable
        self.chunk = CHUNK  # bytes handed to the kernel per sendmsg (grows once earned)
        self._closing = False  # no more writes taken; closes once drained
        self._peer_done = False  # the client sent its FIN
        self._gone = False
        self._app_connected = False
        self._write_timer: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None  # TLS's handshake timer
        self._sealed = Outbox()  # bytes for the socket as they are (TLS records, Go's 400)

    def start(self) -> bool:
        """Start reading and hand the connection to `app`; False if it is gone already."""
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._peer = self._sock.getpeername()
        except OSError as exc:  # reset while it waited in the accept queue
            self._lose(exc)
            return False
        self.resume_reading()
        self._connect_app()
        return True

    def read_now(self) -> None:
        """Read what the client sent while it waited in the accept queue, now rather than at
        the loop's next turn: under a burst of connections, a scraper's request is usually
        there already, and once read it is in use, not an idle socket a newcomer displaces."""
        if self._reading and not self._gone:
            self._readable()

    # --- what the connection calls ------------------------------------------------------

    def write(self, *pieces: bytes | bytearray | memoryview) -> None:
        """Queue `pieces` (views of them) and hand the kernel what it takes now: an answer's
        head and body go out in one sendmsg."""
        if self._closing or self._gone:
            return
        for data in pieces:
            self._outbox.append(data)
        if not self._kernel_full:
            self._pump()

    def close(self) -> None:
        """Close once everything queued is in the kernel (TLS: after a close_notify)."""
        if self._closing:
            return
        self._closing = True
        if self.drained:
            self._finish()

    def cut(self) -> None:
        """End the connection now with a reset: the kernel drops what it still holds for the
        client instead of trying to deliver it for minutes."""
        if self._gone:
            return
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        self._lose(None)

    def is_closing(self) -> bool:
        return self._closing or self._gone

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._gone and not self._peer_done:
            self._reading = True
            self._loop.add_reader(self._fd, self._readable)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peer
        if name == "socket":
            return self._sock
        return default

    @property
    def drained(self) -> bool:
        """Whether everything written so far is in the kernel."""
        return not self._outbox and not self._sealed and not self._kernel_full

    def note_request(self) -> None:
        """The client sent a whole request: it is in use, not a socket left open."""
        if self.on_active is not None:
            self.on_active(self)

    # --- the socket -----------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            n = self._sock.recv_into(_READ_BUFFER)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not n:
            self._eof()
            return
        self._received(bytes(_READ_BUFFER[:n]))

    def _received(self, data: bytes) -> None:
        self._app.data_received(data)

    def _eof(self) -> None:
        """The client will send no more: the connection answers what it asked (what is queued
        still goes out), then closes."""
        self._peer_done = True
        self.pause_reading()
        if self._app_connected and not self._closing:
            self._app.eof_received()
        else:
            self.close()

    def _pump(self) -> None:
        """Hand the kernel a chunk at a time while it takes them whole."""
        while not self._gone:
            source, pending = self._pending()
            if not pending:
                break
            wanted = sum(len(view) for view in pending)
            try:
                sent = self._sock.sendmsg(pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lose(exc)
                return
            source.consume(sent)
            if sent < wanted:
                self._wait_writable()
                return
        if self._gone:
            return
        if self._kernel_full:
            self._kernel_full = False
            self._loop.remove_writer(self._fd)
            if self.chunk != EARNED_CHUNK:
                self._earn_send_buffer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._closing:
            self._finish()
            return
        if self.on_active is not None:
            self.on_active(self)  # the client takes its answers
        if self.on_drained is not None:
            self.on_drained()

    def _pending(self) -> tuple[Outbox, list[memoryview]]:
        """What goes to the socket next, and from where: sealed bytes first, then the
        outbox's views."""
        if self._sealed:
            return self._sealed, self._sealed.views(self.chunk)
        return self._outbox, self._outbox.views(self.chunk)

    def _earn_send_buffer(self) -> None:
        """The client took an answer the kernel could not hold at once: a reader, given a
        send buffer that holds the next one whole (see the module's docstring)."""
        self.chunk = EARNED_CHUNK
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, EARNED_SEND_BUFFER)

    def _wait_writable(self) -> None:
        if not self._kernel_full:
            self._kernel_full = True
            self._loop.add_writer(self._fd, self._pump)
        if self._write_timer is None and self._write_timeout:
            self._write_timer = self._loop.call_later(self._write_timeout, self._write_timed_out)

    def _finish(self) -> None:
        """Everything is in the kernel and the connection is closing: drop what the client
        sent meanwhile, so the close ends with a FIN and not a reset, and close."""
        if self._gone:
            return
        with contextlib.suppress(OSError):
            for _ in range(DISCARD_READS if not self._peer_done else 0):
                if not self._sock.recv_into(_READ_BUFFER):
                    break
        self._lose(None)

    def _lose(self, exc: BaseException | None) -> None:
        """The end, once: the socket closed, the connection and the listener told."""
        if self._gone:
            return
        self._gone = self._closing = True
        self._reading = False
        self._loop.remove_reader(self._fd)
        if self._kernel_full:
            self._loop.remove_writer(self._fd)
        self._cancel_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        self._outbox.clear()
        self._sealed.clear()
        self._sock.close()
        if self._app_connected:
            self._app_connected = False
            self._app.connection_lost(exc)
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost(self)
        # The wire and its connection refer to each other: let go here, so that reference
        # counting frees both (and their TLS state) now. Left to the cyclic collector, a
        # burst's connections outlive it in the old generation until a full collection.
        self.on_drained = self.on_active = None
        self._app = GONE

    def _write_timed_out(self) -> None:
        self._write_timer = None
        log.debug(
            "client %s: left a response unread for %gs; cut", self.client, self._write_timeout
        )
        self.cut()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _connect_app(self) -> None:
        self._app_connected = True
        self._app.connection_made(self)
