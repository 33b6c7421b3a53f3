"""bench/peers.py's figures as markdown: each exporter's, the ratios ours ÷ peer, the targets.

The targets are ratios to a peer's figure of the same run (the machine is small and shared,
so absolute figures move between runs; peers measured beside ours move with them). A missed
target is a finding, never a failure.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from peer_install import NVITOP_VERSION
from report import _cpu_model, load_average

MIB = 1 << 20
RSS_OVER_NVITOP = 1.10  # ours ≤ nvitop's + 10 %, attribution off
DEPLOYED_RSS_OVER_NVITOP = 1.25  # ours as deployed ≤ nvitop's + 25 % (a kubelet, the API)
FLAT_BYTES = 1 << 20  # growth over the second half of the window
CPU_OVER_CLIENT = 0.5  # ours at 1 scrape/s ≤ 0.5 × prometheus-client's
PLAIN_SCRAPE_MS = 0.1
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    interval_s: int
    cold_starts: int
    steady_s: float  # the window at 1 scrape/s
    rss_every_s: float
    idle_s: float
    scrape_s: float  # each sequential scrape run
    node: str = "a100-mig"  # bench/node.py NODES


@dataclass(frozen=True)
class ScrapeCpu:
    n: int
    cpu_s: float
    seconds: float


@dataclass(frozen=True)
class Figures:
    """One exporter's figures in the run."""

    cold_starts_s: list[float]
    rss_first_data: int
    body_plain: int
    body_gzip: int
    series: int  # samples in the plain body
    steady_share: float  # of a core, at 1 scrape/s
    poller_share: float  # the Xid watcher thread within it (ours only)
    rss: list[tuple[float, int]]  # (seconds into the 1 scrape/s window, VmRSS)
    idle_rate: float  # CPU s per s without scrapes
    plain: ScrapeCpu
    gzip: ScrapeCpu

    def per_request_ms(self, run: ScrapeCpu) -> float:
        return (run.cpu_s - self.idle_rate * run.seconds) / run.n * 1000

    @property
    def cold_start_s(self) -> float:
        return statistics.median(self.cold_starts_s)

    @property
    def rss_end(self) -> int:
        return self.rss[-1][1]

    @property
    def second_half_growth(self) -> int:
        half = self.rss[-1][0] / 2
        at_half = next(value for at, value in self.rss if at >= half)
        return self.rss_end - at_half


@dataclass(frozen=True)
class Run:
    settings: Settings
    names: dict[str, str]  # key → name, ours first
    figures: dict[str, Figures]
    devices: int
    node: str  # how the tables describe the node
    deployed_args: tuple[str, ...]  # the DaemonSet's, as read from the manifest
    pods: tuple[int, int]  # on the node as deployed: all, holding GPUs
    in_cluster: bool  # as deployed, through the mounted service account (else a kubeconfig)
    floor_share: float | None = None  # of a core: an asyncio loop waking once a second, idle


def _git_describe() -> str:
    """The commit measured; "-dirty" when files other than this README differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/README.md")
    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("-dirty" if changed else "")


def run_line(load_at_start: str) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Run: {when} · CPU {_cpu_model()} × {os.cpu_count()} cores · Linux "
        f"{platform.release()} · Python {platform.python_version()} · ours at {_git_describe()}"
        f" · nvitop-exporter {NVITOP_VERSION} · prometheus-client {version('prometheus-client')}"
        f" · nvidia-ml-py {version('nvidia-ml-py')} · load average at start {load_at_start}, "
        f"at end {load_average()}"
    )


def _verdict(ok: bool, target: str) -> str:
    return f"{target}: {'met' if ok else '**missed**'}"


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs > 0 else "—"


def _duration(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def _kib(value: float) -> str:
    return f"{value / 1024:.1f} KiB"


def _mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


def _row(
    label: str,
    fmt: str,
    values: list[float],
    texts: list[str] | None = None,
    target: str = "",
    ratios: bool = True,
) -> str:
    """A figure of each exporter, then ours (off, deployed) ÷ nvitop and ÷ prometheus-client."""
    shown = texts or [format(v, fmt) for v in values]
    ours, deployed, nvitop, client = values
    shown_ratios = (
        [_ratio(o, p) for o in (ours, deployed) for p in (nvitop, client)] if ratios else ["—"] * 4
    )
    return f"| {label} | {' | '.join(shown)} | {' | '.join(shown_ratios)} | {target} |"


def _both(off: bool, deployed: bool, target: str, deployed_target: str = "") -> str:
    """The verdicts of ours with attribution off and as deployed, each against its target."""
    return f"off {_verdict(off, target)}; deployed {_verdict(deployed, deployed_target or target)}"


def _without_poller(f: Figures) -> float:
    return f.steady_share - f.poller_share


def table(r: Run) -> list[str]:
    ours, deployed, nvitop, client = (r.figures[key] for key in r.names)
    each = list(r.figures.values())
    window = _duration(r.settings.steady_s)
    return [
        f"| figure | {' | '.join(r.names.values())} | off ÷ nvitop | off ÷ prometheus-client "
        "| deployed ÷ nvitop | deployed ÷ prometheus-client | target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        _row("samples per scrape", "d", [f.series for f in each]),
        _row("body, plain", "", [f.body_plain for f in each], [_kib(f.body_plain) for f in each]),
        _row("body, gzip", "", [f.body_gzip for f in each], [_kib(f.body_gzip) for f in each]),
        _row(
            "scrape CPU per request, plain",
            ".3f",
            [f.per_request_ms(f.plain) for f in each],
            [f"{f.per_request_ms(f.plain):.3f} ms" for f in each],
            _both(
                ours.per_request_ms(ours.plain) <= PLAIN_SCRAPE_MS,
                deployed.per_request_ms(deployed.plain) <= PLAIN_SCRAPE_MS,
                "≤ 0.1 ms",
            ),
        ),
        _row(
            "scrape CPU per request, gzip",
            ".3f",
            [f.per_request_ms(f.gzip) for f in each],
            [f"{f.per_request_ms(f.gzip):.3f} ms" for f in each],
        ),
        _row(
            "CPU at 1 scrape/s, share of a core",
            "",
            [f.steady_share for f in each],
            [f"{f.steady_share:.2%}" for f in each],
        ),
        _row(
            "… without the Xid watcher (the peers watch no events)",
            "",
            [_without_poller(f) for f in each],
            [f"{_without_poller(ours):.2%}", f"{_without_poller(deployed):.2%}", "—", "—"],
            _both(
                _without_poller(ours) <= CPU_OVER_CLIENT * client.steady_share,
                _without_poller(deployed) <= CPU_OVER_CLIENT * client.steady_share,
                "≤ 0.5 × prometheus-client's",
            ),
        ),
        _row(
            "VmRSS at first data",
            "",
            [f.rss_first_data for f in each],
            [_mib(f.rss_first_data) for f in each],
        ),
        _row(
            f"VmRSS after {window} at 1 scrape/s",
            "",
            [f.rss_end for f in each],
            [_mib(f.rss_end) for f in each],
            _both(
                ours.rss_end <= RSS_OVER_NVITOP * nvitop.rss_end,
                deployed.rss_end <= DEPLOYED_RSS_OVER_NVITOP * nvitop.rss_end,
                "≤ nvitop's + 10 %",
                "≤ nvitop's + 25 %",
            ),
        ),
        _row(
            "VmRSS growth over the window's second half",
            "",
            [f.second_half_growth for f in each],
            [f"{f.second_half_growth / MIB:+.2f} MiB" for f in each],
            _both(
                ours.second_half_growth <= FLAT_BYTES,
                deployed.second_half_growth <= FLAT_BYTES,
                "flat (≤ 1 MiB)",
            ),
            ratios=False,
        ),
        _row(
            f"cold start to first data, median of {r.settings.cold_starts}",
            "",
            [f.cold_start_s for f in each],
            [
                f"{f.cold_start_s:.3f} s ({min(f.cold_starts_s):.3f}–{max(f.cold_starts_s):.3f})"
                for f in each
            ],
            _verdict(ours.cold_start_s <= nvitop.cold_start_s, "off ≤ nvitop's"),
        ),
    ]


def floor(r: Run) -> list[str]:
    """What the machine charges a Python process that does nothing but wake once a second,
    as every exporter here does at least for its scrape: on a virtual machine that charges
    each wakeup dearly (bench/README.md, "Lean as deployed"), this floor, not the work, can
    decide the CPU ratio."""
    if r.floor_share is None:
        return []
    client = r.figures["client"].steady_share
    deployed = _without_poller(r.figures["deployed"])
    share = r.floor_share / client if client > 0 else float("nan")
    reach = (
        "out of reach on this machine for any Python process that wakes as often"
        if r.floor_share > CPU_OVER_CLIENT * client
        else "within reach"
    )
    return [
        "",
        f"The machine's floor over the same window: a Python asyncio loop that only sleeps "
        f"and wakes once a second (`bench/peers.py`'s FLOOR, no scrapes, no work) took "
        f"{r.floor_share:.2%} of a core, {share:.2f}× prometheus-client's {client:.2%}: the "
        f"≤ 0.5× target is {reach}. Ours as deployed, without the Xid watcher, "
        f"{deployed:.2%}: {deployed - r.floor_share:+.2%} of a core above the floor.",
    ]


def details(r: Run) -> list[str]:
    s = r.settings
    parts = [
        f"{name}: idle {f.idle_rate:.2%} of a core, {f.plain.n:,} plain and {f.gzip.n:,} gzip "
        "scrapes"
        for name, f in zip(r.names.values(), r.figures.values(), strict=True)
    ]
    ours, deployed = r.figures["ours"], r.figures["deployed"]

    def track(f: Figures) -> str:
        return " → ".join(f"{v / MIB:.1f}" for _, v in f.rss[:: max(1, len(f.rss) // 8)])

    return [
        f"Scrape CPU per request: each exporter alone after {s.idle_s:g} s without scrapes (its "
        f"idle rate), then sequential scrapes for {s.scrape_s:g} s plain and {s.scrape_s:g} s "
        "gzip on one keep-alive connection; (process CPU − idle rate × time) ÷ scrapes. "
        + "; ".join(parts)
        + ".",
        "",
        f"At 1 scrape/s: all {len(r.figures)} at once for {s.steady_s:g} s, gzip; VmRSS every "
        f"{s.rss_every_s:g} s (ours, attribution off: {track(ours)} → {ours.rss_end / MIB:.1f} "
        f"MiB; as deployed: {track(deployed)} → {deployed.rss_end / MIB:.1f} MiB). Ours' Xid "
        "watcher thread waits in nvmlEventSetWait 500 ms at a time, woken once per wait by the "
        "fake as by a driver; shown apart, it costs "
        f"{ours.poller_share:.2%} of a core here ({deployed.poller_share:.2%} as deployed). "
        "nvitop and prometheus-client watch no events, so the target is judged without it; "
        "the row above it counts it.",
    ]


def render(r: Run, run: str) -> str:
    return (
        "\n".join(
            [
                run,
                "",
                f"Node: {r.node} on the fake NVML; collection interval {r.settings.interval_s} s "
                "for nvitop and ours with attribution off (`--kubelet.pod-resources-socket=`); "
                "prometheus-client serves one fixed snapshot and renders it per request. Every "
                f"exporter's body named all {r.devices} device UUIDs before any figure was taken.",
                "",
                "As deployed: the DaemonSet's args read from deploy/daemonset.yaml, `"
                + " ".join(r.deployed_args)
                + "` (the manifest's intervals: flags left out are serve's defaults), with "
                "the listen address on 127.0.0.1 and the socket a real gRPC pod-resources "
                "server; "
                + (
                    "the API server found by in-cluster config (KUBERNETES_SERVICE_HOST/PORT, "
                    "the service account's token and CA mounted where the kubelet mounts them), "
                    "the test API server behind TLS"
                    if r.in_cluster
                    else "the service account replaced by `--kubernetes.kubeconfig` for the test "
                    "API server (no mount namespace could be made: the kubeconfig parser and "
                    "YAML are loaded, TLS is not)"
                )
                + f"; {r.pods[0]} pods on the node, {r.pods[1]} of them holding every GPU "
                "device, listed by both; its figures are taken once every held device is "
                "attributed and the pod watch is up.",
                "",
                *table(r),
                *floor(r),
                "",
                *details(r),
            ]
        )
        + "\n"
    )
