"""The server's verdicts on generated request streams, against llhttp's (httptools directly).

A differential fuzz test of exporter/httpd/ as a whole: hypothesis builds connections of
pipelined request heads (valid, mutated field by field, bare line feeds, heads at the 32 KiB
limit), split across reads at random points and ended by the client's FIN, sometimes after a
head cut short. Each is sent to a real `Listener` (in this process, on loopback), and what
came back, status by status and where the connection was closed, must be what a reference
says: every whole head judged by a fresh llhttp parser plus, where llhttp is lenient and Go's
net/http is not, Go's refusals (docs/architecture.md, "The request parser"); a refused head is
the connection's last answer (400, or 431 over the limit); a head cut short by the FIN gets
no answer. The framing (where a head ends, the inbox, the read-header deadline, keep-alive),
not the parser alone, is what is under test. Go's net/http as a second reference would need a
Go program built for the test; not done.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_gpu_exporter.exporter.httpd import App, ConnectionLimits, Listener, Request, Response
from kube_gpu_exporter.exporter.httpd.connection import MAX_HEAD

FUZZ = settings(
    max_examples=1000,
    derandomize=True,  # the same examples on every run: CI is reproducible
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROUTES = ("/", "/x")
READ_TIMEOUT = 5.0

# --- the server --------------------------------------------------------------------------


async def _ok(request: Request) -> Response:
    return Response(text="ok\n")


@dataclass
class Server:
    port: int
    loop: asyncio.AbstractEventLoop


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """One Listener on 127.0.0.1 for the module, its loop in a thread."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Listener] = {}

    async def start() -> None:
        app = App()
        for path in ROUTES:
            app.add_get(path, _ok)
        listener = Listener(app, "127.0.0.1", 0, ConnectionLimits(read_header_timeout=3.0))
        await listener.start()
        holder["listener"] = listener
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    assert started.wait(10)
    listener = holder["listener"]
    yield Server(listener.addresses[0][1], loop)
    asyncio.run_coroutine_threadsafe(listener.stop(0.5), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


# --- the reference -----------------------------------------------------------------------

REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/1\.([01])\r\n")


@dataclass(frozen=True)
class Expected:
    status: int
    last: bool  # the server closes after it


class _Collect:
    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value.strip(b" \t")))

    def on_headers_complete(self) -> None:
        self.complete = True


def judge(head: bytes) -> Expected:
    """What the server must answer to one whole head (ending with its first blank line)."""
    if len(head) > MAX_HEAD:
        return Expected(431, True)
    if b"\r\n\r\n" not in head:  # lines ended by bare LF: never a whole head
        return Expected(400, True)
    collected = _Collect()
    parser = httptools.HttpRequestParser(collected)
    try:
        parser.feed_data(head)
    except httptools.HttpParserUpgrade:
        pass
    except httptools.HttpParserError:
        return Expected(400, True)  # llhttp's refusal
    line = REQUEST_LINE.match(head)
    fields: dict[bytes, list[bytes]] = {}
    for name, value in collected.fields:
        fields.setdefault(name, []).append(value)
    http11 = line is not None and line.group(3) == b"1"
    hosts = fields.get(b"host", [])
    # Go's refusals where llhttp is lenient: the request line exactly, 1.0 or 1.1 only, one
    # Host on 1.1 (a comma is two), no Transfer-Encoding on 1.0.
    if (
        not collected.complete
        or line is None
        or (http11 and (len(hosts) != 1 or b"," in hosts[0]))
        or (not http11 and b"transfer-encoding" in fields)
    ):
        return Expected(400, True)
    method = line.group(1)
    target = line.group(2).decode("latin-1")
    if target.startswith("http://"):
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    path = target.partition("?")[0].replace("%78", "x")
    status = 404 if path not in ROUTES else 200 if method in (b"GET", b"HEAD") else 405
    connection = {
        option.strip().lower()
        for value in fields.get(b"connection", [])
        for option in value.split(b",")
    }
    keep = b"keep-alive" in connection if not http11 else b"close" not in connection
    body = b"transfer-encoding" in fields or any(
        value.strip() not in (b"", b"0") for value in fields.get(b"content-length", [])
    )
    return Expected(status, not keep or body)


def expected_answers(heads: list[bytes]) -> tuple[list[Expected], bytes]:
    """The answers to the heads, up to the first that ends the connection, and the bytes to
    send for them: nothing after that head (what the server never reads would reach a
    closed socket, whose reset may destroy the answer on its way), and of a head over the
    limit only the limit's worth (the server answers 431 there)."""
    answers: list[Expected] = []
    sent = b""
    for head in heads:
        answers.append(judge(head))
        sent += head[:MAX_HEAD]
        if answers[-1].last:
            break
    return answers, sent


# --- the client --------------------------------------------------------------------------


def exchange(port: int, data: bytes, splits: list[int], methods: list[bytes]) -> list[int]:
    """Send `data` in pieces cut at `splits`, then the FIN; the statuses read back until the
    server closes (the body of a HEAD's answer is not read). A server that closes before
    taking all of `data` ends the sending; what it answered is still read."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(READ_TIMEOUT)
    received = b""
    with sock:
        last = 0
        try:
            for cut in [*sorted({min(cut, len(data)) for cut in splits}), len(data)]:
                sock.sendall(data[last:cut])
                last = cut
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # closed on us: read what was said before
            pass
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            received += b"<reset>"
    return _statuses(received, methods)


def _statuses(received: bytes, methods: list[bytes]) -> list[int]:
    statuses = []
    for method in methods:
        end = received.find(b"\r\n\r\n")
        if end < 0:
            break
        head, received = received[:end], received[end + 4 :]
        status = int(head.split(b" ", 2)[1])
        statuses.append(status)
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        # A refusal is written whole before any parse: it has a body even for a HEAD.
        if (method != b"HEAD" or status in (400, 431)) and length:
            received = received[int(length.group(1)) :]
    if received:
        statuses.append(-1)  # bytes that are no answer (or a reset): never expected
    return statuses


# --- the generator -----------------------------------------------------------------------

METHODS = [b"GET", b"HEAD", b"POST", b"OPTIONS", b"get", b"FOO", b""]
TARGETS = [b"/", b"/x", b"/x?y=1", b"/%78", b"/nope", b"*", b"http://h/x", b"/\xe9", b"/a b"]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1", b"HTTP/1.1 "]
NAMES = [b"Host", b"host", b"Connection", b"Content-Length", b"Transfer-Encoding", b"X-A", b"X B"]
VALUES = [b"x", b"a, b", b"close", b"keep-alive", b"0", b"5", b"1, 1", b"-1", b"chunked"]
VALUES += [b"", b"\xe9", b"a\x00b", b"a\x7fb", b" spaced "]


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    """A head: mostly well formed, each part sometimes off."""
    sp = draw(st.sampled_from([b" "] * 12 + [b"  ", b"\t"]))
    eol = draw(st.sampled_from([b"\r\n"] * 15 + [b"\n"]))
    method = draw(st.sampled_from([b"GET"] * 6 + METHODS))
    target = draw(st.sampled_from(TARGETS))
    version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + VERSIONS))
    lines = [method + sp + target + sp + version + eol]
    if version == b"HTTP/1.1" and draw(st.integers(0, 9)):
        lines.append(b"Host: x\r\n")
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(NAMES))
        colon = draw(st.sampled_from([b": "] * 8 + [b":", b" : ", b":\t"]))
        value = draw(st.sampled_from(VALUES))
        line_end = draw(st.sampled_from([b"\r\n"] * 20 + [b"\n", b"\r\n "]))
        lines.append(name + colon + value + line_end)
    if draw(st.integers(0, 19)) == 0:  # a head near the 32 KiB limit
        size = sum(map(len, lines)) + len(b"X-Pad: \r\n\r\n")
        lines.append(b"X-Pad: " + b"p" * (MAX_HEAD - size + draw(st.integers(-2, 2))) + b"\r\n")
    head = b"".join(lines) + b"\r\n"
    if b"\n\n" in head or b"\r\n\r\n" not in head:
        return b"GET / HTTP/1.1\nHost: x\n\n"  # bare line feeds throughout
    return head[: head.index(b"\r\n\r\n") + 4]  # one head: up to its first blank line


@st.composite
def connections(draw: st.DrawFn) -> tuple[list[bytes], bytes, list[int]]:
    whole = draw(st.lists(heads(), min_size=1, max_size=4))
    cut = b""
    if draw(st.booleans()):  # the FIN comes in the middle of a head
        partial = draw(heads())
        cut = partial[: draw(st.integers(1, max(1, len(partial) - 4)))]
        if b"\n\n" in cut or b"\r\n\r\n" in cut or len(cut) >= MAX_HEAD:
            cut = b"GET /"
    size = sum(map(len, whole)) + len(cut)
    splits = draw(st.lists(st.integers(0, size), max_size=5))
    return whole, cut, splits


@FUZZ
@given(connections())
def test_the_server_answers_as_llhttp_and_go_would(
    server: Server, connection: tuple[list[bytes], bytes, list[int]]
) -> None:
    whole, cut, splits = connection
    expected, data = expected_answers(whole)
    if not expected[-1].last:
        data += cut  # the FIN in the middle of a head: no answer to it
    methods = [_method(head) for head in whole[: len(expected)]]
    got = exchange(server.port, data, splits, methods)
    assert got == [answer.status for answer in expected], (whole, cut)


def _method(head: bytes) -> bytes:
    line = REQUEST_LINE.match(head)
    return line.group(1) if line else b""
