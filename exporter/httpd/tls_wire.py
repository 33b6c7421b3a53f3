"""A wire on a TLS port: the first bytes decide, then TLS over memory BIOs.

The first bytes a client sends are consumed as they come (never peeked and polled): a TLS
record starts the handshake, which must finish within `--web.read-header-timeout`; a plain
HTTP request gets Go's exact 400; anything else is closed. After the handshake, records are
decrypted into the connection and its answers encrypted one record (RECORD bytes) at a time,
the next only once the last is in the kernel, so a client that never reads pins one record.
`ssl.SSLObject` does the TLS; OpenSSL's own state is most of what a connection costs
(bench/README.md, "Abuse").
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any, Final

from kube_gpu_exporter.exporter.httpd.outbox import Outbox
from kube_gpu_exporter.exporter.httpd.wire import READ_SIZE, Above, Wire

log = logging.getLogger(__name__)

RECORD: Final = 16 << 10  # the most plaintext one TLS record carries
TLS_HANDSHAKE: Final = 0x16  # the content type of a TLS record carrying a ClientHello
# What Go's net/http takes for a plain-HTTP request on a TLS port (the first 5 bytes).
HTTP_STARTS: Final = frozenset({b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"})
HTTP_ON_TLS_PORT: Final = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
_TLS_INFO: Final = frozenset({"sslcontext", "ssl_object", "peercert", "cipher", "compression"})


class TlsWire(Wire):
    """A Wire whose bytes are TLS records; `app` hears of the connection after the handshake."""

    def __init__(
        self,
        sock: socket.socket,
        app: Above,
        *,
        client: str,
        write_timeout: float,
        handshake_timeout: float,
        on_lost: Callable[[Wire], None],
        tls: ssl.SSLContext,
    ) -> None:
        super().__init__(
            sock,
            app,
            client=client,
            write_timeout=write_timeout,
            handshake_timeout=handshake_timeout,
            on_lost=on_lost,
        )
        self._context = tls
        self._start = b""  # the first bytes, until they show what the client speaks
        self._tls: ssl.SSLObject | None = None
        self._handshaken = False
        self._notified = False  # our close_notify is queued
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()

    def start(self) -> bool:
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._peer = self._sock.getpeername()
        except OSError as exc:  # reset while it waited in the accept queue
            self._lose(exc)
            return False
        self.resume_reading()
        if self._handshake_timeout:
            self._timer = self._loop.call_later(self._handshake_timeout, self._handshake_timed_out)
        return True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name not in _TLS_INFO:
            return super().get_extra_info(name, default)
        if self._tls is None:
            return default
        if name == "sslcontext":
            return self._context
        if name == "ssl_object":
            return self._tls
        if name == "peercert":
            return self._tls.getpeercert()
        return getattr(self._tls, name)()

    def _received(self, data: bytes) -> None:
        if self._tls is None:
            self._sniff(data)
        else:
            self._incoming.write(data)
            self._tls_progress()

    def _pending(self) -> tuple[Outbox, list[memoryview]]:
        """Sealed bytes first; then the next record of the outbox, once they are out."""
        if not self._sealed and self._outbox and self._tls is not None:
            try:
                for view in self._outbox.views(RECORD):
                    self._tls.write(view)
            except ssl.SSLError as exc:
                log.debug("client %s: TLS write failed: %s", self.client, exc)
                self.cut()
                return self._sealed, []
            self._outbox.consume(min(RECORD, self._outbox.queued))
            self._seal()
        return self._sealed, self._sealed.views(self.chunk)

    def _finish(self) -> None:
        """Our close_notify first (the peer's is not waited for), then the plain close."""
        if self._tls is not None and self._handshaken and not self._notified and not self._gone:
            self._notified = True
            with contextlib.suppress(ssl.SSLError):
                self._tls.unwrap()
            if self._seal():
                self._pump()
                return
        super()._finish()

    def _seal(self) -> bool:
        """Move what OpenSSL wrote (records, alerts, tickets) to the sealed outbox."""
        if not self._outgoing.pending:
            return False
        self._sealed.append(self._outgoing.read())
        return True

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
            if start[:5] in HTTP_STARTS:
                log.debug("client %s: plain HTTP on the TLS port; answered 400", self.client)
                self._sealed.append(HTTP_ON_TLS_PORT)
                self._closing = True
                self._pump()
            else:
                log.debug("client %s: neither TLS nor HTTP; closed", self.client)
                self._lose(None)
        elif any(known.startswith(start) for known in HTTP_STARTS):
            self._start = start  # a partial request line: the rest decides
        else:
            self._lose(None)

    def _tls_progress(self) -> None:
        """Handshake as far as the bytes allow, then hand the plaintext up."""
        tls = self._tls
        assert tls is not None
        if not self._app_connected:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                if self._seal():
                    self._pump()
                return
            except (ssl.SSLError, OSError) as exc:
                log.debug("client %s: TLS handshake failed: %s", self.client, exc)
                self._seal()  # the alert, where there is one
                self._closing = True
                self._pump()
                return
            self._handshaken = True
            self._cancel_timer()
            if self._seal():
                self._pump()
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
                self._lose(None)
                break
            if not data:
                break
            self._app.data_received(data)
        if self._seal():  # session tickets, key updates
            self._pump()

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if not self._app_connected:
            log.debug(
                "client %s: no TLS handshake within %gs; closing",
                self.client,
                self._handshake_timeout,
            )
            self.cut()
