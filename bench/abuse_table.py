"""`make bench`, the abuse table: each attack of an untrusted network against the exporter, with
a Prometheus-like scraper and a kubelet-like prober beside it.

Per attack, a fresh exporter on the bench's fake 64-device node (so the scraper's credentials,
under auth, are not yet cached), at its default limits unless the attack says otherwise; then:

- the attack is put in place (hostile.py: connections held and reopened when cut, a flood, a
  connection pushing requests it never reads the answers of, rounds of TLS handshakes) and
  has gone round once (a password flood then runs FLOOD_SETTLE seconds more),
- the scraper (127.0.0.1) scrapes on a new connection every 0.1 s, as Prometheus does after
  its idle connection was dropped, for SECONDS (from its first 200 under a password flood;
  until the last round of TLS bursts); the prober (127.0.0.251, the node's own address)
  asks `/healthz` on a new connection every second, 3 s to answer; both on the attackers'
  address for the shared-address attack,
- the exporter's VmRSS peak (sampled every 50 ms, from its start) and its CPU over the
  scraper's run are recorded, with the attack's own figures.

Targets: the scraper ≥ 99 % 200s, no probe failing, VmRSS ≤ 100 MiB, under every
attack; under a password flood, its first 200 within one scrape_timeout (10 s). `--baseline
REF` runs every attack on REF's code too (a `git worktree` in a temporary folder, on
PYTHONPATH). Usage: bench/abuse_table.py [--quick] [--only TEXT] [--baseline REF]
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
from hostile import (
    FIRST_200_WAIT,
    HEALTHZ,
    SCRAPE_TIMEOUT,
    SLOW_HEAD,
    InboxPush,
    Prober,
    Scraper,
    Seen,
    Swarm,
    TlsBursts,
    addresses,
    basic,
    client_hello,
    fresh_status,
    listen_drops,
    never_reading,
    raise_descriptor_limit,
    request,
)
from node import node_scenario

MIB = 1 << 20
RSS_TARGET = 100 * MIB
SUCCESS_TARGET = 0.99
SECONDS = 6.0  # the scraper's run per attack; --quick: 3
SCRAPER, PROBER = "127.0.0.1", "127.0.0.251"  # addresses() never yields .251 to .254
FLOOD_SETTLE = 10.0  # a password flood's queue of checks builds up before the scraper comes
READY_SECONDS = 30.0  # for an attack to go round once
SHARE = 32  # --web.max-connections-per-client's default


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
class Target:
    """The exporter under attack, as the attack sees it."""

    port: int
    pid: int
    tls: ssl.SSLContext | None  # the scraper's and prober's (a client certificate under mTLS)
    server_cert: ssl.SSLContext | None  # an attacker's: verifies the server, no certificate
    quick: bool

    def rss(self) -> int:
        return procs.rss_bytes(self.pid)


class Running:
    """An attack under way: its own figures once over, and, for one that ends by itself
    (TLS bursts), when it has."""

    def __init__(self, figures: Callable[[], str], over: threading.Event | None = None) -> None:
        self.figures = figures
        self.over = over


Start = Callable[[Target], contextlib.AbstractContextManager[Running]]


@dataclass(frozen=True)
class Attack:
    name: str
    kind: str  # the server: plain, tls, mtls (client certificates required) or auth
    start: Start
    flags: tuple[str, ...] = ()
    shared: bool = False  # the scraper and the prober on the attackers' address
    after_first_200: bool = False  # the scraper's run counted from its first 200
    settle: float = 0.0  # seconds the attack runs before the scraper starts (halved --quick)


@dataclass(frozen=True)
class Row:
    attack: str
    code: str
    seen: Seen
    probes: Counter[int]
    rss_peak: int
    cpu_s: float
    figures: str
    first_200_target: bool = False  # the scraper's first 200 within one scrape_timeout

    @property
    def probes_failed(self) -> int:
        return sum(n for status, n in self.probes.items() if status != 200)

    @property
    def met(self) -> bool:
        return (
            self.seen.success >= SUCCESS_TARGET
            and not self.probes_failed
            and sum(self.probes.values()) > 0
            and self.rss_peak <= RSS_TARGET
            and not (
                self.first_200_target
                and (self.seen.first_200_s is None or self.seen.first_200_s > SCRAPE_TIMEOUT)
            )
        )

    def markdown(self, with_code: bool) -> str:
        s = self.seen
        code = f" {self.code} |" if with_code else ""
        return (
            f"| {self.attack} |{code} {s.statuses[200]} of {s.total} ({s.success:.1%}) | "
            f"{s.percentile(0.99) * 1000:.0f} ms | {max(s.latencies, default=0) * 1000:.0f} ms"
            f" | {self.probes_failed} of {sum(self.probes.values())} | "
            f"{self.rss_peak / MIB:.1f} MiB | {self.cpu_s:.1f} s | {self.figures} | "
            f"{'met' if self.met else '**missed**'} |"
        )


def _statuses(counts: Counter[int]) -> str:
    ordered = sorted(counts.items())
    return ", ".join(f"{n:,} × {status or 'none'}" for status, n in ordered) or "none"


# The attacks --------------------------------------------------------------------------------


@contextlib.contextmanager
def swarm(
    target: Target,
    slots: list[tuple[str, Callable[[], bytes]]],
    hold: bool = True,
    extra: Callable[[Swarm], str] = lambda s: "",
) -> Iterator[Running]:
    attackers = Swarm(target.port, slots, hold)
    attackers.start()
    try:
        attackers.went_round.wait(READY_SECONDS)
        time.sleep(0.5)
        yield Running(
            lambda: (
                extra(attackers)
                or f"{attackers.connects:,} attacker connects, {attackers.cuts:,} cut"
            )
        )
    finally:
        attackers.stop.set()
        attackers.join(30)


def constant(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def spread(count: int, over: int, *openings: bytes) -> Start:
    """`count` connections over `over` addresses, the i-th opening with openings[i % n]."""
    sources = addresses(over)
    slots = [(sources[i % over], constant(openings[i % len(openings)])) for i in range(count)]
    return lambda target: swarm(target, slots)


def many_addresses(count: int, *openings: bytes) -> Start:
    """One or two connections on each of `count` addresses (odd ones two), the address's
    connections opening with openings[address % n]."""
    slots = []
    for n, source in enumerate(addresses(count)):
        slots += [(source, constant(openings[n % len(openings)]))] * (1 + n % 2)
    return lambda target: swarm(target, slots)


def shared_address(count: int) -> Start:
    """`count` slowloris connections on the scraper's and prober's own address."""
    return lambda target: swarm(target, [(SCRAPER, constant(SLOW_HEAD))] * count)


@contextlib.contextmanager
def _never_reading(target: Target, count: int, over: int, pipelined: int) -> Iterator[Running]:
    held = never_reading(target.port, count, addresses(over), pipelined)
    time.sleep(0.5)
    try:
        yield Running(lambda: f"{len(held):,} connected")
    finally:
        for sock in held:
            sock.close()


def never_readers(count: int, over: int, pipelined: int) -> Start:
    return lambda target: _never_reading(target, count, over, pipelined)


@contextlib.contextmanager
def _inbox(target: Target) -> Iterator[Running]:
    pusher = InboxPush(target.port, addresses(1)[0], target.tls)
    pusher.start()
    try:
        time.sleep(0.5)
        before = pusher.accepted
        yield Running(
            lambda: (
                f"{pusher.accepted >> 10:,} KiB taken from it, kernel buffers included "
                f"({before >> 10:,} KiB before the scraper started)"
                + (", then cut" if pusher.cut else "")
            )
        )
    finally:
        pusher.stop.set()
        pusher.join(10)


def inbox_growth(target: Target) -> contextlib.AbstractContextManager[Running]:
    return _inbox(target)


def wrong_password() -> bytes:
    """A new wrong password, for the known user or (every other time) an unknown one."""
    user = "prometheus" if secrets.randbits(1) else secrets.token_hex(4)
    return request("GET", "/metrics", {"Authorization": basic(user, secrets.token_hex(8))})


def password_flood(count: int) -> Start:
    slots = [(source, wrong_password) for source in addresses(count)]

    def figures(attackers: Swarm) -> str:
        return f"flood answers: {_statuses(attackers.answers)}"

    return lambda target: swarm(target, slots, hold=False, extra=figures)


@contextlib.contextmanager
def _bursts(target: Target, size: int, over: int, rounds: int) -> Iterator[Running]:
    assert target.server_cert is not None
    bursts = TlsBursts(target.port, size, addresses(over), target.server_cert, target.rss, rounds)
    over_event = threading.Event()

    def watch() -> None:
        bursts.join(60)
        over_event.set()

    bursts.start()
    threading.Thread(target=watch, daemon=True).start()
    try:
        yield Running(
            lambda: (
                f"{bursts.handshakes:,} handshakes ({bursts.refused} failed); VmRSS after "
                f"each round: {', '.join(f'{rss / MIB:.0f}' for rss in bursts.after_round)} MiB"
            ),
            over_event,
        )
    finally:
        bursts.stop.set()
        bursts.join(60)


def tls_bursts(size: int, over: int, rounds: int, quick_rounds: int) -> Start:
    return lambda target: _bursts(target, size, over, quick_rounds if target.quick else rounds)


def attacks() -> list[Attack]:
    hello = client_hello()
    return [
        Attack("1,000 idle keep-alive, 40 addresses", "plain", spread(1000, 40, HEALTHZ)),
        Attack("1,000 slowloris, 40 addresses", "plain", spread(1000, 40, SLOW_HEAD)),
        Attack("1,000 silent, 40 addresses", "plain", spread(1000, 40, b"")),
        Attack(
            "1,000 never-reading (100 pipelined scrapes each), 40 addresses",
            "plain",
            never_readers(1000, 40, 100),
        ),
        Attack(
            "1,000 half-TLS (ClientHello, then silence), 40 addresses",
            "tls",
            spread(1000, 40, hello),
        ),
        Attack("1,000 'GE' on the TLS port, 40 addresses", "tls", spread(1000, 40, b"GE")),
        Attack("inbox growth: one never-reader pushing scrapes, plain", "plain", inbox_growth),
        Attack("inbox growth, TLS", "tls", inbox_growth),
        Attack("inbox growth, basic auth, no credentials", "auth", inbox_growth),
        *(
            Attack(
                f"{n:,} addresses × 1–2 connections (idle keep-alive, silent, slowloris)",
                "plain",
                many_addresses(n, HEALTHZ, b"", SLOW_HEAD),
            )
            for n in (300, 1000, 5000)
        ),
        Attack(
            "5,000 addresses × 1–2 connections (silent, half-TLS, 'GE'), mTLS required, "
            "probes on `--web.probe-listen-address`",
            "mtls",
            many_addresses(5000, b"", hello, b"GE"),
        ),
        Attack(
            f"shared address: {2 * SHARE} slowloris on the scraper's and prober's own",
            "plain",
            shared_address(2 * SHARE),
            shared=True,
        ),
        Attack(
            "TLS bursts: rounds of 250 connections over 25 addresses, defaults",
            "tls",
            tls_bursts(250, 25, rounds=5, quick_rounds=2),
        ),
        Attack(
            "TLS bursts: rounds of 1,000 over 100 addresses, `--web.max-connections=1024`",
            "tls",
            tls_bursts(1000, 100, rounds=3, quick_rounds=1),
            flags=("--web.max-connections=1024",),
        ),
        *(
            Attack(
                f"password flood: {n:,} addresses, a new wrong password each time",
                "auth",
                password_flood(n),
                after_first_200=True,
                settle=FLOOD_SETTLE,
            )
            for n in (200, 5000)
        ),
    ]


# The exporter and its configurations --------------------------------------------------------


@dataclass(frozen=True)
class Kinds:
    flags: dict[str, list[str]]  # kind → --web.config.file
    clients: dict[str, ssl.SSLContext | None]  # kind → the scraper's and prober's context
    server_cert: ssl.SSLContext  # verifies the server, presents nothing


def configs(work: Path) -> Kinds:
    folder = work / "pki"
    folder.mkdir(exist_ok=True)
    for name, san in (("server", "IP:127.0.0.1"), ("client", "DNS:prometheus")):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}",
             "-keyout", f"{name}.key", "-out", f"{name}.crt"],
            cwd=folder, check=True, capture_output=True,
        )  # fmt: skip
    server = (
        f"tls_server_config:\n  cert_file: {folder}/server.crt\n  key_file: {folder}/server.key\n"
    )
    (work / "tls.yml").write_text(server)
    (work / "mtls.yml").write_text(
        f"{server}  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {folder}/client.crt\n"
    )
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=10)).decode()
    (work / "auth.yml").write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    server_cert = ssl.create_default_context(cafile=str(folder / "server.crt"))
    mutual = ssl.create_default_context(cafile=str(folder / "server.crt"))
    mutual.load_cert_chain(folder / "client.crt", folder / "client.key")
    return Kinds(
        flags={
            "plain": [],
            **{kind: [f"--web.config.file={work / kind}.yml"] for kind in ("tls", "mtls", "auth")},
        },
        clients={"plain": None, "tls": server_cert, "mtls": mutual, "auth": None},
        server_cert=server_cert,
    )


@contextlib.contextmanager
def exporter(
    code: Code, node: FakeNode, work: Path, flags: list[str], tls: ssl.SSLContext | None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = procs.free_port()
    command = procs.exporter_command(port, 5, "", *flags)
    log = work / f"abuse-table-{code.name.split()[0]}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **node.env, **code.env})  # fmt: skip
    try:
        deadline = time.monotonic() + procs.START_TIMEOUT_SECONDS
        while fresh_status(port, request("GET", "/readyz"), 2.0, SCRAPER, tls) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise procs.BenchError(f"exporter ({code.name}) not ready: {log.read_text()}")
            time.sleep(0.1)
        yield proc, port
    finally:
        procs.stop(proc)


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


def measure_one(
    attack: Attack, code: Code, node: FakeNode, work: Path, kinds: Kinds, seconds: float
) -> Row:
    client = kinds.clients[attack.kind]
    flags = kinds.flags[attack.kind] + list(attack.flags)
    # A kubelet presents no client certificate: an exporter requiring one is probed on its
    # probe port (plain HTTP, a socket and accept queue of its own), as it is deployed.
    probe_port = procs.free_port() if attack.kind == "mtls" else 0
    if probe_port:
        flags.append(f"--web.probe-listen-address=127.0.0.1:{probe_port}")
    with exporter(code, node, work, flags, client) as (proc, port):
        rss = RssPeak(proc.pid)
        target = Target(port, proc.pid, client, kinds.server_cert, seconds < SECONDS)
        with attack.start(target) as running:
            time.sleep(attack.settle * seconds / SECONDS)
            cpu, drops = procs.cpu_seconds(proc.pid), listen_drops()
            source = SCRAPER
            if probe_port:
                prober = Prober(probe_port, PROBER)
            else:
                prober = Prober(port, source if attack.shared else PROBER, client)
            authorization = basic("prometheus", "secret") if attack.kind == "auth" else ""
            run_for = 60.0 if running.over else seconds  # TLS bursts: until their last round
            scraper = Scraper(port, run_for, source, authorization, client, attack.after_first_200)
            prober.start()
            scraper.start()
            if running.over:
                running.over.wait(60)
                scraper.stop.set()
            scraper.join()
            prober.stop.set()
            prober.join()
            cpu = procs.cpu_seconds(proc.pid) - cpu
            figures = running.figures()
            if drops := listen_drops() - drops:
                figures += f"; {drops:,} SYN{'s' if drops != 1 else ''} dropped, listen queue full"
        if attack.after_first_200:
            first = scraper.seen.first_200_s
            figures = (
                f"scraper's first 200 after {first:.1f} s"
                if first is not None
                else f"no 200 for the scraper within {FIRST_200_WAIT:.0f} s"
            ) + f" ({_statuses(scraper.before_first_200)} before it); {figures}"
        if failed := {s: n for s, n in scraper.seen.statuses.items() if s != 200}:
            figures = f"scraper got {_statuses(Counter(failed))}; {figures}"
        return Row(
            attack.name,
            code.name,
            scraper.seen,
            prober.statuses,
            rss.stop(),
            cpu,
            figures,
            attack.after_first_200,
        )


def measure(code: Code, node: FakeNode, work: Path, seconds: float, only: str = "") -> list[Row]:
    kinds = configs(work)
    rows = []
    for attack in attacks():
        if only and only not in attack.name:
            continue
        say(f"{code.name}: {attack.name}")
        row = measure_one(attack, code, node, work, kinds, seconds)
        say(f"  {row.markdown(False)}")
        rows.append(row)
    return rows


# Last round's code, on request --------------------------------------------------------------


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
        yield Code(f"{ref} ({commit})", str(tmp / "src"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                       cwd=REPO, capture_output=True)  # fmt: skip


def short_commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, check=True, capture_output=True
    )
    return done.stdout.decode().strip()


def run(work: Path, seconds: float, only: str = "", ref: str = "") -> list[Row]:
    descriptors = raise_descriptor_limit()
    say(f"open files: {descriptors:,}")
    node = prepare(work, node_scenario())
    dirty = "+" if _dirty() else ""
    rows = measure(Code(f"this code ({short_commit(REPO)}{dirty})"), node, work, seconds, only)
    if ref:
        with baseline(ref, work) as code:
            rows += measure(code, node, work, seconds, only)
    order = [attack.name for attack in attacks()]
    return sorted(rows, key=lambda row: (order.index(row.attack), not row.code.startswith("this")))


def _dirty() -> bool:
    done = subprocess.run(["git", "status", "--porcelain", "--", "exporter"], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    return bool(done.stdout.strip())


def render(rows: list[Row], seconds: float) -> str:
    codes = sorted({row.code for row in rows})
    with_code = len(codes) > 1
    code_head, code_rule = (" code |", "---|") if with_code else ("", "")
    met = sum(row.met for row in rows)
    return "\n".join(
        [
            f"Code: {', '.join(codes)}. Per attack a fresh exporter; the scraper on a new "
            f"connection every 0.1 s for {seconds:g} s (from its first 200 under a password "
            "flood; through every round of TLS bursts), the prober's `/healthz` every 1 s "
            "(3 s to answer).",
            "",
            f"| attack |{code_head} scraper 200s | p99 | slowest | probes failed | VmRSS peak | "
            "exporter CPU | the attack's own figures | targets |",
            f"|---|{code_rule}---:|---:|---:|---:|---:|---:|---|---|",
            *(row.markdown(with_code) for row in rows),
            "",
            "Targets: the scraper ≥ 99 % 200s, no probe failing, VmRSS ≤ 100 MiB; under a "
            f"password flood, its first 200 within {SCRAPE_TIMEOUT:g} s (one `scrape_timeout`: "
            f"Prometheus' first scrape of a new exporter succeeds) and ≥ 99 % from it on. Met "
            f"under {met} of {len(rows)} attacks. SYNs dropped: the whole machine's "
            "`TcpExt ListenDrops` over the scraper's run.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s per attack, not 6")
    parser.add_argument("--baseline", default="", help="a git ref to run every attack on too")
    parser.add_argument("--only", default="", help="only the attacks whose name has this")
    args = parser.parse_args(argv)
    seconds = SECONDS / 2 if args.quick else SECONDS
    with tempfile.TemporaryDirectory(prefix="kge-abuse-table-") as tmp:
        rows = run(Path(tmp), seconds, args.only, args.baseline)
    print("\n" + render(rows, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
