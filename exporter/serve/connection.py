"""One client connection: aiohttp's request handler with timeouts and bounded buffers.

The exporter listens on every GPU node, often without auth, so nothing a client does may grow
its memory or hold its resources for long. aiohttp alone times out only idle keep-alive
connections, parses pipelined requests ahead of the one it answers, and frees a response once
it is in the transport's buffer rather than in the kernel. Here, per connection (the listener
caps how many exist):

- **one request at a time**: received bytes wait in a small inbox, and aiohttp's parser is fed
  one complete request head (up to its blank line) once the previous response is finished
  (a request with a body, which nothing here reads, gets its bytes as they come and is the
  connection's last).
  Reading pauses while the inbox holds MAX_HEAD bytes, and a head longer than that gets 431.
  A pipelining client thus pins at most one parsed request and ~MAX_HEAD of bytes, whatever
  it sends (the listener's small receive buffer bounds how much one read adds).
- **write buffer**: the transport pauses the writer whenever any byte is left unsent, so
  `drain()` returns only once every byte is in the kernel, and whatever holds a
  `--web.max-requests` slot holds it until then. A never-reading client thus pins at most one
  response, and its slot, not a growing pile.
- **write timeout** (`--web.write-timeout`, Go's WriteTimeout): a response the client leaves
  unread that long closes the connection, which frees the slot a never-reading client holds.
- **read-header timeout** (`--web.read-header-timeout`, Go's ReadHeaderTimeout): a request's
  head must be complete that long after its first byte (after the accept, for the first
  request); a slowloris client is closed then.
- **idle timeout** (`--web.idle-timeout`): aiohttp's keep-alive timeout, between requests.
- **logging**: a client that goes away or sends garbage is the network's business, not an
  error of the exporter: one debug line, never an error-level traceback.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.http import HttpProcessingError

log = logging.getLogger(__name__)

MAX_HEAD: Final = 8 << 10  # a request line and headers; Prometheus sends ~300 bytes
HEAD_END: Final = b"\r\n\r\n"
# A head announcing a body: a Content-Length above 0, or any Transfer-Encoding.
BODY: Final = re.compile(rb"\r\n(content-length:[ \t]*0*[1-9]|transfer-encoding:)", re.IGNORECASE)
HEAD_TOO_LARGE: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)
# Client behaviour that ends a connection; logged at debug, without a traceback.
CLIENT_FAULTS: Final = (ConnectionError, HttpProcessingError, asyncio.TimeoutError)


@dataclass(frozen=True)
class ConnectionLimits:
    """The `--web.*` connection flags (the CLI takes positive durations only)."""

    read_header_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    max_connections: int = 256


class Connection(web.RequestHandler):
    """aiohttp's RequestHandler behind an inbox, with the timeouts above."""

    def __init__(
        self,
        manager: web.Server,
        limits: ConnectionLimits,
        on_lost: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, keepalive_timeout=limits.idle_timeout, **kwargs)
        self._limits = limits
        self._on_lost = on_lost
        self._inbox = bytearray()
        self._in_request = False  # a head was fed and its response is not finished
        self._body = False  # that request has a body: bytes go to aiohttp as they come
        self._reading_held = False  # we paused the transport because the inbox is full
        self._stopping = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # Pause the writer while anything is unsent, resume once all of it is in the kernel
        # (high=1, not 0: asyncio's SSL transport never resumes a writer paused at 0).
        if isinstance(transport, asyncio.WriteTransport):
            transport.set_write_buffer_limits(high=1, low=0)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timers()
        self._inbox.clear()
        super().connection_lost(exc)
        self._on_lost()

    def data_received(self, data: bytes) -> None:
        if not (self._in_request or self._body or self._inbox) and data:
            self._arm_header_timer()  # the first byte of a request: its head is now due
        self._inbox += data
        self._feed()

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """aiohttp's last step of every request (the response is written): the next one may
        be read now."""
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._in_request = False
            if self._body:
                # Nothing here reads a body: aiohttp discards the rest (its lingering close)
                # and ends the connection, rather than finding the next head after it.
                self.close()
            elif self._inbox:  # part of the next request is here already
                self._arm_header_timer()
            self._feed()

    def _feed(self) -> None:
        """Hand aiohttp the next complete request head, if no request is in progress."""
        if self.transport is None:
            return
        if self._body and self._inbox:
            body = bytes(self._inbox)
            self._inbox.clear()
            super().data_received(body)
        elif not self._in_request:
            end = self._inbox.find(HEAD_END)
            if 0 <= end < MAX_HEAD:
                head = bytes(self._inbox[: end + len(HEAD_END)])
                del self._inbox[: len(head)]
                self._in_request = True
                self._body = BODY.search(head) is not None
                self._cancel_header_timer()
                super().data_received(head)
                if self._body:
                    self._feed()
                    return
            elif len(self._inbox) >= MAX_HEAD:
                log.debug("client %s: request head over %d bytes; closing", self._peer(), MAX_HEAD)
                self.transport.write(HEAD_TOO_LARGE)
                self.force_close()
                return
        full = len(self._inbox) >= MAX_HEAD
        if full != self._reading_held:
            self._reading_held = full
            if full:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def stop(self) -> None:
        """The server is shutting down: a response the client is not taking is cut now rather
        than after the write timeout, so a never-reading client cannot delay the exit."""
        self._stopping = True
        if self.writing_paused and self.transport is not None:
            self.transport.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stopping and self.transport is not None:
            self.transport.abort()
        elif self._limits.write_timeout and self._write_timer is None:
            self._write_timer = self._loop.call_later(
                self._limits.write_timeout, self._write_timed_out
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp logs every failed request with its traceback at error level; a client's
        disconnect or malformed request gets one debug line instead. Our own bugs (anything
        else) keep the traceback."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, CLIENT_FAULTS):
            reason = exc.message if isinstance(exc, HttpProcessingError) else exc
            log.debug("client %s: %s: %s", self._peer(), type(exc).__name__, reason)
            return
        super().log_exception(*args, **kwargs)

    def _arm_header_timer(self) -> None:
        if self._limits.read_header_timeout and self._header_timer is None:
            self._header_timer = self._loop.call_later(
                self._limits.read_header_timeout, self._headers_timed_out
            )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_header_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self._in_request:
            return
        log.debug(
            "client %s: no complete request head within %gs; closing",
            self._peer(),
            self._limits.read_header_timeout,
        )
        self.force_close()

    def _write_timed_out(self) -> None:
        self._write_timer = None
        log.debug(
            "client %s: left a response unread for %gs; closing",
            self._peer(),
            self._limits.write_timeout,
        )
        if self.transport is not None:
            self.transport.abort()  # close() would wait for the unsent bytes forever

    def _peer(self) -> str:
        peer = self.peername
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
