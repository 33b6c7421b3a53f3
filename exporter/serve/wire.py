"""The bytes between a client's socket and aiohttp: TLS over memory BIOs and a zero-copy outbox.

asyncio's own transports cost what an untrusted network can multiply. Its TLS transport keeps a
256 KiB read buffer per connection (RSS that is not returned after the close), and every
transport copies what the kernel does not take at once into a buffer of its own, so a client
that never reads pins a copy of a whole response. A `Wire` sits between asyncio's plain socket
transport and the connection's protocol (connection.py) instead, as the protocol of the one and
the transport of the other:

- **reads** land in one buffer that every connection shares (each read is handed on before the
  next one starts), and TLS is decrypted by `ssl.SSLObject` over memory BIOs;
- **writes** are queued as views of the bytes given (a pre-rendered body is shared, never
  copied) and handed to the kernel CHUNK bytes at a time, the next only once the last is in
  the kernel: a client that does not read pins at most one chunk of our memory;
- **the protocol is never paused**: a handler's `drain()` returns at once, so a response that
  nobody reads holds no `--web.max-requests` slot; the connection reads no further request
  until it is out instead (`drained`, `on_drained`);
- **the write timeout** (`--web.write-timeout`): output must reach the kernel within it, from
  the moment the kernel first refused some; otherwise the connection is `cut`: a reset, which
  also drops what the kernel still held for it (a plain close keeps that until the peer's
  window probes time out, about two minutes);
- **on a TLS port** the first bytes decide, as they come (never peeked and polled): a TLS
  record starts the handshake, which must finish within `--web.read-header-timeout`; a plain
  HTTP request gets Go's 400; anything else is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from kube_gpu_exporter.exporter.serve.outbox import Outbox

log = logging.getLogger(__name__)

READ_SIZE: Final = 16 << 10  # one TLS record; the listener's receive buffer holds ~16 KiB
CHUNK: Final = 8 << 10  # handed to the kernel at a time: the most one stalled client pins
TLS_HANDSHAKE: Final = 0x16  # the content type of a TLS record carrying a ClientHello
# What Go's net/http takes for a plain-HTTP request on a TLS port (the first 5 bytes).
HTTP_STARTS: Final = frozenset({b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"})
HTTP_ON_TLS_PORT: Final = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
RESET_ON_CLOSE: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset
_TLS_INFO: Final = frozenset({"sslcontext", "ssl_object", "peercert", "cipher", "compression"})

# Every read of every connection lands here first; asyncio calls get_buffer, recv_into and
# buffer_updated in one go, and buffer_updated hands the bytes on before returning.
_READ_BUFFER: Final = memoryview(bytearray(READ_SIZE))


class Wire(asyncio.Transport, asyncio.BufferedProtocol):
    """One accepted connection: asyncio's socket transport below, `app` (a protocol) above.

    `on_lost` runs once when the connection has ended, whatever ended it (the listener's
    count); `last_active` (monotonic seconds) is when the client last sent a whole request
    (`note_request`), which the listener reads to pick whom to evict."""

    def __init__(
        self,
        app: asyncio.Protocol,
        *,
        client: str,
        write_timeout: float,
        handshake_timeout: float,
        on_lost: Callable[[Wire], None],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__()
        self.client = client
        self.last_active = time.monotonic()
        self.on_drained: Callable[[], None] | None = None
        self._app = app
        self._write_timeout = write_timeout
        self._handshake_timeout = handshake_timeout
        self._on_lost: Callable[[Wire], None] | None = on_lost
        self._context = tls
        self._below: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._outbox = Outbox()
        self._kernel_full = False  # the socket transport holds bytes the kernel refused
        self._closing = False
        self._handshaken = False  # TLS: the handshake finished (and may be closed cleanly)
        self._app_connected = False
        self._write_timer: asyncio.TimerHandle | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        # TLS: the first bytes until they show what the client speaks, then the TLS state.
        self._start = b""
        self._tls: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()

    # --- below: asyncio's socket transport calls these ----------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._below = transport
        # Paused at the first byte the kernel refuses, resumed once it has taken them all.
        transport.set_write_buffer_limits(high=0)
        if self._context is None:
            self._connect_app()
        elif self._handshake_timeout:
            self._handshake_timer = self._loop.call_later(
                self._handshake_timeout, self._handshake_timed_out
            )

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        data = bytes(_READ_BUFFER[:nbytes])
        if self._context is None:
            self._app.data_received(data)
        elif self._tls is None:
            self._sniff(data)
        else:
            self._incoming.write(data)
            self._tls_progress()

    def eof_received(self) -> bool:
        """The client will send no more: what is queued for it still goes out, then the
        connection closes (asyncio would otherwise close at once, under the queued bytes)."""
        if self._app_connected and self._context is None:
            self._app.eof_received()
        self.close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._outbox.clear()
        self._closing = True
        if self._app_connected:
            self._app_connected = False
            self._app.connection_lost(exc)
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost(self)

    def pause_writing(self) -> None:
        self._kernel_full = True
        self._arm_write_timer()

    def resume_writing(self) -> None:
        self._kernel_full = False
        self._pump()

    # --- above: the connection's protocol calls these -----------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._outbox.append(data)
        self._pump()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("a Wire closes, it does not half-close")

    def is_closing(self) -> bool:
        return self._closing or self._below is None or self._below.is_closing()

    def close(self) -> None:
        """Close once everything queued is in the kernel (TLS: after a close_notify)."""
        if self._closing:
            return
        self._closing = True
        self._finish_if_drained()

    def abort(self) -> None:
        self._closing = True
        if self._below is not None:
            self._below.abort()

    def cut(self) -> None:
        """End the connection now with a reset: the kernel drops what it still holds for the
        client instead of trying to deliver it for minutes."""
        self._closing = True
        if self._below is None:
            return
        sock = self._below.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        self._below.abort()

    def pause_reading(self) -> None:
        if self._below is not None:
            self._below.pause_reading()

    def resume_reading(self) -> None:
        if self._below is not None:
            self._below.resume_reading()

    def is_reading(self) -> bool:
        return self._below is not None and self._below.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Ignored: the outbox holds views, not copies, and never pauses the protocol."""

    def get_write_buffer_size(self) -> int:
        below = self._below.get_write_buffer_size() if self._below is not None else 0
        return self._outbox.queued + below

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in _TLS_INFO:
            if self._tls is None:
                return default
            if name == "sslcontext":
                return self._context
            if name == "ssl_object":
                return self._tls
            if name == "peercert":
                return self._tls.getpeercert()
            return getattr(self._tls, name)()
        return self._below.get_extra_info(name, default) if self._below else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._app = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._app

    # --- what the connection and the listener ask -----------------------------------

    @property
    def drained(self) -> bool:
        """Whether everything written so far is in the kernel."""
        return not self._outbox.queued and not self._kernel_full

    def note_request(self) -> None:
        """The client sent a whole request: it is in use, not a socket left open."""
        self.last_active = time.monotonic()

    # --- inside ---------------------------------------------------------------------------

    def _connect_app(self) -> None:
        self._app_connected = True
        self._app.connection_made(self)

    def _pump(self) -> None:
        """Hand the kernel a chunk at a time while it takes them whole."""
        below = self._below
        if below is None:
            return
        while self._outbox and not self._kernel_full and not below.is_closing():
            chunk = self._outbox.take(CHUNK)
            if self._tls is not None:
                try:
                    self._tls.write(chunk)
                except ssl.SSLError as exc:
                    log.debug("client %s: TLS write failed: %s", self.client, exc)
                    self.cut()
                    return
                below.write(self._outgoing.read())
            else:
                below.write(chunk)
        if self._outbox or self._kernel_full:
            self._arm_write_timer()
        else:
            self._drained()

    def _drained(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._closing:
            self._finish_if_drained()
        elif self.on_drained is not None:
            self.on_drained()

    def _finish_if_drained(self) -> None:
        below = self._below
        if below is None or below.is_closing() or not self.drained:
            return
        if self._tls is not None and self._handshaken:
            with contextlib.suppress(ssl.SSLError):
                self._tls.unwrap()  # queues our close_notify; the peer's is not waited for
            below.write(self._outgoing.read())
        below.close()

    def _arm_write_timer(self) -> None:
        if self._write_timer is None and self._write_timeout:
            self._write_timer = self._loop.call_later(self._write_timeout, self._write_timed_out)

    def _write_timed_out(self) -> None:
        self._write_timer = None
        log.debug(
            "client %s: left a response unread for %gs; cut", self.client, self._write_timeout
        )
        self.cut()

    def _cancel_timers(self) -> None:
        for timer in (self._write_timer, self._handshake_timer):
            if timer is not None:
                timer.cancel()
        self._write_timer = self._handshake_timer = None

    # --- TLS ----------------------------------------------------------------------------

    def _sniff(self, data: bytes) -> None:
        """What the client speaks, from its first bytes: a TLS record, plain HTTP (Go's 400)
        or something else (closed)."""
        start = self._start + data
        if start[0] == TLS_HANDSHAKE:
            assert self._context is not None
            self._start = b""
            self._tls = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
            self._incoming.write(start)
            self._tls_progress()
        elif len(start) >= 5:
            assert self._below is not None
            if start[:5] in HTTP_STARTS:
                log.debug("client %s: plain HTTP on the TLS port; answered 400", self.client)
                self._below.write(HTTP_ON_TLS_PORT)
                self._below.close()
            else:
                log.debug("client %s: neither TLS nor HTTP; closed", self.client)
                self._below.abort()
            self._closing = True
        elif any(known.startswith(start) for known in HTTP_STARTS):
            self._start = start  # a partial request line: the rest decides
        else:
            assert self._below is not None
            self._closing = True
            self._below.abort()

    def _tls_progress(self) -> None:
        """Handshake as far as the bytes allow, then hand the plaintext up."""
        tls = self._tls
        below = self._below
        assert tls is not None and below is not None
        if not self._app_connected:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                below.write(self._outgoing.read())
                return
            except (ssl.SSLError, OSError) as exc:
                log.debug("client %s: TLS handshake failed: %s", self.client, exc)
                with contextlib.suppress(RuntimeError):
                    below.write(self._outgoing.read())  # the alert, where there is one
                self._closing = True
                below.close()
                return
            below.write(self._outgoing.read())
            self._handshaken = True
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
                self._handshake_timer = None
            self._connect_app()
        while self._app_connected and not self._closing:
            try:
                data = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify
                self.close()
                break
            except (ssl.SSLError, OSError) as exc:
                log.debug("client %s: TLS read failed: %s", self.client, exc)
                self.abort()
                break
            if not data:
                break
            self._app.data_received(data)
        if self._outgoing.pending:  # session tickets, key updates
            below.write(self._outgoing.read())

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        if not self._app_connected:
            log.debug(
                "client %s: no TLS handshake within %gs; closing",
                self.client,
                self._handshake_timeout,
            )
            self.cut()
