"""One client connection: aiohttp's request handler with timeouts and bounded buffers.

The exporter listens on every GPU node, often without auth, so nothing a client does may grow
its memory or hold its resources for long. aiohttp alone times out only idle keep-alive
connections and parses pipelined requests ahead of the one it answers. Here, per connection
(the listener caps how many exist, per client address and in all), over a `Wire` (wire.py:
TLS, the outbox, the write timeout):

- **one request at a time**: received bytes wait in a small inbox, and aiohttp's parser is fed
  one complete request head (up to its blank line) once the previous response is finished
  and in the kernel (a request with a body, which nothing here reads, gets its bytes as they
  come and is the connection's last). Reading pauses while the inbox holds MAX_HEAD bytes,
  and a head longer than that gets 431. A pipelining client thus pins at most one parsed
  request and ~MAX_HEAD of bytes, whatever it sends.
- **read-header timeout** (`--web.read-header-timeout`, Go's ReadHeaderTimeout): a request's
  head must be complete that long after its first byte (after the accept, for the first
  request); a slowloris client is closed then.
- **idle timeout** (`--web.idle-timeout`): aiohttp's keep-alive timeout, between requests.
- **every answer dressed alike**: the web config's headers and no `Server` header on the
  answers aiohttp and this module make themselves (400, 431, the over-cap 503), as the app's
  prepare hook does for its own.
- **probes only** (the listener's overflow, when every connection is taken): a connection that
  may ask for the kubelet's probes and nothing else, once.
- **logging**: a client that goes away or sends garbage is the network's business, not an
  error of the exporter: one debug line, never an error-level traceback.

It overrides RequestHandler methods aiohttp does not document (data_received, finish_response,
handle_error, log_exception) and StreamResponse._prepare_headers; pyproject pins aiohttp to
the releases tested, and tests/unit/test_aiohttp_internals.py fails loudly when they change.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.http import HttpProcessingError

from kube_gpu_exporter.exporter.serve.wire import Wire

log = logging.getLogger(__name__)

# A request line and headers. Prometheus sends ~300 bytes, a bearer token adds a few KiB (an
# OIDC token with many group claims up to ~8 KiB); 32 KiB is nginx's default for a whole head
# (4 buffers of 8 KiB), and 1,000 slowloris clients sending that much pin 32 MiB in all.
MAX_HEAD: Final = 32 << 10
HEAD_END: Final = b"\r\n\r\n"
# A head announcing a body: a Content-Length above 0, or any Transfer-Encoding.
BODY: Final = re.compile(rb"\r\n(content-length:[ \t]*0*[1-9]|transfer-encoding:)", re.IGNORECASE)
# Client behaviour that ends a connection; logged at debug, without a traceback.
CLIENT_FAULTS: Final = (ConnectionError, HttpProcessingError, asyncio.TimeoutError)
RETRY_AFTER_SECONDS: Final = 1


def _frozen() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ConnectionLimits:
    """The `--web.*` connection flags (the CLI takes positive durations only); `headers` are
    the web config's, for the answers made below the app."""

    read_header_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    max_connections: int = 256
    max_connections_per_client: int = 32
    headers: Mapping[str, str] = field(default_factory=_frozen)
    probe_paths: frozenset[str] = frozenset()


def raw_response(
    status: int, reason: str, text: str, headers: Mapping[str, str], retry_after: bool = False
) -> bytes:
    """A whole `Connection: close` answer as bytes, for what is said before (or without) a
    parsed request: the configured headers on it, no Server header."""
    body = text.encode()
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: text/plain; charset=utf-8"]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    if retry_after:
        lines.append(f"Retry-After: {RETRY_AFTER_SECONDS}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def dress(response: web.StreamResponse, headers: Mapping[str, str]) -> None:
    """The configured headers (a default a handler may override, as in exporter-toolkit), and
    no Server header: aiohttp's names the Python and aiohttp versions, Go's servers send none.
    Called once aiohttp has set its own headers and before they are written."""
    response.headers.popall(hdrs.SERVER, None)
    for name, value in headers.items():
        response.headers.setdefault(name, value)


class _ErrorResponse(web.Response):
    """aiohttp's own error answers (a malformed request's 400) are prepared without the app's
    prepare hook; this dresses them the same way."""

    def __init__(self, headers: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dress = headers

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        dress(self, self._dress)


class Connection(web.RequestHandler):
    """aiohttp's RequestHandler behind an inbox, with the timeouts above, on a Wire."""

    def __init__(
        self,
        manager: web.Server,
        limits: ConnectionLimits,
        probes_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            manager,
            keepalive_timeout=limits.idle_timeout,
            max_line_size=MAX_HEAD,
            max_field_size=MAX_HEAD,
            **kwargs,
        )
        self._limits = limits
        self._probes_only = probes_only
        self._inbox = bytearray()
        self._in_request = False  # a head was fed and its response is not finished
        self._body = False  # that request has a body: bytes go to aiohttp as they come
        self._reading_held = False  # we paused the transport because the inbox is full
        self._header_timer: asyncio.TimerHandle | None = None
        self._wire: Wire | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, Wire)
        self._wire = transport
        transport.on_drained = self._feed  # the next request once the last answer is out
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        self._inbox.clear()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not (self._in_request or self._body or self._inbox) and data:
            self._arm_header_timer()  # the first byte of a request: its head is now due
        self._inbox += data
        self._feed()

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """aiohttp's last step of every request (the response is written): the next one may
        be read once it is in the kernel."""
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._in_request = False
            if self._body or self._probes_only:
                # Nothing here reads a body: aiohttp discards the rest (its lingering close)
                # and ends the connection, rather than finding the next head after it.
                self.close()
            elif self._inbox:  # part of the next request is here already
                self._arm_header_timer()
            self._feed()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's answer to a request it could not parse or serve, dressed as ours are."""
        answer = super().handle_error(request, status, exc, message)
        if not isinstance(answer, web.Response):
            return answer
        dressed = _ErrorResponse(
            self._limits.headers,
            status=answer.status,
            body=answer.body,
            content_type=answer.content_type,
        )
        dressed.force_close()
        return dressed

    def _feed(self) -> None:
        """Hand aiohttp the next complete request head, if no request is in progress and the
        last answer is in the kernel."""
        wire = self._wire
        if self.transport is None or wire is None:
            return
        if self._body and self._inbox:
            body = bytes(self._inbox)
            self._inbox.clear()
            super().data_received(body)
        elif not self._in_request and wire.drained:
            end = self._inbox.find(HEAD_END)
            if 0 <= end < MAX_HEAD:
                head = bytes(self._inbox[: end + len(HEAD_END)])
                del self._inbox[: len(head)]
                if self._probes_only and not self._is_probe(head):
                    self._refuse(
                        503, "Service Unavailable", "too many open connections\n", retry=True
                    )
                    return
                self._in_request = True
                self._body = BODY.search(head) is not None
                self._cancel_header_timer()
                wire.note_request()
                super().data_received(head)
                if self._body:
                    self._feed()
                    return
            elif len(self._inbox) >= MAX_HEAD:
                log.debug("client %s: request head over %d bytes; closing", self._peer(), MAX_HEAD)
                self._refuse(431, "Request Header Fields Too Large", "request head too large\n")
                return
        full = len(self._inbox) >= MAX_HEAD
        if full != self._reading_held:
            self._reading_held = full
            if full:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _is_probe(self, head: bytes) -> bool:
        method, _, rest = head.partition(b" ")
        target = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        return method in (b"GET", b"HEAD") and target.decode("latin-1") in self._limits.probe_paths

    def _refuse(self, status: int, reason: str, text: str, retry: bool = False) -> None:
        """Answer without aiohttp (no request was handed to it) and close."""
        assert self.transport is not None
        self._inbox.clear()
        self.transport.write(raw_response(status, reason, text, self._limits.headers, retry))
        self.force_close()  # closes the wire once the answer is out

    def stop(self) -> None:
        """The server is shutting down: a response the client is not taking is cut now rather
        than after the write timeout, so a never-reading client cannot delay the exit."""
        if self._wire is not None and not self._wire.drained:
            self._wire.cut()

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

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self._in_request or HEAD_END in self._inbox:  # a whole head waits its turn
            return
        log.debug(
            "client %s: no complete request head within %gs; closing",
            self._peer(),
            self._limits.read_header_timeout,
        )
        self.force_close()
        if self._wire is not None:
            self._wire.cut()

    def _peer(self) -> str:
        peer = self.peername
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
