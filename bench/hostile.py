"""Clients an untrusted network may send, and the two it must not lock out (a Prometheus-like
scraper and a kubelet-like prober), over bare sockets on loopback, for bench/abuse_table.py.

The ideas are tests/abuse_clients.py's and tests/integration/test_many_addresses.py's; bench/
does not import tests/. Attackers bind other loopback addresses (127.0.0.2, …): the server
sees each as another client host. Every loop here ends by itself: on its stop event, after
its count, or at its deadline (LONGEST_SECONDS at most).
"""

from __future__ import annotations

import base64
import contextlib
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

HOST = "127.0.0.1"
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: exporter\r\n\r\n"
SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nX-Slow: "
LONGEST_SECONDS = 120.0  # no client here runs longer, whatever its caller does
SCRAPE_TIMEOUT = 10.0  # Prometheus' default scrape_timeout
PROBE_TIMEOUT = 3.0
PROBE_EVERY = 1.0
FIRST_200_WAIT = 30.0  # for a scraper whose credentials are not yet cached
IP_BIND_ADDRESS_NO_PORT = 24  # Linux: the port is chosen at connect, by the whole 4-tuple


def raise_descriptor_limit() -> int:
    """RLIMIT_NOFILE's soft limit raised to the hard one; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def listen_drops() -> int:
    """SYNs the kernel dropped because a listen queue was full (TcpExt ListenDrops), the
    whole machine's: a client's connect then waits for its SYN to be sent again (1 s, 3 s)."""
    with open("/proc/net/netstat") as netstat:
        lines = [line.split() for line in netstat if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1], strict=True)).get("ListenDrops", 0))


def addresses(count: int, first: int = 2) -> list[str]:
    """`count` loopback addresses from 127.0.0.`first` on, one per simulated client host."""
    return [f"127.0.{n // 250}.{n % 250 + 1}" for n in range(first - 1, first - 1 + count)]


def request(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: exporter"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bound_socket(source: str, receive_buffer: int = 0) -> socket.socket:
    sock = socket.socket()
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind((source, 0))
    return sock


def connect(
    port: int, source: str, timeout: float, tls: ssl.SSLContext | None = None
) -> socket.socket:
    sock = bound_socket(source)
    try:
        sock.settimeout(timeout)
        sock.connect((HOST, port))
        return tls.wrap_socket(sock, server_hostname=HOST) if tls else sock
    except BaseException:
        sock.close()
        raise


def status_of(sock: socket.socket) -> int:
    """The status of the one response read off `sock` (its head, then its body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before an answer")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    if not status_line.startswith("HTTP/1."):
        raise ValueError(f"not a status line: {status_line!r}")
    length = 0
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed within the body")
        body += chunk
    return int(status_line.split()[1])


def fresh_status(
    port: int, payload: bytes, timeout: float, source: str, tls: ssl.SSLContext | None
) -> int:
    """One request on a new connection; its status, 0 when none came within `timeout`."""
    deadline = time.monotonic() + timeout
    try:
        with contextlib.closing(connect(port, source, timeout, tls)) as sock:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            sock.sendall(payload)
            return status_of(sock)
    except (OSError, ValueError):
        return 0


def client_hello() -> bytes:
    """The bytes a TLS client opens with (its ClientHello), to send and then go silent."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=False)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@dataclass
class Seen:
    """The scraper's statuses (0: no answer in time) and latencies in seconds, and when its
    first 200 came (seconds from its start)."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    first_200_s: float | None = None

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def success(self) -> float:
        return self.statuses[200] / self.total if self.total else 0.0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


class Scraper(threading.Thread):
    """Prometheus after its idle connection was dropped: a new connection for every scrape,
    one every `every` seconds, for `seconds`, or until stopped. With `after_first_200`, for
    `seconds` from its first 200 (FIRST_200_WAIT at most before it): `seen` then holds the
    scrapes from that one on, and `before_first_200` those before it."""

    def __init__(
        self,
        port: int,
        seconds: float,
        source: str = HOST,
        authorization: str = "",
        tls: ssl.SSLContext | None = None,
        after_first_200: bool = False,
        every: float = 0.1,
    ) -> None:
        super().__init__(daemon=True)
        headers = {"Authorization": authorization} if authorization else {}
        self.payload = request("GET", "/metrics", headers)
        self.port, self.seconds, self.source, self.tls = port, seconds, source, tls
        self.after_first_200, self.every = after_first_200, every
        self.seen = Seen()
        self.before_first_200: Counter[int] = Counter()
        self.stop = threading.Event()  # ends the run before `seconds` are up

    def run(self) -> None:
        started = time.monotonic()
        hard_stop = started + LONGEST_SECONDS
        deadline = started + (FIRST_200_WAIT if self.after_first_200 else self.seconds)
        while not self.stop.is_set() and time.monotonic() < min(deadline, hard_stop):
            before = time.monotonic()
            status = fresh_status(self.port, self.payload, SCRAPE_TIMEOUT, self.source, self.tls)
            after = time.monotonic()
            if status == 200 and self.seen.first_200_s is None:
                self.seen.first_200_s = after - started
                if self.after_first_200:
                    deadline = after + self.seconds
            if self.after_first_200 and self.seen.first_200_s is None:
                self.before_first_200[status] += 1
            else:
                self.seen.latencies.append(after - before)
                self.seen.statuses[status] += 1
            self.stop.wait(self.every)


class Prober(threading.Thread):
    """The kubelet: `/healthz` on a fresh connection every second, 3 s to answer, until
    stopped."""

    def __init__(self, port: int, source: str = HOST, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(daemon=True)
        self.port, self.source, self.tls = port, source, tls
        self.statuses: Counter[int] = Counter()
        self.stop = threading.Event()

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != 200)

    def run(self) -> None:
        deadline = time.monotonic() + LONGEST_SECONDS
        while not self.stop.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            status = fresh_status(self.port, HEALTHZ, PROBE_TIMEOUT, self.source, self.tls)
            self.statuses[status] += 1
            self.stop.wait(max(0.0, PROBE_EVERY - (time.monotonic() - started)))


@dataclass
class _Slot:
    source: str
    opening: bytes
    sock: socket.socket | None = None
    out: bytes = b""
    got: bytes = b""
    connecting: bool = False
    tried: bool = False  # connected (or tried to) at least once
    since: float = 0.0  # when its connect began
    retry_at: float = 0.0


class Swarm(threading.Thread):
    """One connection per slot, all in one thread on non-blocking sockets, each from its
    slot's address and opening with its slot's bytes. `hold`: then it stays, reading (and
    dropping) what it is sent, and is opened again once the server cuts it; else (a flood)
    it is closed as soon as the status of its answer is in, and opened again at once.
    Runs until stopped, or for LONGEST_SECONDS."""

    CONNECT_TIMEOUT = 1.0
    CONNECTS_PER_TURN = 400  # the loop stays responsive while thousands reconnect

    def __init__(
        self, port: int, slots: list[tuple[str, Callable[[], bytes]]], hold: bool = True
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.hold = port, hold
        self._openings = [opening for _, opening in slots]
        self._slots = [_Slot(source, b"") for source, _ in slots]
        self.stop = threading.Event()
        self.connects = 0
        self.cuts = 0  # connections the server closed (or refused)
        self.answers: Counter[int] = Counter()  # a flood's statuses
        self.went_round = threading.Event()  # every slot was tried once
        self._untried = len(self._slots)

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        deadline = time.monotonic() + LONGEST_SECONDS
        waiting = list(range(len(self._slots)))  # slots to connect
        next_sweep = time.monotonic() + self.CONNECT_TIMEOUT
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                now = time.monotonic()
                waiting = self._connect_some(selector, waiting, now)
                if not self._untried:
                    self.went_round.set()
                for key, events in selector.select(0.05):
                    self._serve(selector, key.data, events, time.monotonic(), waiting)
                if now > next_sweep:  # connects that never completed are tried again
                    next_sweep = now + self.CONNECT_TIMEOUT
                    for i, slot in enumerate(self._slots):
                        if slot.connecting and now - slot.since > self.CONNECT_TIMEOUT:
                            self._drop(selector, i, now, waiting)
        finally:
            for slot in self._slots:
                if slot.sock is not None:
                    selector.unregister(slot.sock)
                    slot.sock.close()
            selector.close()

    def _connect_some(
        self, selector: selectors.BaseSelector, waiting: list[int], now: float
    ) -> list[int]:
        later, started = [], 0
        for i in waiting:
            slot = self._slots[i]
            if started >= self.CONNECTS_PER_TURN or slot.retry_at > now:
                later.append(i)
                continue
            started += 1
            if not slot.tried:
                slot.tried = True
                self._untried -= 1
            try:
                sock = bound_socket(slot.source)
            except OSError:
                slot.retry_at = now + 0.5
                later.append(i)
                continue
            sock.setblocking(False)
            sock.connect_ex((HOST, self.port))
            slot.sock, slot.out, slot.got, slot.since = sock, self._openings[i](), b"", now
            slot.connecting = True
            selector.register(sock, selectors.EVENT_WRITE, i)
            self.connects += 1
        return later

    def _serve(
        self,
        selector: selectors.BaseSelector,
        i: int,
        events: int,
        now: float,
        waiting: list[int],
    ) -> None:
        slot = self._slots[i]
        assert slot.sock is not None
        if events & selectors.EVENT_WRITE:
            try:
                if slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise ConnectionRefusedError
                sent = slot.sock.send(slot.out) if slot.out else 0
            except OSError:
                self._drop(selector, i, now, waiting)
                return
            slot.connecting = False
            slot.out = slot.out[sent:]
            if not slot.out:
                selector.modify(slot.sock, selectors.EVENT_READ, i)
            return
        try:
            chunk = slot.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(selector, i, now, waiting)
            return
        if self.hold:
            return  # an idle keep-alive client takes its answer and stays
        slot.got += chunk
        if b"\r\n" in slot.got:
            line = slot.got.split(b"\r\n", 1)[0].split()
            self.answers[int(line[1]) if len(line) > 1 and line[1].isdigit() else 0] += 1
            self._drop(selector, i, now, waiting, cut=False)

    def _drop(
        self,
        selector: selectors.BaseSelector,
        i: int,
        now: float,
        waiting: list[int],
        cut: bool = True,
    ) -> None:
        slot = self._slots[i]
        assert slot.sock is not None
        selector.unregister(slot.sock)
        slot.sock.close()
        slot.sock, slot.connecting = None, False
        if cut:
            self.cuts += 1
            if not self.hold and not slot.got:
                self.answers[0] += 1
        slot.retry_at = now + (0.05 if cut else 0.0)
        waiting.append(i)


def never_reading(port: int, count: int, sources: list[str], pipelined: int) -> list[socket.socket]:
    """Connections that pipeline scrapes (as many as the kernel takes) and never read."""
    sockets = []
    for i in range(count):
        try:
            sock = connect(port, sources[i % len(sources)], 5.0)
        except OSError:
            continue
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(GET_METRICS * pipelined)
        sockets.append(sock)
    return sockets


class InboxPush(threading.Thread):
    """One connection with a small receive buffer that pipelines scrapes and keeps sending
    them without ever reading, until stopped (or `cap` bytes): what the server accepted."""

    CHUNK = GET_METRICS * ((256 << 10) // len(GET_METRICS))

    def __init__(
        self,
        port: int,
        source: str,
        tls: ssl.SSLContext | None = None,
        cap: int = 512 << 20,
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.source, self.tls, self.cap = port, source, tls, cap
        self.stop = threading.Event()
        self.accepted = 0
        self.cut = False  # the server closed it

    def run(self) -> None:
        raw = bound_socket(self.source, receive_buffer=4096)
        raw.settimeout(5)
        try:
            raw.connect((HOST, self.port))
            sock = self.tls.wrap_socket(raw, server_hostname=HOST) if self.tls else raw
        except OSError:
            raw.close()
            self.cut = True
            return
        with contextlib.closing(sock):
            sock.settimeout(0.2)
            deadline = time.monotonic() + LONGEST_SECONDS
            while not self.stop.is_set() and self.accepted < self.cap:
                if time.monotonic() > deadline:
                    break
                try:
                    self.accepted += sock.send(self.CHUNK)
                except (TimeoutError, ssl.SSLWantWriteError, BlockingIOError):
                    continue
                except OSError:
                    self.cut = True
                    break


class TlsBursts(threading.Thread):
    """Rounds of `size` TLS connections (the handshake done, spread over `sources`), all
    held open for a moment, then closed; `rss()` is read after each round, once they are
    gone. Until stopped, or `rounds` done."""

    def __init__(
        self,
        port: int,
        size: int,
        sources: list[str],
        tls: ssl.SSLContext,
        rss: Callable[[], int],
        rounds: int,
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.size, self.sources, self.tls = port, size, sources, tls
        self.rss, self.rounds = rss, rounds
        self.stop = threading.Event()
        self.after_round: list[int] = []  # VmRSS after each round, bytes
        self.handshakes = 0
        self.refused = 0

    def run(self) -> None:
        deadline = time.monotonic() + LONGEST_SECONDS
        for _ in range(self.rounds):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            held = []
            for i in range(self.size):
                if self.stop.is_set():
                    break
                try:
                    source = self.sources[i % len(self.sources)]
                    held.append(connect(self.port, source, 5.0, self.tls))
                    self.handshakes += 1
                except (OSError, ValueError):
                    self.refused += 1
            self.stop.wait(0.5)
            for sock in held:
                sock.close()
            self.stop.wait(1.0)
            self.after_round.append(self.rss())
