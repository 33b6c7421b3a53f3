"""The bench's figures as markdown, printed and written into bench/README.md.

Each figure is shown beside its target with "met" or "missed"; a missed target is a finding
to report, not a failure, so nothing here decides the exit status.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from cycles import CpuPerCycle, RssTrack
from reference_report import LABEL, ratios, target_line
from wrk import Load, WrkResult

if TYPE_CHECKING:
    # Types only: importing attribution loads gRPC, which must stay out of the bench
    # process until the serving figures (attribution off) are taken.
    from attribution import CallCpu, ChurnTrack

START_MARKER = "<!-- results:start -->"
END_MARKER = "<!-- results:end -->"
P99_TARGET_MS = 5.0
CORE_SHARE_TARGET = 0.02
RSS_TARGET_BYTES = 50 << 20
MIB = 1 << 20


@dataclass(frozen=True)
class PlainAndGzip:
    plain: WrkResult
    gzip: WrkResult


@dataclass(frozen=True)
class Stall:
    """What the exporter's own metrics said while every NVML call took `delay_ms`."""

    delay_ms: int
    cycles_during: int  # collections_total after the scrape runs minus before them
    last_success_age_s: float  # at the end of the scrape runs


@dataclass(frozen=True)
class IdleExporter:
    """CPU of the exporter subprocess over a window without scrapes.

    `poller_cpu_s` is the Xid watcher thread's share: it waits in nvmlEventSetWait 500 ms at a
    time (the fake wakes once per wait, as a driver does), work a per-cycle figure leaves out.
    """

    seconds: float
    cpu_s: float
    poller_cpu_s: float
    cycles: int

    def core_share(self, cpu_s: float) -> float:
        return cpu_s / self.seconds

    def per_cycle_ms(self, cpu_s: float) -> float:
        return cpu_s / self.cycles * 1000 if self.cycles else float("nan")

    @property
    def own_cpu_s(self) -> float:
        return self.cpu_s - self.poller_cpu_s


@dataclass(frozen=True)
class AttributionRun:
    """Pod attribution: the exporter with a kubelet, and attribution in-process."""

    devices: int
    pods: int
    series: int  # samples per scrape with attribution on
    allocations: int  # nvidia_gpu_allocation_info series once attributed
    kubelet_interval_s: int
    scrapes: PlainAndGzip
    rss_ready: int  # the exporter subprocess (gRPC loaded) once its allocations were served
    rss_end: int  # ... and after its scrape runs
    cpu: tuple[CallCpu, ...]
    churn: ChurnTrack
    churn_mig_gpus: int  # MIG GPUs kept in the churn run (with the shared GPU)


@dataclass(frozen=True)
class Results:
    devices: int
    series: int
    load: Load
    interval_s: int
    ours: PlainAndGzip
    ours_stalled: PlainAndGzip
    stall: Stall
    theirs: PlainAndGzip
    reference: PlainAndGzip  # Go's net/http serving the bytes `ours` served, right after
    idle: IdleExporter
    exporter_rss_ready: int  # VmRSS of the exporter subprocess once ready
    exporter_rss_end: int  # ... and after all its scrape runs
    cpu: CpuPerCycle
    rss: RssTrack
    attribution: AttributionRun


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 100 else f"{value:.0f} ms"


def _mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"


def _kib(value: int) -> str:
    return f"{value / 1024:.1f} KiB"


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.processor() or "unknown"


def _wrk_version() -> str:
    result = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    first = (result.stdout or result.stderr).splitlines()
    return first[0].split(" [")[0] if first else "unknown"


def load_average() -> str:
    """The 1/5/15-minute load: on a small shared machine it says how noisy a run was."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine(load_at_start: str) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{when} · CPU {_cpu_model()} × {os.cpu_count()} cores · Linux {platform.release()} · "
        f"Python {platform.python_version()} · prometheus-client {version('prometheus-client')}"
        f" · {_wrk_version()} · load average at start "
        f"{load_at_start}, at end {load_average()}"
    )


def _scrape_row(server: str, encoding: str, result: WrkResult, target: bool) -> str:
    errors = result.non_2xx + result.socket_errors
    verdict = _verdict(result.p99_ms < P99_TARGET_MS) if target else "—"
    return (
        f"| {server} | {encoding} | {_ms(result.p50_ms)} | {_ms(result.p99_ms)} | "
        f"{result.requests_per_second:,.0f} | {_kib(result.body_bytes)} | {errors} | {verdict} |"
    )


def scrape_table(r: Results) -> list[str]:
    return _scrape_rows(
        [
            ("kube-gpu-exporter", r.ours, True),
            (
                f"kube-gpu-exporter, every NVML call {r.stall.delay_ms / 1000:g} s",
                r.ours_stalled,
                True,
            ),
            ("prometheus-client `start_http_server`", r.theirs, False),
            (LABEL, r.reference, True),
        ]
    )


def _scrape_rows(rows: list[tuple[str, PlainAndGzip, bool]]) -> list[str]:
    lines = [
        "| server | encoding | p50 | p99 | req/s | body | errors | p99 < 5 ms |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for server, pair, target in rows:
        lines.append(_scrape_row(server, "plain", pair.plain, target))
        lines.append(_scrape_row(server, "gzip", pair.gzip, target))
    return lines


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.3g}" if theirs else "—"


def ratio_table(r: Results) -> list[str]:
    lines = [
        "| encoding | p50 ours/theirs | p99 ours/theirs | req/s ours/theirs |",
        "|---|---:|---:|---:|",
    ]
    for encoding, ours, theirs in (
        ("plain", r.ours.plain, r.theirs.plain),
        ("gzip", r.ours.gzip, r.theirs.gzip),
    ):
        lines.append(
            f"| {encoding} | {_ratio(ours.p50_ms, theirs.p50_ms)} | "
            f"{_ratio(ours.p99_ms, theirs.p99_ms)} | "
            f"{_ratio(ours.requests_per_second, theirs.requests_per_second)} |"
        )
    return lines


def reference_table(r: Results) -> list[str]:
    """Ours ÷ Go's net/http serving the same bytes: what our server adds to the machine's
    own cost; and the target judged against both."""
    pairs = [("plain", r.ours.plain, r.reference.plain), ("gzip", r.ours.gzip, r.reference.gzip)]
    lines = ["| encoding | p50 ours/reference | p99 ours/reference | req/s ours/reference |"]
    lines.append("|---|---:|---:|---:|")
    lines += [f"| {name} | {' | '.join(ratios(ours, ref))} |" for name, ours, ref in pairs]
    return [*lines, "", target_line(P99_TARGET_MS, pairs)]


def _share_row(what: str, share: float) -> str:
    return f"| {what} | {share:.2%} | < 2 %: {_verdict(share < CORE_SHARE_TARGET)} |"


def cpu_table(r: Results) -> list[str]:
    cpu = r.cpu
    idle = r.idle
    window = f"exporter process, idle {idle.seconds:.0f} s"
    return [
        "| figure | value | target |",
        "|---|---:|---|",
        f"| in-process cycle CPU, mean of {cpu.cycles} | {cpu.mean_s * 1000:.2f} ms | |",
        f"| in-process cycle CPU, p99 / max | {cpu.p99_s * 1000:.2f} ms / "
        f"{cpu.max_s * 1000:.2f} ms | |",
        _share_row(
            f"in-process: share of one core at a {r.interval_s} s interval",
            cpu.share_of_core(r.interval_s),
        ),
        f"| {window}: CPU, all threads / cycles done | {idle.cpu_s:.2f} s / {idle.cycles} | |",
        f"| {window}: CPU per cycle, all threads | {idle.per_cycle_ms(idle.cpu_s):.1f} ms | |",
        f"| {window}: of which the Xid watcher thread | {idle.poller_cpu_s:.2f} s | |",
        f"| {window}: CPU per cycle without that thread | "
        f"{idle.per_cycle_ms(idle.own_cpu_s):.1f} ms | |",
        _share_row(f"{window}: share of one core, all threads", idle.core_share(idle.cpu_s)),
        _share_row(
            f"{window}: share of one core without the fake's polling",
            idle.core_share(idle.own_cpu_s),
        ),
    ]


def memory_table(r: Results) -> list[str]:
    rss = r.rss
    cycles = rss.points[-1][0]
    small = rss.peak < RSS_TARGET_BYTES
    checkpoints = " → ".join(f"{v / MIB:.1f}" for _, v in rss.points)
    return [
        "| figure | value | target |",
        "|---|---:|---|",
        f"| VmRSS after warm-up (cycle 0) | {_mib(rss.start)} | |",
        f"| VmRSS after {cycles:,} cycles | {_mib(rss.end)} | |",
        f"| VmRSS max over the run | {_mib(rss.peak)} | < 50 MiB: {_verdict(small)} |",
        f"| growth, cycle 0 → {cycles:,} | {rss.growth / MIB:+.2f} MiB | |",
        f"| growth over the second half | {rss.second_half_growth / MIB:+.2f} MiB | "
        f"flat (≤ 1 MiB): {_verdict(rss.flat)} |",
        f"| exporter subprocess VmRSS: once ready → after its scrape runs | "
        f"{_mib(r.exporter_rss_ready)} → {_mib(r.exporter_rss_end)} | |",
        "",
        f"VmRSS (MiB) at every {max(1, cycles // 10):,} cycles: {checkpoints}",
    ]


def attribution_cpu_table(r: Results) -> list[str]:
    lines = [
        f"| directory | mean | p99 | max | share of one core at a {r.interval_s} s interval |",
        "|---|---:|---:|---:|---:|",
    ]
    for cpu in r.attribution.cpu:
        lines.append(
            f"| {cpu.directory} | {cpu.mean_s * 1000:.3f} ms | {cpu.p99_s * 1000:.3f} ms | "
            f"{cpu.max_s * 1000:.3f} ms | {cpu.mean_s / r.interval_s:.3%} |"
        )
    return lines


def attribution_memory_table(r: Results) -> list[str]:
    a = r.attribution
    churn = a.churn
    cycles = churn.points[-1][0]
    mb = 1_000_000
    return [
        "| figure | value | target |",
        "|---|---:|---|",
        f"| exporter subprocess VmRSS, attribution on: allocations served → after its scrape "
        f"runs | {_mib(a.rss_ready)} → {_mib(a.rss_end)} | |",
        f"| exporter subprocess VmRSS, attribution off (above): once ready → after its scrape "
        f"runs | {_mib(r.exporter_rss_ready)} → {_mib(r.exporter_rss_end)} | |",
        f"| churn: VmRSS after warm-up (cycle 0) | {_mib(churn.start)} | |",
        f"| churn: VmRSS after {cycles:,} create/delete cycles | {_mib(churn.end)} | |",
        f"| churn: growth, cycle 0 → {cycles:,} | {churn.growth / mb:+.3f} MB | "
        f"< 1 MB: {_verdict(churn.met)} |",
        f"| churn: growth over the second half | {churn.second_half_growth / mb:+.3f} MB | |",
    ]


def attribution_section(r: Results) -> list[str]:
    a = r.attribution
    churn = a.churn
    cycles = churn.points[-1][0]
    checkpoints = " → ".join(f"{v / MIB:.2f}" for _, v in churn.points)
    partitioned = (
        "one partitioned GPU and its"
        if a.churn_mig_gpus == 1
        else f"{a.churn_mig_gpus} partitioned GPUs and their"
    )
    return [
        "### Pod attribution",
        "",
        f"Node: {a.devices} devices (the 64 above, plus one whole GPU shared by 10 "
        f"time-slicing replicas), {a.pods} pods (one per MIG instance, "
        "`nvidia.com/mig-1g.10gb`; ten on the shared GPU, `nvidia.com/gpu` `<uuid>::0..9`).",
        "",
        f"CPU of one `attribute()` call, in-process, over {a.cpu[0].calls:,} calls:",
        "",
        *attribution_cpu_table(r),
        "",
        f"Scrapes with attribution on (`--kubelet.interval={a.kubelet_interval_s}s`, the pods "
        f"served over gRPC by a fake kubelet): {a.series} samples per scrape, "
        f"{a.allocations} `nvidia_gpu_allocation_info` series.",
        "",
        *_scrape_rows([("kube-gpu-exporter, attribution on", a.scrapes, True)]),
        "",
        *attribution_memory_table(r),
        "",
        f"Churn: {cycles:,} create/delete cycles (two collection cycles each) in "
        f"{churn.seconds:.0f} s over {churn.devices} devices ({partitioned} MIG "
        f"instances, and the shared GPU) and {churn.pods_base} pods + the one that comes "
        f"and goes. VmRSS (MiB) at every {max(1, cycles // 10):,} cycles: {checkpoints}",
    ]


def render(r: Results, when: str) -> str:
    stall = r.stall
    load = r.load
    lines = [
        f"Run: {when}",
        "",
        f"Node: {r.devices} devices (8 GPUs × 7 MIG 1g.10gb), {r.series} samples per scrape; "
        f"`wrk -t{load.threads} -c{load.connections} -d{load.seconds}s --latency`; "
        f"collector interval {r.interval_s} s.",
        "",
        "### Scrape latency",
        "",
        *scrape_table(r),
        "",
        f"While every NVML call took {stall.delay_ms / 1000:g} s: "
        f"`kube_gpu_exporter_collections_total` advanced by {stall.cycles_during} during the "
        f"scrape runs, and the last successful collection was {stall.last_success_age_s:.0f} s "
        "old at their end (collection stalled; scrapes kept serving the last snapshot).",
        "",
        "Ours relative to prometheus-client's server (below 1 is better for latency, above 1 "
        "for req/s):",
        "",
        *ratio_table(r),
        "",
        "Ours relative to the reference: Go's net/http (as node_exporter serves) sending the "
        "bytes ours served just before, to the same wrk load in the same run:",
        "",
        *reference_table(r),
        "",
        "### CPU",
        "",
        *cpu_table(r),
        "",
        "### Memory (in-process cycles)",
        "",
        *memory_table(r),
        "",
        *attribution_section(r),
    ]
    return "\n".join(lines) + "\n"


def update_readme(
    path: Path, section: str, start: str = START_MARKER, end: str = END_MARKER
) -> None:
    """Replace what lies between the markers, keeping the hand-written text around them."""
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{section}{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    path.write_text(text)
