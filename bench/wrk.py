"""Running wrk against a /metrics URL and reading its summary.

wrk (not a Python client) generates the load so the load generator's own GIL and overhead do
not end up in the exporter's latency figures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass

from errors import BenchError

GZIP_HEADERS = {"Accept-Encoding": "gzip"}

_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
_PERCENTILE = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", re.MULTILINE)
_RATE = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)
_TOTAL = re.compile(r"^\s*(\d+) requests in ", re.MULTILINE)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


@dataclass(frozen=True)
class WrkResult:
    p50_ms: float
    p99_ms: float
    requests_per_second: float
    requests: int
    non_2xx: int
    socket_errors: int
    body_bytes: int


@dataclass(frozen=True)
class Load:
    """How hard to push: wrk threads, open connections and seconds."""

    threads: int
    connections: int
    seconds: int


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise BenchError("wrk is not installed (apt-get install wrk, or run `make bench`)")
    return path


def parse(output: str, body_bytes: int) -> WrkResult:
    """Pull p50/p99, req/s and error counts out of `wrk --latency`'s text summary."""
    percentiles = {int(p): float(v) * _UNITS_MS[u] for p, v, u in _PERCENTILE.findall(output)}
    rate = _RATE.search(output)
    total = _TOTAL.search(output)
    if set(percentiles) != {50, 99} or rate is None or total is None:
        raise BenchError(f"cannot read wrk's output: {output.strip()[:300]!r}")
    non_2xx = _NON_2XX.search(output)
    sockets = _SOCKET_ERRORS.search(output)
    return WrkResult(
        p50_ms=percentiles[50],
        p99_ms=percentiles[99],
        requests_per_second=float(rate.group(1)),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(n) for n in sockets.groups()) if sockets else 0,
        body_bytes=body_bytes,
    )


def body_size(url: str, headers: dict[str, str]) -> int:
    """The body as sent on the wire (urllib does not decompress), for the table."""
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return len(response.read())


def run(url: str, load: Load, headers: dict[str, str] | None = None) -> WrkResult:
    headers = headers or {}
    command = [
        wrk_path(),
        f"-t{load.threads}",
        f"-c{load.connections}",
        f"-d{load.seconds}s",
        "--latency",
    ]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    command.append(url)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=load.seconds + 60, check=False
    )
    if result.returncode != 0:
        raise BenchError(f"wrk failed ({result.returncode}): {result.stderr.strip()[:300]}")
    return parse(result.stdout, body_size(url, headers))
