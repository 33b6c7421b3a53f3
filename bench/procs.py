"""The servers under test as subprocesses, and what /proc says about a process.

Each server runs in its own process so that wrk measures it alone and its CPU and memory can
be read from /proc without the bench's own Python in the figures.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from errors import BenchError

HOST = "127.0.0.1"
BENCH_DIR = Path(__file__).resolve().parent
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def last_log_line(self) -> str:
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def exporter_command(
    port: int, interval_seconds: int, pod_resources_socket: str = "", *extra: str
) -> list[str]:
    """`serve` on the fake NVML; attribution is off unless a kubelet socket is given."""
    return [
        sys.executable,
        "-m",
        "kube_gpu_exporter.exporter",
        "serve",
        f"--collector.interval={interval_seconds}s",
        f"--web.listen-address={HOST}:{port}",
        f"--kubelet.pod-resources-socket={pod_resources_socket}",
        *extra,
    ]


def client_server_command(port: int) -> list[str]:
    return [sys.executable, str(BENCH_DIR / "client_server.py"), str(port)]


def _wait_ready(server: Server, ready_url: str, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while http_status(ready_url) != 200:
        if server.proc.poll() is not None:
            raise BenchError(
                f"{name} exited with status {server.proc.returncode}: {server.last_log_line()}"
            )
        if time.monotonic() > deadline:
            raise BenchError(f"{name} not ready after {START_TIMEOUT_SECONDS:.0f}s: {ready_url}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time: never leave a server behind."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running(
    name: str,
    command: Sequence[str],
    port: int,
    env: Mapping[str, str],
    log_dir: Path,
    ready_path: str,
) -> Iterator[Server]:
    """Start a server, wait until `ready_path` answers 200, and always stop it afterwards."""
    log_path = log_dir / f"{name}-{port}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            list(command),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    server = Server(proc, port, log_path)
    try:
        _wait_ready(server, server.url + ready_path, name)
        yield server
    finally:
        stop(proc)


def _stat_cpu_seconds(stat_path: Path) -> float:
    """utime + stime from a /proc stat file (fields 14 and 15)."""
    fields = stat_path.read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU of a whole process, all its threads, dead ones included."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


@dataclass(frozen=True)
class ThreadCpu:
    cpu_s: float
    voluntary_switches: int  # how often it slept: a polling thread stands out


def thread_cpu(pid: int) -> dict[int, ThreadCpu]:
    """Per-thread CPU, to tell the exporter's own work from the fake NVML's event polling."""
    threads: dict[int, ThreadCpu] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu = _stat_cpu_seconds(task / "stat")
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended while we looked
        switches = next(
            int(line.split()[1])
            for line in status.splitlines()
            if line.startswith("voluntary_ctxt_switches:")
        )
        threads[int(task.name)] = ThreadCpu(cpu, switches)
    return threads


def rss_bytes(pid: int | str = "self") -> int:
    """VmRSS of a process, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS in /proc/{pid}/status")


def count_samples(metrics_text: str, name: str = "") -> int:
    """Samples in Prometheus text; with `name`, only that family's (labelled or not)."""
    return sum(
        1
        for line in metrics_text.splitlines()
        if line
        and not line.startswith("#")
        and (not name or line.startswith((name + "{", name + " ")))
    )


def sample_value(metrics_text: str, name: str) -> float:
    """The value of an unlabelled sample in Prometheus text (enough for the exporter's own)."""
    for line in metrics_text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise BenchError(f"{name} not found in the exporter's /metrics")
