"""Clients an untrusted network may send, and a Prometheus-like scraper beside them, over bare
sockets on loopback. Attackers bind other loopback addresses (127.0.0.2, …), the scraper its
own, so the exporter sees them as different client hosts."""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from raw_http import GET_METRICS, Reader, connect, other_addresses, request

from support import Exporter, exporter_command, free_port, stop_process, wait_until

HEALTHZ = request("GET", "/healthz")
SCRAPE_TIMEOUT = 10.0  # seconds: Prometheus' default scrape_timeout


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


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


def open_many(
    port: int, count: int, addresses: int, first: bytes = b"", first_address: int = 2
) -> list[socket.socket]:
    """`count` connections spread over `addresses` other addresses, each sending `first` (and
    nothing more); those the exporter refuses at once are kept too (closed sockets)."""
    sockets = []
    sources = other_addresses(addresses, first_address)
    for i in range(count):
        try:
            sock = connect(port, source=sources[i % addresses])
            if first:
                sock.sendall(first)
        except OSError:
            continue
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def idle_keep_alive(port: int, count: int, addresses: int) -> list[socket.socket]:
    """Connections that asked for /healthz once, read the answer, and stay open."""
    sockets = []
    sources = other_addresses(addresses)
    for i in range(count):
        try:
            sock = connect(port, timeout=5, source=sources[i % addresses])
            sock.sendall(HEALTHZ)
            Reader(sock).response()
        except OSError:
            continue
        sockets.append(sock)
    return sockets


def never_reading(
    port: int, count: int, addresses: int, pipelined: int, receive_buffer: int = 0
) -> list[socket.socket]:
    """Connections that pipeline scrapes (as many as the kernel takes) and never read; with
    `receive_buffer`, a small one, so that the kernel holds little of what is sent to them."""
    sockets = []
    sources = other_addresses(addresses)
    for i in range(count):
        try:
            sock = socket.socket()
            if receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            sock.bind((sources[i % addresses], 0))
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(GET_METRICS * pipelined)
        sockets.append(sock)
    return sockets


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


@dataclass
class Seen:
    """What the scraper saw: statuses (0: no answer) and latencies in seconds."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    probes: Counter[int] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def worst(self) -> float:
        return max(self.latencies, default=0.0)

    def assert_served(self, within: float = SCRAPE_TIMEOUT) -> None:
        """≥ 99 % 200s, each within `within` seconds, and every probe answered 200. The bound
        tells a lockout from a slow answer (what Prometheus counts as a failed scrape), not a
        speed target: those are make bench's, where the machine's load is recorded beside them."""
        assert self.total > 0, self
        assert self.statuses[200] >= 0.99 * self.total, self.statuses
        assert self.worst < within, (self.worst, self.statuses)
        assert set(self.probes) == {200}, self.probes


class Scraper(threading.Thread):
    """Prometheus from 127.0.0.1: one keep-alive connection, a scrape every `every` seconds
    (reconnecting when it is closed), and the kubelet's /healthz on a fresh connection
    beside each. Its first scrape opens its first connection. `run()` scrapes in the caller's
    thread, `start()` in its own."""

    def __init__(
        self,
        port: int,
        scrapes: int,
        every: float = 0.05,
        authorization: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.scrapes = scrapes
        self.every = every
        self.headers = {"Authorization": authorization} if authorization else {}
        self.tls = tls
        self.seen = Seen()

    def _connect(self) -> socket.socket:
        # Prometheus waits up to its scrape_timeout for an answer, so the scraper does; the
        # first scrape after a burst of 1,000 connections waits behind them in the listen
        # queue, which took over 5 s on a loaded 2-core machine
        sock = connect(self.port, timeout=SCRAPE_TIMEOUT)
        if self.tls is not None:
            return self.tls.wrap_socket(sock, server_hostname="127.0.0.1")
        return sock

    def run(self) -> None:
        held: tuple[socket.socket, Reader] | None = None
        for _ in range(self.scrapes):
            started = time.monotonic()
            status, held, unanswered = self._scrape(held)
            if unanswered:
                # Go's transport (Prometheus'): a GET whose reused idle connection fails before
                # a byte of the answer (the server may have closed it meanwhile) is sent again
                # on a new one
                status, held, _ = self._scrape(None)
            self.seen.latencies.append(time.monotonic() - started)
            self.seen.statuses[status] += 1
            self.seen.probes[self.probe()] += 1
            time.sleep(self.every)
        if held is not None:
            held[0].close()

    def _scrape(
        self, held: tuple[socket.socket, Reader] | None
    ) -> tuple[int, tuple[socket.socket, Reader] | None, bool]:
        """The status of one scrape (0: none), the connection to keep for the next, and
        whether a reused connection failed before a byte of the answer came."""
        reused = held is not None
        try:
            if held is None:
                sock = self._connect()
                held = sock, Reader(sock)
            held[0].sendall(request("GET", "/metrics", self.headers))
            return held[1].response().status, held, False
        except (OSError, AssertionError, ValueError) as exc:
            if held is None:
                return 0, None, False
            held[0].close()
            return 0, None, reused and isinstance(exc, OSError) and not held[1].buffer

    def probe(self) -> int:
        try:
            with contextlib.closing(self._connect()) as sock:
                sock.sendall(HEALTHZ)
                return Reader(sock).response().status
        except (OSError, AssertionError, ValueError):
            return 0


def tls_config(tmp_path: Path, certificate: tuple[Path, Path]) -> tuple[str, ssl.SSLContext]:
    """A web config serving TLS with `certificate`: its flag, and a client context trusting it."""
    cert, key = certificate
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    return f"--web.config.file={config}", ssl.create_default_context(cafile=str(cert))


@contextlib.contextmanager
def run_tls_exporter(args: list[str], tmp_path: Path, client: ssl.SSLContext) -> Iterator[Exporter]:
    """`serve` with a TLS web config among `args` on a free port, once /readyz answers over
    TLS; SIGTERM afterwards."""
    port = free_port()
    log_path = tmp_path / f"exporter-{port}.log"
    command = exporter_command("serve", f"--web.listen-address=127.0.0.1:{port}", *args)
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    exporter = Exporter(proc, port, log_path)
    try:
        wait_until(
            lambda: proc.poll() is not None or https_status(port, client) == 200,
            what="the exporter to answer over TLS",
        )
        assert proc.poll() is None, exporter.log()
        yield exporter
    finally:
        stop_process(proc, 10)


def https_status(port: int, context: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/readyz", context=context, timeout=5
        ) as response:
            return int(response.status)
    except OSError:
        return 0
