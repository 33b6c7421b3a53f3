"""Any number of hostile addresses, and a shared one, lock out neither the scraper nor the
kubelet's probes.

Before, with every address holding one or two connections nobody could be displaced, and the
probes' overflow filled with the attacker's own reconnects: at 300 to 5,000 addresses the
scraper's new connections got 0 of 100 and fresh `/healthz` requests failed. And an address
shared with an attacker (NAT, a node's SNAT) met the attacker's per-address cap: 429, the
probes included.

The exporter runs at its default limits; the attackers are bare sockets bound to 5,000
loopback addresses, each reconnecting as soon as it is cut (a bounded loop, stopped by the
test), in a process of their own, as an attacker is: in the test's interpreter their loop held
the GIL between the scraper's connect and its request, and a request that late meets the
limit docs/architecture.md states (a newcomer outlives 31 newer connections of its address).
The scraper opens a new connection for every scrape, as Prometheus does after an idle
connection was dropped; the prober does what the kubelet does (a fresh connection, 3 s).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from multiprocessing.context import ForkProcess
from pathlib import Path

import pytest
from abuse_clients import HEALTHZ
from raw_http import GET_METRICS, Reader, other_addresses

from support import Exporter, run_exporter

DEMO = str(Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml")
ADDRESSES = 5000
SCRAPES = 40
PROBES = 40
SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nX-Slow: "
ATTACK_SECONDS = 120.0  # the attackers' own bound; the test stops them long before
FORK = multiprocessing.get_context("fork")  # the attackers inherit the raised file limit


class Attackers(ForkProcess):
    """One connection per address in `sources` (the i-th sending `first[i % len(first)]`,
    then nothing), each reconnected once the exporter cuts or refuses it, until stopped."""

    def __init__(self, port: int, sources: list[str], first: tuple[bytes, ...]) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.sources = sources
        self.first = first
        self.stop = FORK.Event()
        self.ready = FORK.Event()
        self._connects = FORK.Value("q", 0)
        self._sockets: list[socket.socket | None] = [None] * len(sources)

    @property
    def connects(self) -> int:
        return int(self._connects.value)

    def _alive(self, sock: socket.socket | None) -> bool:
        if sock is None:
            return False
        try:
            return not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) and False
        except BlockingIOError:
            return True  # nothing to read: still open, unanswered
        except OSError:
            return False

    def run(self) -> None:
        deadline = time.monotonic() + ATTACK_SECONDS
        while not self.stop.is_set() and time.monotonic() < deadline:
            for i, source in enumerate(self.sources):
                if self.stop.is_set():
                    break
                if self._alive(self._sockets[i]):
                    continue
                if (old := self._sockets[i]) is not None:
                    old.close()
                try:
                    sock = socket.create_connection(
                        ("127.0.0.1", self.port), timeout=1, source_address=(source, 0)
                    )
                    if opening := self.first[i % len(self.first)]:
                        sock.sendall(opening)
                except OSError:
                    self._sockets[i] = None
                    continue
                self._sockets[i] = sock
                self._connects.value += 1
            self.ready.set()
            time.sleep(0.05)
        for sock in self._sockets:
            if sock is not None:
                sock.close()


@contextlib.contextmanager
def attacking(port: int, sources: list[str], first: tuple[bytes, ...]) -> Iterator[Attackers]:
    attackers = Attackers(port, sources, first)
    attackers.start()
    try:
        assert attackers.ready.wait(60), "the attackers never got round once"
        yield attackers
    finally:
        attackers.stop.set()
        attackers.join(30)
        if attackers.is_alive():
            attackers.kill()


def fresh_status(port: int, payload: bytes, timeout: float, source: str = "127.0.0.1") -> int:
    """The status of one request on a new connection; 0 when none came in time."""
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
        ) as sock:
            sock.settimeout(timeout)
            sock.sendall(payload)
            return Reader(sock).response().status
    except (OSError, AssertionError, ValueError, ConnectionError):
        return 0


def scrape_and_probe(
    exporter: Exporter, source: str = "127.0.0.1"
) -> tuple[Counter[int], Counter[int]]:
    scrapes: Counter[int] = Counter()
    probes: Counter[int] = Counter()
    for _ in range(max(SCRAPES, PROBES)):
        scrapes[fresh_status(exporter.port, GET_METRICS, 5.0, source)] += 1
        probes[fresh_status(exporter.port, HEALTHZ, 3.0, source)] += 1
        time.sleep(0.05)
    return scrapes, probes


@pytest.fixture(autouse=True)
def _enough_descriptors() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = ADDRESSES + 1024
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= wanted, "too few file descriptors"


def test_five_thousand_addresses_lock_out_neither_scraper_nor_probes(tmp_path: Path) -> None:
    """Half the addresses silent, half slowloris: every connection idle to the server."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        sources = other_addresses(ADDRESSES)
        with attacking(exporter.port, sources, (b"", SLOW_HEAD)) as attackers:
            scrapes, probes = scrape_and_probe(exporter)
        print(f"attacker connects {attackers.connects}; scrapes {scrapes}; probes {probes}")
        assert scrapes[200] >= 0.99 * SCRAPES, scrapes
        assert probes[200] == PROBES, probes


def test_an_address_shared_with_an_attacker_is_served(tmp_path: Path) -> None:
    """The scraper and the prober on 127.0.0.1, where an attacker also holds (and keeps
    reopening) far more than the per-address share."""
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        with attacking(exporter.port, ["127.0.0.1"] * 64, (SLOW_HEAD,)):
            scrapes, probes = scrape_and_probe(exporter)
        print(f"scrapes {scrapes}; probes {probes}")
        assert scrapes[200] >= 0.99 * SCRAPES, scrapes
        assert probes[200] == PROBES, probes


def test_the_listen_queue_holds_a_reconnecting_crowd(tmp_path: Path) -> None:
    """The kernel's queue of connections not yet accepted: at 128, thousands of addresses
    reconnecting overflowed it, and the kernel dropped the scraper's and the probes' SYNs too
    (each retried a second later, then three: a probe timed out). `ss` shows a listening
    socket's queue size as its Send-Q."""
    most = int(Path("/proc/sys/net/core/somaxconn").read_text())
    with run_exporter(["--simulate", DEMO], tmp_path) as exporter:
        shown = subprocess.run(
            ["ss", "-Hltn", f"sport = :{exporter.port}"], capture_output=True, text=True
        ).stdout.split()
    assert int(shown[2]) == min(1024, most), shown
