"""Helpers shared by the tests: free ports, polling, and the exporter as a real subprocess."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]  # (name, labels) → value


def free_port() -> int:
    """A loopback port for a server a test starts, that nothing else is handed meanwhile.

    A port merely found free and released can be handed straight out again by the kernel, to
    another worker's free_port() or to any socket's bind(0) or connect(), and under `pytest -n`
    two servers would then race for it. So the port is left in TIME_WAIT instead (a connection
    accepted and closed first on the server side): the kernel's port autoselection skips it for
    a minute, while a server that sets SO_REUSEADDR, as aiohttp, Go's net package and
    http.server all do, binds it at once. (The trick of Yelp's ephemeral-port-reserve.)
    """
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        address = listener.getsockname()
        with socket.create_connection(address):
            accepted, _ = listener.accept()
            accepted.close()
    return int(address[1])


def wait_until(check: Callable[[], T | None], timeout: float = 60.0, what: str = "") -> T:
    """Poll `check` until it returns something truthy; fail the test with `what` otherwise.

    The timeout only bounds how long a broken run hangs, so it is generous: on a loaded
    machine (the suite's parallel workers on two cores) an exporter can take 20 s to start."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}")
        time.sleep(0.1)


def full_collections_during(action: Callable[[], object]) -> int:
    """How many full (generation 2) collections ran while `action()` ran."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(note)
    try:
        action()
    finally:
        gc.callbacks.remove(note)
    return len(seen)


def http_get(
    url: str, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()
    except OSError:
        return 0, {}, b""


def samples(body: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Parse Prometheus text into {(name, labels): value} for precise assertions."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def values(
    parsed: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> list[float]:
    """Values of `name` whose labels include `labels`."""
    want = set(labels.items())
    return [v for (n, ls), v in parsed.items() if n == name and want <= ls]


class Exporter:
    """A running `kube-gpu-exporter serve` subprocess."""

    def __init__(
        self, proc: subprocess.Popen[str], port: int, log_path: Path, host: str = "127.0.0.1"
    ) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.url = f"http://{host}:{port}"

    def get(self, path: str = "/metrics", **headers: str) -> tuple[int, dict[str, str], bytes]:
        return http_get(self.url + path, headers)

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        status, _, body = self.get()
        assert status == 200, f"/metrics answered {status}: {body[:200]!r}"
        return samples(body)

    def metrics_when(
        self,
        check: Callable[[dict[tuple[str, frozenset[tuple[str, str]]], float]], bool],
        what: str,
    ) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The first /metrics for which `check` holds (a view or snapshot is republished on
        its interval)."""

        def attempt() -> Samples | None:
            parsed = self.metrics()
            return parsed if check(parsed) else None

        return wait_until(attempt, what=what)

    def log(self) -> str:
        return self.log_path.read_text()


def exporter_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kube_gpu_exporter.exporter", *args]


@contextmanager
def run_exporter(
    args: Sequence[str],
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    wait_ready: bool = True,
    command: str = "serve",
    prefix: Sequence[str] = (),
    host: str = "127.0.0.1",
) -> Iterator[Exporter]:
    """Start the exporter (`command`: serve, or cluster) on a free port, wait until it
    answers, SIGTERM it afterwards. `prefix` runs it under another command (e.g. `unshare`,
    which must pass SIGTERM on). `host` is the address it listens on."""
    port = free_port()
    log_path = tmp_path / f"exporter-{port}.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [*prefix, *exporter_command(command, f"--web.listen-address={host}:{port}", *args)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            text=True,
        )
    exporter = Exporter(proc, port, log_path, host)
    try:
        path = "/readyz" if wait_ready else "/healthz"
        wait_until(
            lambda: proc.poll() is not None or exporter.get(path)[0] == 200,
            what=f"exporter {path}",
        )
        assert proc.poll() is None, f"exporter exited early:\n{exporter.log()}"
        yield exporter
    finally:
        stop_process(proc, 10)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGTERM, and SIGKILL when `proc` has not ended within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def serve_exposition(text: str) -> Iterator[str]:
    """A fixed Prometheus text exposition on a loopback port (e.g. kube-state-metrics series
    for queries that join them); yields its `host:port` target."""
    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def json_from_script(script: str, env: Mapping[str, str]) -> object:
    """Run `script` in a fresh Python with `env` added (a library path pynvml must load from
    the start, say) and parse what it prints as JSON; fail the test with its stderr."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
