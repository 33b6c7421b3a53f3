"""One client connection: HTTP/1.1, one request at a time, with timeouts and bounded buffers.

The exporter listens on every GPU node, often without auth, so nothing a client does may grow
its memory or hold its resources for long. Over a `Wire` (wire.py: the socket, TLS, the
outbox, the write timeout), per connection:

- **one request at a time**: received bytes wait in a small inbox, and one complete request
  head (up to its blank line) is parsed (request_head.py) once the previous answer is written
  and in the kernel. Nothing here reads a body: a request with one is answered and the
  connection closed after it. Reading pauses while the inbox holds MAX_HEAD bytes, and a head
  longer than that gets 431. A pipelining client thus pins at most one request and ~MAX_HEAD
  of bytes.
- **read-header timeout** (`--web.read-header-timeout`, Go's ReadHeaderTimeout): a request's
  head must be complete that long after its first byte (after the accept, for the first
  request); a slowloris client is cut then.
- **idle timeout** (`--web.idle-timeout`): between keep-alive requests.
- **every answer dressed alike**: the web config's headers and no `Server` header, on the
  app's answers and on those made here (400, 431, the overflow's 503).
- **probes only** (the listener's overflow, when every connection is taken): a connection that
  may ask for the kubelet's probes and nothing else, once.
- **logging**: a client that goes away or sends garbage is the network's business, not an
  error of the exporter: one debug line; the exporter's own bugs keep their traceback.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote

from kube_gpu_exporter.exporter.httpd.answer_head import (
    answer_head,
    configured_lines,
    raw_response,
)
from kube_gpu_exporter.exporter.httpd.client_shares import client_address
from kube_gpu_exporter.exporter.httpd.request_head import BadRequest, parse_head
from kube_gpu_exporter.exporter.httpd.web import App, Request, Response
from kube_gpu_exporter.exporter.httpd.wire import Wire

log = logging.getLogger(__name__)

# A request line and headers. Prometheus sends ~300 bytes, a bearer token adds a few KiB (an
# OIDC token with many group claims up to ~8 KiB); 32 KiB is nginx's default for a whole head
# (4 buffers of 8 KiB), and 1,000 slowloris clients sending that much pin 32 MiB in all.
MAX_HEAD: Final = 32 << 10
HEAD_END: Final = b"\r\n\r\n"
# A head whose lines end with a bare LF never holds HEAD_END: answered 400 as soon as its
# blank line is in, not left waiting for the read-header timeout.
BARE_LF_END: Final = b"\n\n"
_BAD_REQUEST: Final = ("Bad Request", "400 Bad Request\n")


def _frozen() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ConnectionLimits:
    """The `--web.*` connection flags (the CLI takes positive durations only); `headers` are
    the web config's, for every answer."""

    read_header_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    max_connections: int = 256
    max_connections_per_client: int = 32
    headers: Mapping[str, str] = field(default_factory=_frozen)
    probe_paths: frozenset[str] = frozenset()


class Connection:
    """Requests off one wire, one at a time, answered by `app`."""

    def __init__(self, app: App, limits: ConnectionLimits, probes_only: bool = False) -> None:
        self._app = app
        self._limits = limits
        self._configured = configured_lines(limits.headers)
        self._probes_only = probes_only
        self._loop = asyncio.get_running_loop()
        self._client = ""
        self._inbox = bytearray()
        self._in_request = False  # a head was taken and its answer is not written yet
        self._closing = False  # no further request is read
        self._http10 = False  # the request in hand is HTTP/1.0: its keep-alive is said
        self._client_done = False  # the client sent its FIN
        self._searched = 0  # inbox bytes already searched for a head's end
        self._reading_held = False  # we paused the wire because the inbox is full
        self._feeding = False  # _feed is running: a nested call only asks it to go on
        self._feed_again = False
        # One timer, moved lazily: the head's deadline or the idle one (None: neither).
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._on_deadline: Callable[[], None] | None = None
        self._wire: Wire | None = None
        self.task: asyncio.Task[None] | None = None  # the request being handled

    # --- what the wire calls ----------------------------------------------------------------

    def connection_made(self, wire: Wire) -> None:
        self._wire = wire
        self._client = client_address(wire.get_extra_info("peername"))
        wire.on_drained = self._feed  # the next request once the last answer is out
        self._arm(self._limits.read_header_timeout, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        starting = not (self._in_request or self._inbox)  # the first bytes of a request
        self._inbox += data
        self._feed()
        self._hold_reading()
        # Its head is due from now, unless a deadline runs already (the first request's,
        # from the accept).
        due = self._on_deadline == self._head_timed_out
        if starting and self._inbox and not self._in_request and not due:
            self._arm(self._limits.read_header_timeout, self._head_timed_out)

    def eof_received(self) -> None:
        """The client sent its FIN: a request it sent whole is still answered."""
        self._client_done = True
        self._feed()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_timer()
        self._inbox.clear()
        self._closing = True
        if exc is not None:
            log.debug("client %s: %s: %s", self._peer(), type(exc).__name__, exc)
        self._wire = None  # see Wire._lose: no cycle left for the collector

    # --- the server's shutdown --------------------------------------------------------------

    def stop(self) -> None:
        """The server is shutting down: an answer the client is not taking is cut now rather
        than after the write timeout, so a never-reading client cannot delay the exit; an
        idle connection is closed; a request being handled is answered, then closed."""
        wire = self._wire
        self._closing = True
        if wire is None:
            return
        if not wire.drained:
            wire.cut()
        elif not self._in_request:
            self._close()

    # --- requests ---------------------------------------------------------------------------

    def _feed(self) -> None:
        """Take the next complete request head, if no request is in progress and the last
        answer is in the kernel. A scrape is answered within the call, and its answer's
        arrival in the kernel asks for the next head: that runs as the next turn of this
        loop, not as a call nested in this one (1,000 pipelined requests would nest 1,000)."""
        if self._feeding:
            self._feed_again = True
            return
        self._feeding = True
        try:
            self._feed_again = True
            while self._feed_again:
                self._feed_again = False
                self._feed_once()
        finally:
            self._feeding = False

    def _feed_once(self) -> None:
        wire = self._wire
        if wire is None or self._in_request or not wire.drained:
            return
        end = self._inbox.find(HEAD_END, max(0, self._searched - 3), MAX_HEAD)
        self._searched = len(self._inbox)
        if self._closing or (self._client_done and end < 0):
            self._close()  # shutting down, or the client left with no whole request
            return
        if end < 0 and self._inbox.find(BARE_LF_END, 0, MAX_HEAD) >= 0:
            log.debug("client %s: a head ended by bare line feeds", self._peer())
            self._refuse(400, *_BAD_REQUEST)  # RFC 9112 lets a server refuse it: no guessing
            return
        if end >= 0:
            head = bytes(self._inbox[: end + len(HEAD_END)])
            del self._inbox[: len(head)]
            self._searched = 0
            self._cancel_timer()
            wire.note_request()
            self._start(head)
        elif len(self._inbox) >= MAX_HEAD:
            log.debug("client %s: request head over %d bytes; closing", self._peer(), MAX_HEAD)
            self._refuse(431, "Request Header Fields Too Large", "request head too large\n")
            return
        self._hold_reading()

    def _hold_reading(self) -> None:
        """Backpressure: the wire reads while the inbox holds less than one head's worth, and
        not a byte more, whatever else is going on. An answer waiting in the kernel or behind
        a password check takes nothing from the inbox, so a client sending meanwhile fills
        TCP's buffers and then waits, instead of the inbox growing without bound."""
        wire = self._wire
        full = len(self._inbox) >= MAX_HEAD
        if wire is None or full == self._reading_held:
            return
        self._reading_held = full
        if full:
            wire.pause_reading()
        else:
            wire.resume_reading()

    def _start(self, head: bytes) -> None:
        """Parse one head and hand the request to the app."""
        try:
            parsed = parse_head(head)
        except BadRequest as exc:
            log.debug("client %s: bad request: %s", self._peer(), exc)
            self._refuse(400, *_BAD_REQUEST)
            return
        target = parsed.target
        if not target.startswith("/") and "://" in target:  # absolute form: its path
            target = "/" + target.split("://", 1)[1].partition("/")[2]
        path = target.partition("?")[0]
        if "%" in path:
            path = unquote(path, errors="replace")
        if self._probes_only and (
            path not in self._limits.probe_paths or parsed.method not in ("GET", "HEAD")
        ):
            self._refuse(503, "Service Unavailable", "too many open connections\n", True)
            return
        if not parsed.keep_alive or parsed.has_body:
            self._closing = True  # after this answer (a body is never read)
        self._http10 = parsed.http10
        assert self._wire is not None
        request = Request(parsed.method, path, parsed.headers, self._client, self._wire)
        self._in_request = True
        # The app runs at once, not in a task's first step one loop turn later: a scrape
        # awaits nothing, so it is answered here; only a request that waits (a password check)
        # goes on in a task.
        respond = self._respond(request)
        try:
            waiting = respond.send(None)
        except StopIteration:
            return
        self.task = self._loop.create_task(resumed(respond, waiting))

    async def _respond(self, request: Request) -> None:
        try:
            response = await self._app.handle(request)
        except Exception:  # a bug of ours: logged whole, answered 500
            log.exception("error handling %s %s", request.method, request.path)
            response = Response(500, text="500 Internal Server Error\n")
        finally:
            self.task = None
        self._send(request, response)

    def _send(self, request: Request, response: Response) -> None:
        """Write the answer (HEAD: without its body), then take the next request or close."""
        wire = self._wire
        if wire is None or wire.is_closing():
            self._in_request = False
            return
        body = response.body
        closing = self._closing or self._client_done or self._probes_only
        connection = "close" if closing else "keep-alive" if self._http10 else ""
        head = answer_head(
            response.status, response.headers, len(body), connection, self._configured
        )
        if request.method == "HEAD" or not body:
            wire.write(head)
        else:
            wire.write(head, body)
        self._in_request = False
        if closing:
            self._close()
            return
        if self._inbox:  # part of the next request is here already: its head is due
            self._arm(self._limits.read_header_timeout, self._head_timed_out)
        else:
            self._arm(self._limits.idle_timeout, self._idle_timed_out)
        self._feed()

    def _refuse(self, status: int, reason: str, text: str, retry: bool = False) -> None:
        """Answer without the app (no request was parsed) and close."""
        assert self._wire is not None
        self._inbox.clear()
        self._wire.write(raw_response(status, reason, text, self._limits.headers, retry))
        self._close()

    def _close(self) -> None:
        self._closing = True
        self._stop_timer()
        if self._wire is not None:
            self._wire.close()

    # --- timers -----------------------------------------------------------------------------

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        """`callback` in `delay` seconds, instead of what was due. The timer is moved only
        when the new deadline is earlier: a keep-alive scrape re-arms it at no cost."""
        if not delay:
            self._cancel_timer()
            return
        self._deadline = self._loop.time() + delay
        self._on_deadline = callback
        if self._timer is None or self._timer.when() > self._deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)

    def _cancel_timer(self) -> None:
        """Nothing is due (the timer stays where it is, to be moved or to fire idle)."""
        self._on_deadline = None

    def _stop_timer(self) -> None:
        self._on_deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timer_fired(self) -> None:
        self._timer = None
        callback = self._on_deadline
        if callback is None:
            return
        if self._loop.time() < self._deadline:  # moved later meanwhile
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)
            return
        self._on_deadline = None
        callback()

    def _head_timed_out(self) -> None:
        if self._in_request or HEAD_END in self._inbox:  # a whole head waits its turn
            return
        log.debug(
            "client %s: no complete request head within %gs; closing",
            self._peer(),
            self._limits.read_header_timeout,
        )
        if self._wire is not None:
            self._wire.cut()

    def _idle_timed_out(self) -> None:
        if not self._in_request and not self._inbox:
            self._close()

    def _peer(self) -> str:
        peer = self._wire.get_extra_info("peername") if self._wire is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


@types.coroutine
def resumed(coro: Coroutine[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """The rest of `coro`, whose first step yielded `waiting` (the future it awaits), as a
    coroutine a task can run: what `yield from coro` would do had the first step not been
    taken already (PEP 380): values and exceptions pass through both ways."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # passed on, as `yield from` does
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration:
                return
