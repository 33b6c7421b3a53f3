"""The node exporters of bench/peers.py as subprocesses, and a sequential scraper.

Each server is started the way its users start it, on the same fake node (the environment
that points libnvidia-ml.so.1 at the fake and the fake at its state file): ours as `serve`
with attribution off and with the DaemonSet's own flags (bench/deployed.py), nvitop-exporter
from its own virtual environment, and prometheus-client's `start_http_server` over our
collector (bench/client_server.py). Figures are read from /proc, so the bench's own Python is
never in them.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import procs
from errors import BenchError

FIRST_DATA_POLL_S = 0.01
GZIP = {"Accept-Encoding": "gzip"}


@dataclass(frozen=True)
class Peer:
    """One exporter under test: `command(port)` starts it listening on 127.0.0.1:port."""

    key: str  # ours, deployed, nvitop, client
    name: str  # as the tables show it
    command: Callable[[int], list[str]]
    env: Mapping[str, str] = field(default_factory=dict)  # beside the fake node's


def peers(nvitop: Path, interval_s: int, deployed: Peer) -> tuple[Peer, ...]:
    """Ours first, attribution off then as deployed (bench/deployed.py): every ratio in the
    report is one of ours ÷ a peer's."""

    def nvitop_command(port: int) -> list[str]:
        return [
            str(nvitop),
            f"--bind-address={procs.HOST}",
            f"--port={port}",
            f"--interval={interval_s}",
        ]

    return (
        Peer("ours", "kube-gpu-exporter", lambda port: procs.exporter_command(port, interval_s)),
        deployed,
        Peer("nvitop", "nvitop-exporter", nvitop_command),
        Peer("client", "prometheus-client", procs.client_server_command),
    )


class Scraper:
    """GET /metrics one after another on a keep-alive connection, as Prometheus does.

    A server that closes after each answer (prometheus-client's WSGI server speaks HTTP/1.0)
    gets a new connection for each request; http.client reopens it by itself.
    """

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection(procs.HOST, port, timeout=30)

    def get(self, gzip: bool = False) -> tuple[int, bytes]:
        try:
            self._conn.request("GET", "/metrics", headers=GZIP if gzip else {})
            response = self._conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self._conn.close()
            return 0, b""

    def close(self) -> None:
        self._conn.close()


@dataclass
class Running:
    peer: Peer
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started: float  # time.monotonic() just before the spawn

    @property
    def pid(self) -> int:
        return self.proc.pid

    def last_log_line(self) -> str:
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"


def has_every_device(body: bytes, uuids: frozenset[bytes]) -> bool:
    return all(uuid in body for uuid in uuids)


def wait_first_data(server: Running, uuids: frozenset[bytes]) -> float:
    """Seconds from the spawn to the first 200 /metrics that names every device."""
    deadline = server.started + procs.START_TIMEOUT_SECONDS
    scraper = Scraper(server.port)
    try:
        while True:
            status, body = scraper.get()
            if status == 200 and has_every_device(body, uuids):
                return time.monotonic() - server.started
            if server.proc.poll() is not None:
                raise BenchError(
                    f"{server.peer.name} exited with status {server.proc.returncode}: "
                    f"{server.last_log_line()}"
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{server.peer.name}: no /metrics with all {len(uuids)} devices after "
                    f"{procs.START_TIMEOUT_SECONDS:.0f} s ({server.last_log_line()})"
                )
            time.sleep(FIRST_DATA_POLL_S)
    finally:
        scraper.close()


@contextmanager
def running(peer: Peer, env: Mapping[str, str], log_dir: Path) -> Iterator[Running]:
    """Spawn `peer` on a free port; it is always stopped afterwards (SIGTERM, then SIGKILL)."""
    port = procs.free_port()
    log_path = log_dir / f"{peer.key}-{port}.log"
    with log_path.open("wb") as log_file:
        started = time.monotonic()
        proc = subprocess.Popen(
            peer.command(port),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, **peer.env},
        )
    try:
        yield Running(peer, proc, port, log_path, started)
    finally:
        procs.stop(proc)
