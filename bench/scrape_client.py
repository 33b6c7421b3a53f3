"""A Prometheus-like scraper in a process of its own, for bench/cluster.py.

The cluster bench's own process runs the test API server's watch threads and the churn, so
a scraper in it measured its own wait for that process's GIL as well as the exporter's
answer. This one runs apart: one keep-alive connection, `Accept-Encoding: gzip` and the
Accept header of Prometheus 3.x, a scrape every 50 ms, as Prometheus' scrape loop does. A
first scrape, not recorded, opens the connection and asks for the OpenMetrics variant once
(the exporter then pre-renders it each cycle): Prometheus' steady state, not its first scrape.

It also tells when the view was rebuilt: each cycle ends by publishing a new body, so a
response that differs from the one before marks a publication between the two scrapes, and
the new body's `kube_gpu_cluster_build_duration_seconds` says how long its build ran. After
its time is up it scrapes on, unrecorded, until the next publication (at most TAIL_S), so a
cycle still running at the end is known too.

Run as `scrape_client.py PORT SECONDS`: the scrapes and publications as JSON on stdout.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from abuse import Scrapes
from errors import BenchError
from procs import HOST

from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS, GZIP_WBITS

BUILD = "kube_gpu_cluster_build_duration_seconds"
HEADERS = {"Accept-Encoding": "gzip", "Accept": COMMON_ACCEPT_HEADERS[2]}  # Prometheus 3.x
PERIOD_S = 0.05
TAIL_S = 5.0  # longer than the builds under churn so far (3.5 s at most)
_BUILD_LINE = re.compile(rb"^" + BUILD.encode() + rb" (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Scrape:
    at: float  # time.monotonic() when sent (the clock is the machine's, shared by processes)
    ms: float
    status: int  # 0: no answer

    @property
    def end(self) -> float:
        return self.at + self.ms / 1000


@dataclass(frozen=True)
class Cycle:
    """A publication of the view, seen between two scrapes, and its build's duration."""

    after: float  # the last scrape that got the old body was sent then
    by: float  # the first scrape with the new body had its answer then
    build_s: float

    def span(self, render_s: float) -> tuple[float, float]:
        """From the earliest its build can have begun (rendering at most `render_s`) to the
        latest it was published."""
        return self.after - self.build_s - render_s, self.by


@dataclass(frozen=True)
class ScrapeLog:
    scrapes: list[Scrape]
    cycles: list[Cycle]
    seconds: float

    def all(self) -> Scrapes:
        return _scrapes(self.scrapes)

    def split(self, render_s: float) -> tuple[Scrapes, Scrapes]:
        """The scrapes that overlapped a cycle's span, and those clear of every cycle."""
        spans = [cycle.span(render_s) for cycle in self.cycles]
        overlaps = [any(s.at < hi and s.end > lo for lo, hi in spans) for s in self.scrapes]
        during = [s for s, overlap in zip(self.scrapes, overlaps, strict=True) if overlap]
        clear = [s for s, overlap in zip(self.scrapes, overlaps, strict=True) if not overlap]
        return _scrapes(during), _scrapes(clear)


def _scrapes(scrapes: list[Scrape]) -> Scrapes:
    result = Scrapes()
    for scrape in scrapes:
        result.statuses[scrape.status] += 1
        result.latencies_ms.append(scrape.ms)
    return result


def scrape_apart(port: int, seconds: float) -> ScrapeLog:
    """Run this module as a process for `seconds` against 127.0.0.1:`port`."""
    argv = [sys.executable, str(Path(__file__).resolve()), str(port), f"{seconds:g}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"scrape_client.py exited {done.returncode}: {done.stderr.strip()}")
    found = json.loads(done.stdout)
    scrapes = [Scrape(*row) for row in found["scrapes"]]
    return ScrapeLog(scrapes, [Cycle(*row) for row in found["cycles"]], seconds)


def _scrape(conn: http.client.HTTPConnection) -> tuple[int, bytes]:
    conn.request("GET", "/metrics", headers=HEADERS)
    response = conn.getresponse()
    return response.status, response.read()


def _build_seconds(gzipped: bytes) -> float:
    match = _BUILD_LINE.search(zlib.decompress(gzipped, GZIP_WBITS))
    return float(match[1]) if match else float("nan")


def scrape(port: int, seconds: float) -> dict[str, list[list[float]]]:
    """Scrapes for `seconds`, then on until a publication (unrecorded), as lists for JSON."""
    scrapes: list[list[float]] = []
    cycles: list[list[float]] = []
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    _scrape(conn)
    time.sleep(PERIOD_S)
    last, last_at = b"", 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline + TAIL_S:
        at = time.monotonic()
        try:
            status, body = _scrape(conn)
        except (OSError, http.client.HTTPException):
            status, body = 0, b""
            conn.close()
            conn = http.client.HTTPConnection(HOST, port, timeout=10)
        ms = (time.monotonic() - at) * 1000
        if at < deadline:
            scrapes.append([at, ms, status])
        if status == 200 and body != last:
            if last:
                cycles.append([last_at, at + ms / 1000, _build_seconds(body)])
                if at >= deadline:
                    break
            last = body
        if status == 200:
            last_at = at
        time.sleep(PERIOD_S)
    conn.close()
    return {"scrapes": scrapes, "cycles": cycles}


if __name__ == "__main__":
    print(json.dumps(scrape(int(sys.argv[1]), float(sys.argv[2]))))
