"""`make bench`, the abuse table: each attack of an untrusted network against the exporter at
its default limits, the Prometheus-like scraper beside it, on this code and on last round's.

Attackers bind other loopback addresses (40 of them: 127.0.0.2, …), the scraper 127.0.0.1, as
in tests/integration/test_client_shares.py, whose clients this reuses. Per attack and per code,
a fresh exporter on the bench's fake 64-device node (so the scraper's first scrape opens its
first connection and, under auth, finds its password not yet cached), then:

- the attack is put in place (1,000 connections, or the flood started),
- the scraper scrapes SCRAPES times, 0.1 s apart, on one keep-alive connection (a new one when
  it is closed), with the kubelet's /healthz on a fresh connection beside each,
- the exporter's VmRSS peak (sampled every 50 ms) and CPU over the scraper's run are recorded.

Last round's code is the commit before serve/wire.py was added (or `--baseline REF`), checked
out with `git worktree` in a temporary folder outside the checkout and run with PYTHONPATH
pointing at it, in the same run and on the same node. Usage: bench/abuse_table.py [--quick]
"""

from __future__ import annotations

import contextlib
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import procs
from fake import REPO, FakeNode, prepare
from node import node_scenario

sys.path.insert(0, str(REPO / "tests"))  # the tests' clients, imported as pytest does

from abuse_clients import (
    Scraper,
    Seen,
    basic,
    client_hello,
    close_all,
    idle_keep_alive,
    never_reading,
    open_many,
)
from raw_http import Reader, connect, other_addresses, request

MIB = 1 << 20
CONNECTIONS = 1_000
ADDRESSES = 40
SCRAPES = 100
SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nX-Slow: "


def say(message: str) -> None:
    print(f"[abuse table {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass(frozen=True)
class Code:
    """Which exporter runs: this checkout, or a baseline's worktree on PYTHONPATH."""

    name: str
    pythonpath: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": self.pythonpath} if self.pythonpath else {}


@dataclass(frozen=True)
class Row:
    attack: str
    code: str
    seen: Seen
    rss_peak: int
    cpu_s: float

    @property
    def success(self) -> float:
        return self.seen.statuses[200] / self.seen.total if self.seen.total else 0.0

    def p99_ms(self) -> float:
        ordered = sorted(self.seen.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000

    def markdown(self) -> str:
        probes_failed = sum(n for status, n in self.seen.probes.items() if status != 200)
        met = self.success >= 0.99 and self.seen.worst < 1.0 and not probes_failed
        met = met and self.rss_peak < 100 * MIB
        return (
            f"| {self.attack} | {self.code} | {self.success:.1%} | {self.p99_ms():.1f} ms | "
            f"{self.seen.worst * 1000:.0f} ms | {probes_failed} of {self.seen.total} | "
            f"{self.rss_peak / MIB:.1f} MiB | {self.cpu_s:.1f} s | "
            f"{'met' if met else '**missed**'} |"
        )


@contextlib.contextmanager
def exporter(
    code: Code, node: FakeNode, work: Path, extra: list[str], tls: ssl.SSLContext | None
) -> Iterator[subprocess.Popen[bytes]]:
    port = procs.free_port()
    command = procs.exporter_command(port, 5, "", *extra)
    log = work / f"abuse-table-{code.name.replace(' ', '-')}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **node.env, **code.env})  # fmt: skip
    proc.port = port  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + procs.START_TIMEOUT_SECONDS
        while not ready(port, tls):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise procs.BenchError(f"exporter ({code.name}) not ready: {log.read_text()}")
            time.sleep(0.1)
        yield proc
    finally:
        procs.stop(proc)


def ready(port: int, tls: ssl.SSLContext | None) -> bool:
    try:
        with contextlib.closing(connect(port, timeout=2)) as raw:
            sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
            sock.sendall(request("GET", "/readyz"))
            return Reader(sock).response().status == 200
    except (OSError, AssertionError, ValueError):
        return False


class RssPeak:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, procs.rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(OSError, procs.BenchError):
                self.peak = max(self.peak, procs.rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@contextlib.contextmanager
def password_flood(port: int) -> Iterator[None]:
    """20 threads on 10 addresses: a new random password, or an unknown user, every time."""
    stop = threading.Event()
    failed: Counter[int] = Counter()

    def flooder(source: str, n: int) -> None:
        while not stop.is_set():
            user = "prometheus" if n % 2 else secrets.token_hex(4)
            headers = {"Authorization": basic(user, secrets.token_hex(8))}
            try:
                with contextlib.closing(connect(port, source=source)) as sock:
                    sock.sendall(request("GET", "/metrics", headers))
                    failed[Reader(sock).response().status] += 1
            except (OSError, AssertionError, ValueError):
                failed[0] += 1

    threads = [
        threading.Thread(target=flooder, args=(source, n), daemon=True)
        for n, source in enumerate(other_addresses(10) * 2)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2)  # every address has failed a check: the scraper meets a flood under way
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


Attack = Callable[[int], contextlib.AbstractContextManager[object]]


@contextlib.contextmanager
def holding(open_them: Callable[[], list[object]]) -> Iterator[None]:
    held = open_them()
    time.sleep(0.5)
    try:
        yield
    finally:
        close_all(held)  # type: ignore[arg-type]


def attacks() -> list[tuple[str, str, Attack]]:
    """(what, server kind: plain / tls / auth, the attack on a port)."""
    n, a = CONNECTIONS, ADDRESSES
    return [
        ("1,000 idle keep-alive", "plain", lambda p: holding(lambda: idle_keep_alive(p, n, a))),
        ("1,000 slowloris", "plain", lambda p: holding(lambda: open_many(p, n, a, SLOW_HEAD))),
        ("1,000 silent", "plain", lambda p: holding(lambda: open_many(p, n, a))),
        (
            "1,000 never-reading (100 pipelined scrapes each)",
            "plain",
            lambda p: holding(lambda: never_reading(p, n, a, 100)),
        ),
        (
            "1,000 half-TLS (ClientHello, then silence)",
            "tls",
            lambda p: holding(lambda: open_many(p, n, a, client_hello())),
        ),
        ("1,000 'GE' on the TLS port", "tls", lambda p: holding(lambda: open_many(p, n, a, b"GE"))),
        ("wrong passwords and unknown users, 20 threads", "auth", password_flood),
    ]


def configs(work: Path) -> tuple[dict[str, list[str]], ssl.SSLContext]:
    folder = work / "pki"
    folder.mkdir(exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", "server.key", "-out", "server.crt"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    tls = work / "tls.yml"
    tls.write_text(f"tls_server_config:\n  cert_file: {folder}/server.crt\n"
                   f"  key_file: {folder}/server.key\n")  # fmt: skip
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=10)).decode()
    auth = work / "auth.yml"
    auth.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    extra = {
        "plain": [],
        "tls": [f"--web.config.file={tls}"],
        "auth": [f"--web.config.file={auth}"],
    }
    return extra, ssl.create_default_context(cafile=str(folder / "server.crt"))


def measure(code: Code, node: FakeNode, work: Path, scrapes: int, only: str = "") -> list[Row]:
    extra, client = configs(work)
    rows = []
    for what, kind, attack in attacks():
        if only not in what:
            continue
        say(f"{code.name}: {what}")
        tls = client if kind == "tls" else None
        with exporter(code, node, work, extra[kind], tls) as proc:
            rss = RssPeak(proc.pid)
            port: int = proc.port  # type: ignore[attr-defined]
            with attack(port):
                cpu = procs.cpu_seconds(proc.pid)
                authorization = basic("prometheus", "secret") if kind == "auth" else ""
                scraper = Scraper(port, scrapes, 0.1, authorization, tls)
                scraper.run()
                cpu = procs.cpu_seconds(proc.pid) - cpu
            rows.append(Row(what, code.name, scraper.seen, rss.stop(), cpu))
    return rows


def baseline_ref() -> str:
    """The commit before serve/wire.py (this round's serving layer) was added."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "exporter/serve/wire.py"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return f"{added[-1]}^" if added else "HEAD"


@contextlib.contextmanager
def baseline(ref: str, tmp: Path) -> Iterator[Code]:
    """`ref` in a git worktree under `tmp`, importable as kube_gpu_exporter."""
    tree = tmp / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref],
                   cwd=REPO, check=True, capture_output=True)  # fmt: skip
    try:
        commit = short_commit(tree)
        package = tmp / "src" / "kube_gpu_exporter"
        package.mkdir(parents=True)
        for name in ("exporter", "rules", "grafana", "demo"):
            (package / name).symlink_to(tree / name)
        yield Code(f"last round ({commit})", str(tmp / "src"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                       cwd=REPO, capture_output=True)  # fmt: skip


def short_commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, check=True, capture_output=True
    )
    return done.stdout.decode().strip()


def run(work: Path, ref: str, scrapes: int, only: str = "") -> list[Row]:
    node = prepare(work, node_scenario())
    rows = measure(Code(f"this round ({short_commit(REPO)}+)"), node, work, scrapes, only)
    with baseline(ref, work) as code:
        rows += measure(code, node, work, scrapes, only)
    order = [what for what, _, _ in attacks()]
    return sorted(rows, key=lambda row: (order.index(row.attack), not row.code.startswith("this")))


def render(rows: list[Row], scrapes: int) -> str:
    return "\n".join(
        [
            f"The exporter at its defaults; the scraper on its own address, {scrapes} scrapes "
            "0.1 s apart plus a fresh-connection `/healthz` beside each, against 1,000 "
            f"connections from {ADDRESSES} other addresses (or the flood).",
            "",
            "| attack | code | scraper 200s | p99 | slowest | /healthz failed | VmRSS peak | "
            "CPU (scraper's run) | targets |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|",
            *(row.markdown() for row in rows),
            "",
            "Targets: ≥ 99 % 200s, each within 1 s (slowest), /healthz never failing, VmRSS "
            "< 100 MiB.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 scrapes per attack, not 100")
    parser.add_argument("--baseline", default="", help="git ref of last round's code")
    parser.add_argument("--only", default="", help="only the attacks whose name has this")
    args = parser.parse_args(argv)
    scrapes = 20 if args.quick else SCRAPES
    with tempfile.TemporaryDirectory(prefix="kge-abuse-table-") as tmp:
        rows = run(Path(tmp), args.baseline or baseline_ref(), scrapes, args.only)
    print("\n" + render(rows, scrapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
