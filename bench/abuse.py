"""`make bench`, abuse section: the exporter against clients an untrusted network may send.

Same node as bench/run.py (the fake NVML's 8 A100 × 7 MIG, 64 devices, 120 KiB plain body),
the exporter subprocess with its defaults; the scraper on its own address (127.0.0.250), the
others on 127.0.0.1 unless said. Three runs, then the abuse table (abuse_table.py):

1. **Never-reading clients**: NEVER_READERS connections from 8 addresses each pipeline
   PIPELINED scrapes and never read. VmRSS of the exporter (peak, sampled every 50 ms) and the
   answers those clients were sent (read off their sockets at the end); meanwhile a
   well-behaved client's scrapes.
2. **A scraper beside 200 concurrent clients**: `wrk -c200` scraping as fast as it can while
   a Prometheus-like scraper (own keep-alive connection, gzip, one scrape every 50 ms)
   records its latency and status.
3. **A scraper beside a wrong-password flood** (basic auth on, bcrypt cost 10): the same
   scraper with good credentials beside `wrk -c200` sending one wrong password, then beside
   40 threads sending a new wrong password each time (the cache cannot help). The exporter's
   CPU over each flood from /proc.

Targets: VmRSS < 80 MiB whatever the clients do; the scraper's success ≥ 99 % beside every
flood; its p99 alone (the healthy path) < 5 ms. Usage: bench/abuse.py [--quick] [--readme]
(--readme writes a --quick run too, saying so)
"""

from __future__ import annotations

import argparse
import base64
import http.client
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import procs
import wrk
from fake import FakeNode, prepare
from node import DEVICE_COUNT, node_scenario

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- abuse:start -->", "<!-- abuse:end -->"
MIB = 1 << 20
RSS_TARGET = 80 * MIB
P99_TARGET_MS = 5.0
SUCCESS_TARGET = 0.99
NEVER_READERS = 200  # under the default --web.max-connections (256): all are served
NEVER_READER_ADDRESSES = 8  # 25 connections each, within the per-address share (32)
# The scraper's own address: wrk and the password flooders connect from 127.0.0.1, and each
# client address has its own share of connections, request slots and password checks.
SCRAPER = ("127.0.0.250", 0)
ABUSE_TABLE_START, ABUSE_TABLE_END = "<!-- abuse-table:start -->", "<!-- abuse-table:end -->"
PIPELINED = 1_000
FLOODERS = 40
# Plain, not gzip: the 120 KiB bodies fill a never-reading client's kernel buffers quickly.
GET = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n"


def say(message: str) -> None:
    print(f"[abuse {time.strftime('%H:%M:%S')}] {message}", flush=True)


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()


@dataclass
class Scrapes:
    """What a Prometheus-like scraper saw: a status per scrape (0: no answer) and latencies."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def success(self) -> float:
        total = sum(self.statuses.values())
        return self.statuses[200] / total if total else 0.0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")

    def row(self, what: str, target_p99: bool = False) -> str:
        p99 = self.percentile(0.99)
        verdicts = [_verdict(self.success >= SUCCESS_TARGET)]
        if target_p99:
            verdicts.append(_verdict(p99 < P99_TARGET_MS))
        return (
            f"| {what} | {sum(self.statuses.values())} | {self.success:.1%} | "
            f"{self.percentile(0.5):.2f} ms | {p99:.2f} ms | {_statuses(self.statuses)} | "
            f"{' / '.join(verdicts)} |"
        )


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _statuses(counts: Counter[int]) -> str:
    return ", ".join(f"{n:,} × {status or 'no answer'}" for status, n in sorted(counts.items()))


def scrape_while(port: int, keep_going: Callable[[], bool], authorization: str = "") -> Scrapes:
    """One keep-alive connection, a gzip scrape every 50 ms, as Prometheus' scrape loop."""
    result = Scrapes()
    headers = {"Accept-Encoding": "gzip"}
    if authorization:
        headers["Authorization"] = authorization
    conn = http.client.HTTPConnection(procs.HOST, port, timeout=10, source_address=SCRAPER)
    while keep_going():
        started = time.perf_counter()
        try:
            conn.request("GET", "/metrics", headers=headers)
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            status = 0
            conn.close()
            conn = http.client.HTTPConnection(procs.HOST, port, timeout=10, source_address=SCRAPER)
        result.latencies_ms.append((time.perf_counter() - started) * 1000)
        result.statuses[status] += 1
        time.sleep(0.05)
    conn.close()
    return result


def for_seconds(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() < deadline


@contextmanager
def exporter(node: FakeNode, work: Path, *extra: str) -> Iterator[procs.Server]:
    port = procs.free_port()
    command = procs.exporter_command(port, 5, "", *extra)
    with procs.running("abuse", command, port, node.env, work, "/healthz") as server:
        deadline = time.monotonic() + procs.START_TIMEOUT_SECONDS
        while procs.http_status(server.url + "/readyz") != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        yield server


@dataclass(frozen=True)
class NeverReaders:
    rss_ready: int
    rss_peak: int
    rss_after: int  # once they are gone
    sent_to_them: Counter[int]  # status → responses found on their sockets
    scraper: Scrapes


def never_readers(server: procs.Server, seconds: float) -> NeverReaders:
    pid = server.proc.pid
    procs.http_status(server.metrics_url)
    rss_ready = procs.rss_bytes(pid)
    clients = []
    for i in range(NEVER_READERS):
        source = (f"127.0.1.{i % NEVER_READER_ADDRESSES + 1}", 0)
        sock = socket.create_connection((procs.HOST, server.port), source_address=source)
        sock.setblocking(False)
        clients.append([sock, memoryview(GET * PIPELINED)])
    peak = rss_ready
    stop = threading.Event()
    scraped: list[Scrapes] = []
    scraper = threading.Thread(
        target=lambda: scraped.append(scrape_while(server.port, lambda: not stop.is_set()))
    )
    scraper.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for client in clients:
            if client[1]:
                with suppress(BlockingIOError):
                    client[1] = client[1][client[0].send(client[1][:65536]) :]
        peak = max(peak, procs.rss_bytes(pid))
        time.sleep(0.05)
    stop.set()
    scraper.join()
    sent: Counter[int] = Counter()
    for sock, _ in clients:
        sent.update(_statuses_on(sock))
        sock.close()
    time.sleep(1)
    return NeverReaders(rss_ready, peak, procs.rss_bytes(pid), sent, scraped[0])


def _statuses_on(sock: socket.socket) -> Counter[int]:
    """Status lines in what the kernel holds for a client that never read."""
    counts: Counter[int] = Counter()
    carry = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        data = carry + chunk
        for status in (200, 503):
            counts[status] += data.count(b"HTTP/1.1 %d " % status)
        carry = data[-16:]
        for status in (200, 503):  # do not count a status line twice across the carry
            counts[status] -= carry.count(b"HTTP/1.1 %d " % status)
    return counts


def beside_wrk(server: procs.Server, seconds: int, authorization: str = "") -> tuple[Scrapes, str]:
    """The scraper beside `wrk -c200` (gzip; `authorization` on every wrk request if given)."""
    command = [wrk.wrk_path(), "-t2", "-c200", f"-d{seconds}s", "--latency"]
    command += ["-H", "Accept-Encoding: gzip"]
    if authorization:
        command += ["-H", f"Authorization: {authorization}"]
    command.append(server.metrics_url)
    good = basic("secret") if authorization else ""
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as load:
        time.sleep(0.5)  # wrk's connections are up
        scrapes = scrape_while(server.port, lambda: load.poll() is None, good)
        output = load.communicate()[0]
    parsed = wrk.parse(output, 0)
    summary = (
        f"wrk: {parsed.requests:,} requests, {parsed.non_2xx:,} non-2xx, p99 {parsed.p99_ms:.2f} ms"
    )
    return scrapes, summary


def beside_distinct_passwords(server: procs.Server, seconds: float) -> tuple[Scrapes, Counter[int]]:
    flood: Counter[int] = Counter()
    lock = threading.Lock()
    keep_going = for_seconds(seconds)

    def flooder() -> None:
        while keep_going():
            conn = http.client.HTTPConnection(procs.HOST, server.port, timeout=10)
            try:
                conn.request(
                    "GET", "/metrics", headers={"Authorization": basic(secrets.token_hex(8))}
                )
                status = conn.getresponse().status
            except (OSError, http.client.HTTPException):
                status = 0
            finally:
                conn.close()
            with lock:
                flood[status] += 1

    threads = [threading.Thread(target=flooder) for _ in range(FLOODERS)]
    for thread in threads:
        thread.start()
    scrapes = scrape_while(server.port, keep_going, basic("secret"))
    for thread in threads:
        thread.join()
    return scrapes, flood


class RssPeak:
    """The highest VmRSS of a process, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = procs.rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, procs.rss_bytes(self.pid))
            except (OSError, procs.BenchError):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@dataclass(frozen=True)
class Flood:
    scrapes: Scrapes
    summary: str  # what the flood itself got
    cpu_s: float  # the exporter's, over the flood
    seconds: float


def timed_flood(server: procs.Server, run: Callable[[], tuple[Scrapes, str]]) -> Flood:
    cpu, started = procs.cpu_seconds(server.proc.pid), time.monotonic()
    scrapes, summary = run()
    cpu = procs.cpu_seconds(server.proc.pid) - cpu
    return Flood(scrapes, summary, cpu, time.monotonic() - started)


@dataclass(frozen=True)
class Results:
    healthy: wrk.WrkResult  # wrk -t2 -c16, gzip: bench/run.py's scrape figure
    alone: Scrapes
    never: NeverReaders
    load: Flood
    same_password: Flood
    distinct_passwords: Flood
    rss_peak: int  # over both exporter processes and every run


def run(seconds: int, work: Path) -> Results:
    node = prepare(work, node_scenario())
    with exporter(node, work) as server:
        rss = RssPeak(server.proc.pid)
        say("healthy path: wrk -t2 -c16, gzip")
        healthy = wrk.run(server.metrics_url, wrk.Load(2, 16, seconds), wrk.GZIP_HEADERS)
        say("the scraper alone")
        alone = scrape_while(server.port, for_seconds(seconds))
        say(f"{NEVER_READERS} never-reading clients, {PIPELINED} pipelined scrapes each")
        never = never_readers(server, seconds)
        say("the scraper beside wrk -c200")
        load = timed_flood(server, lambda: beside_wrk(server, seconds))
        peak = rss.stop()
    config = work / "web.yml"
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=10)).decode()
    config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    with exporter(node, work, f"--web.config.file={config}") as server:
        rss = RssPeak(server.proc.pid)
        say("the scraper beside wrk -c200 sending one wrong password")
        same = timed_flood(server, lambda: beside_wrk(server, seconds, basic("wrong")))
        say(f"the scraper beside {FLOODERS} threads sending a new wrong password each time")

        def distinct() -> tuple[Scrapes, str]:
            scrapes, flood = beside_distinct_passwords(server, seconds)
            return scrapes, f"flood: {_statuses(flood)}"

        distinct_flood = timed_flood(server, distinct)
        peak = max(peak, rss.stop())
    return Results(healthy, alone, never, load, same, distinct_flood, peak)


def render(r: Results, machine: str) -> str:
    n = r.never
    mib = lambda value: f"{value / MIB:.1f} MiB"  # noqa: E731
    cpu = lambda f: f"{f.cpu_s:.1f} s in {f.seconds:.0f} s ({f.cpu_s / f.seconds:.0%} of a core)"  # noqa: E731
    return "\n".join(
        [
            f"run: {machine}",
            "",
            f"Node: {DEVICE_COUNT} devices; the exporter with its defaults "
            "(`--web.max-requests=40`, `--web.max-connections=256`, timeouts 10 s / 120 s / 30 s).",
            "",
            "| figure | value | target |",
            "|---|---:|---|",
            f"| healthy path: `wrk -t2 -c16 -d{r.load.seconds:.0f}s`, gzip, p50 / p99 | "
            f"{r.healthy.p50_ms:.2f} ms / {r.healthy.p99_ms:.2f} ms | < {P99_TARGET_MS:g} ms: "
            f"{_verdict(r.healthy.p99_ms < P99_TARGET_MS)} |",
            f"| VmRSS once ready | {mib(n.rss_ready)} | |",
            f"| VmRSS peak, {NEVER_READERS} never-reading clients × {PIPELINED:,} pipelined "
            f"scrapes | {mib(n.rss_peak)} | < 80 MiB: {_verdict(n.rss_peak < RSS_TARGET)} |",
            f"| VmRSS once they left | {mib(n.rss_after)} | |",
            f"| answers found on their sockets | {_statuses(n.sent_to_them)} | |",
            f"| a well-behaved client's scrapes meanwhile | {_statuses(n.scraper.statuses)} | |",
            f"| VmRSS peak over every run below too | {mib(r.rss_peak)} | < 80 MiB: "
            f"{_verdict(r.rss_peak < RSS_TARGET)} |",
            f"| exporter CPU beside wrk -c200, no auth | {cpu(r.load)} | |",
            f"| exporter CPU, one wrong password (wrk -c200) | {cpu(r.same_password)} | |",
            f"| exporter CPU, a new wrong password each time ({FLOODERS} threads) | "
            f"{cpu(r.distinct_passwords)} | |",
            "",
            "The scraper (its own keep-alive connection, gzip, a scrape every 50 ms; good "
            "credentials under auth):",
            "",
            "| beside | scrapes | success | p50 | p99 | statuses | target |",
            "|---|---:|---:|---:|---:|---|---|",
            r.alone.row("nothing"),
            r.load.scrapes.row("`wrk -c200`"),
            r.same_password.scrapes.row("`wrk -c200`, one wrong password"),
            r.distinct_passwords.scrapes.row(f"{FLOODERS} threads, a new wrong password each"),
            "",
            "Target: success ≥ 99 % beside every flood. The scraper's p99 alone is about one "
            "scrape in a hundred meeting a collection cycle's render (every 5 s); wrk's p99 above "
            f"is the healthy-path figure. The floods themselves: {r.load.summary} (no auth); "
            f"{r.same_password.summary} (one wrong password); {r.distinct_passwords.summary} "
            "(new wrong passwords).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (5 s, 3 s per attack)")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    import abuse_table
    from report import load_average, machine  # the run line, as bench/run.py writes it

    mode = "`bench/abuse.py --quick`" if args.quick else "`bench/abuse.py`"
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="kge-abuse-") as tmp:
        results = run(5 if args.quick else 10, Path(tmp))
    text = f"{mode}, {render(results, machine(load_at_start))}"
    print("\n" + text)
    # Every attack, one by one, on a fresh exporter each (abuse_table.py).
    load_at_start = load_average()
    seconds = abuse_table.SECONDS / 2 if args.quick else abuse_table.SECONDS
    with tempfile.TemporaryDirectory(prefix="kge-abuse-table-") as tmp:
        rows = abuse_table.run(Path(tmp), seconds)
    table = f"{mode}, run: {machine(load_at_start)}\n\n{abuse_table.render(rows, seconds)}"
    print("\n" + table)
    if args.readme:
        _replace(START, END, text)
        _replace(ABUSE_TABLE_START, ABUSE_TABLE_END, table)
        say(f"results written to {README}")
    return 0


def _replace(start: str, end: str, text: str) -> None:
    readme = README.read_text(encoding="utf-8")
    head, _, rest = readme.partition(start)
    _, _, tail = rest.partition(end)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
