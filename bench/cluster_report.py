"""The cluster view bench's figures, and the markdown its section of bench/README.md shows.

Each figure stands beside its target where it has one ("met" or "missed"); a missed target
is a finding, not a failure, so nothing here decides the exit status.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from abuse import Scrapes
from cluster_churn import ChurnResult
from cluster_fleet import PENDING
from errors import BenchError
from reference_report import LABEL, ratios, target_line
from scrape_client import ScrapeLog
from wrk import Load, WrkResult

MIB = 1 << 20
RSS_TARGET = 300 * MIB
P99_TARGET_MS = 10.0
# A view cycle's span: its build (the gauge) and the render of its bodies after it, allowed
# this long; a scrape within a span overlapped the cycle, the others were clear of them all.
RENDER_S = 0.5
WATCHED = 'kube_gpu_cluster_watched_objects{{resource="{resource}"}}'
_REASON = re.compile(r'reason="([^"]*)"')
# What each pending group of cluster_fleet.PENDING is designed to be classified as.
DESIGNED = {
    "fragmented": "fragmented",
    "insufficient": "insufficient_gpus",
    "wrong-type": "gpu_type_unavailable",
    "tainted": "taint_not_tolerated",
}


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    rss: int
    build_s: float  # the last build's duration, as the scrape said
    pods: int  # watched pods, as the scrape said


@dataclass(frozen=True)
class Listing:
    """The process's pod list as the test server saw it (its request log)."""

    pages: int
    began_s: float  # first page request, after the process's start
    took_s: float  # first page request → last page request


@dataclass(frozen=True)
class Window:
    """The churn, and what the process did under it."""

    churn: ChurnResult
    samples: list[Sample]  # once a second over the whole window
    quiet_cpu_per_s: float  # churn and a scrape a second
    quiet_s: float
    scraper: ScrapeLog  # a Prometheus-like scraper in its own process, churn going on
    plain: WrkResult
    gzip: WrkResult
    wrk_cpu_per_s: float  # churn and wrk
    reference_plain: WrkResult  # Go's net/http serving the bytes ours served, right after
    reference_gzip: WrkResult


@dataclass(frozen=True)
class View:
    """A view built after the churn: when, and what it held."""

    seconds: float  # after the churn stopped
    pods: int
    allocated: int  # nvidia.com/gpu allocated over every node


@dataclass(frozen=True)
class After:
    """The first view built wholly after the churn, and, when it did not hold what the server
    holds, the first later one that did (None: none of `views` did, an event was lost)."""

    first: View
    agreed: View | None
    views: int  # views read


@dataclass(frozen=True)
class Process:
    ready_s: float
    cpu_ready_s: float
    rss_ready: int
    hwm_ready: int
    watched: dict[str, int]
    pending: dict[str, int]  # reason → pods, at the first metrics
    first_build_s: float
    bodies: dict[str, int]  # encoding → bytes on the wire
    listing: Listing
    idle: ScrapeLog  # the same scraper, the cluster idle, right after the first metrics
    idle_cpu_per_s: float  # the process's, meanwhile
    window: Window
    after: After
    expected_pods: int  # what the server holds once the churn stopped
    allocated_first: int  # nvidia.com/gpu allocated at the first metrics
    expected_allocated: int  # ... plus the GPUs the churn left bound
    rss_end: int
    hwm_end: int


@dataclass(frozen=True)
class Figures:
    nodes: int
    pods: int
    gpu_pods: int
    pending_gpu_pods: int
    quotas: int
    raw_json: int  # the pods' JSON as the test server serves it
    built_s: float
    loaded_s: float
    page_s: float  # the test server's own time for one page of the pod list
    empty_rss: int
    direct: bool  # the pod list from the test server itself, not the front
    interval_s: float
    rate: float
    load: Load
    process: Process


def value(text: str, series: str) -> float:
    """The value of one series (`name` or `name{labels}` as the exporter writes it)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise BenchError(f"{series} not found in the cluster view's /metrics")


def allocated(text: str) -> int:
    """Whole GPUs (`nvidia.com/gpu`) the view counts as allocated, summed over the nodes."""
    return sum(
        int(float(line.split()[-1]))
        for line in text.splitlines()
        if line.startswith("kube_gpu_node_allocated_devices{")
        and 'resource="nvidia.com/gpu"' in line
    )


def pending_by_reason(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = _REASON.search(line) if line.startswith("kube_gpu_pending_pods{") else None
        if match:
            counts[match[1]] = counts.get(match[1], 0) + int(float(line.split()[-1]))
    return counts


def builds_under_churn(p: Process) -> list[float]:
    """Each build's duration once (the gauge changes with every build), the first left out."""
    return builds_seen(p.first_build_s, p.window.samples)


def builds_seen(first_build_s: float, samples: list[Sample]) -> list[float]:
    """Each build's duration once, as the samples saw the gauge change after the first."""
    seen, last = [], first_build_s
    for sample in samples:
        if sample.build_s != last:
            seen.append(sample.build_s)
            last = sample.build_s
    return seen


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _start_rows(f: Figures) -> list[str]:
    p, listing = f.process, f.process.listing
    expected = {"nodes": f.nodes, "pods": f.pods, "resourcequotas": f.quotas}
    complete = all(p.watched.get(k) == v for k, v in expected.items())
    served = "the test API server" if f.direct else "`list_front.py`"
    builds = builds_under_churn(p)
    under = f"{ms(statistics.fmean(builds))} / {ms(max(builds))}" if builds else "none seen"
    return [
        f"| start → first complete metrics (`/readyz` 200) | {p.ready_s:.1f} s | |",
        f"| … the pod list in it ({listing.pages} pages of 500 from {served}): first and last "
        f"page asked at | +{listing.began_s:.1f} s, +{listing.began_s + listing.took_s:.1f} s | |",
        f"| … the process's CPU by then | {p.cpu_ready_s:.1f} s | |",
        "| the test API server's own time per page (three pages alone), × the pages | "
        f"{ms(f.page_s)}, ~{f.page_s * listing.pages:.0f} s | |",
        f"| watched objects at the first metrics: nodes / pods / quotas | "
        f"{p.watched['nodes']:,} / {p.watched['pods']:,} / {p.watched['resourcequotas']} | "
        f"all ({f.nodes:,} / {f.pods:,} / {f.quotas}): {verdict(complete)} |",
        f"| first build of the view; per 1,000 pods | {ms(p.first_build_s)}; "
        f"{p.first_build_s * 1e6 / f.pods:.1f} ms | |",
        f"| builds under churn ({len(builds)}): mean / max | {under} | |",
    ]


def _memory_rows(f: Figures) -> list[str]:
    p = f.process
    held = (p.rss_ready - f.empty_rss) / (p.watched["pods"] + p.watched["nodes"])
    rss = [s.rss for s in p.window.samples] or [p.rss_end]
    return [
        f"| VmRSS at the first metrics (VmHWM so far) | {mib(p.rss_ready)} "
        f"({mib(p.hwm_ready)}) | < 300 MiB: {verdict(p.hwm_ready < RSS_TARGET)} |",
        f"| VmRSS under churn, once a second: median / max | {mib(statistics.median(rss))}"
        f" / {mib(max(rss))} | < 300 MiB: {verdict(max(rss) < RSS_TARGET)} |",
        f"| VmRSS at the end; VmHWM over the whole run | {mib(p.rss_end)}; "
        f"{mib(p.hwm_end)} | < 300 MiB: {verdict(p.hwm_end < RSS_TARGET)} |",
        f"| the same process on an empty cluster, ready | {mib(f.empty_rss)} | |",
        f"| held per object (pods and nodes) above the empty one | {held:,.0f} bytes | |",
        f"| VmRSS at the first metrics ÷ the pods' JSON | {p.rss_ready / f.raw_json:.2f} | |",
    ]


def _cpu_rows(p: Process) -> list[str]:
    w = p.window
    return [
        f"| CPU idle, the scraper's 50 ms scrapes ({p.idle.seconds:g} s and its tail) | "
        f"{p.idle_cpu_per_s:.3f} s/s | |",
        f"| CPU under churn, a scrape a second ({w.quiet_s:.0f} s) | "
        f"{w.quiet_cpu_per_s:.3f} s/s | |",
        f"| CPU under churn and wrk | {w.wrk_cpu_per_s:.2f} s/s | |",
    ]


def _wrk_row(what: str, encoding: str, r: WrkResult, body: int) -> str:
    errors = r.non_2xx + r.socket_errors
    return (
        f"| {what} | {encoding} | {r.p50_ms:.2f} ms | {r.p99_ms:.2f} ms | "
        f"{r.requests_per_second:,.0f} | {body / 1024:.1f} KiB | {errors} | "
        f"{verdict(r.p99_ms < P99_TARGET_MS)} |"
    )


def _wrk_ratio_row(encoding: str, ours: WrkResult, reference: WrkResult) -> str:
    p50, p99, rate = ratios(ours, reference)
    return f"| ours ÷ the reference | {encoding} | {p50} | {p99} | {rate} | | | |"


def _scraper_row(what: str, scrapes: Scrapes) -> str:
    total = sum(scrapes.statuses.values())
    if not total:
        return f"| {what} | 0 | | | | | |"
    p99 = scrapes.percentile(0.99)
    return (
        f"| {what} | {total} | {scrapes.percentile(0.5):.2f} ms | {p99:.2f} ms | "
        f"{max(scrapes.latencies_ms):.0f} ms | {total - scrapes.statuses[200]} | "
        f"{verdict(p99 < P99_TARGET_MS)} |"
    )


def _scraper_rows(when: str, log: ScrapeLog) -> list[str]:
    during, clear = log.split(RENDER_S)
    builds = ", ".join(ms(cycle.build_s) for cycle in log.cycles)
    return [
        _scraper_row(f"{when}, {log.seconds:g} s: every scrape", log.all()),
        _scraper_row("… clear of the view's cycles", clear),
        _scraper_row(f"… overlapping a cycle (builds seen: {builds or 'none'})", during),
    ]


def _ratio_row(what: str, churn: Scrapes, idle: Scrapes) -> str:
    p50, p99 = (churn.percentile(p) / idle.percentile(p) for p in (0.5, 0.99))
    return f"| under churn ÷ idle, {what} | | {p50:.1f}× | {p99:.1f}× | | | |"


def scraper_table(idle: ScrapeLog, churn: ScrapeLog) -> list[str]:
    """The scraper idle and under churn: every scrape, clear of cycles, overlapping one."""
    return [
        "| the cluster | scrapes | p50 | p99 | max | errors | p99 < 10 ms |",
        "|---|---:|---:|---:|---:|---:|---|",
        *_scraper_rows("idle", idle),
        *_scraper_rows("under churn", churn),
        _ratio_row("every scrape", churn.all(), idle.all()),
        _ratio_row("clear of cycles", churn.split(RENDER_S)[1], idle.split(RENDER_S)[1]),
    ]


def _wrk_table(f: Figures) -> list[str]:
    """Bodies as each wrk run left them (the churn grows them), so ours and the reference's
    compare: the reference serves what ours served right after its own runs."""
    w = f.process.window
    ours = "kube-gpu-exporter `cluster`"
    return [
        "| server | encoding | p50 | p99 | req/s | body | errors | p99 < 10 ms |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        _wrk_row(ours, "plain", w.plain, w.plain.body_bytes),
        _wrk_row(LABEL, "plain", w.reference_plain, w.reference_plain.body_bytes),
        _wrk_ratio_row("plain", w.plain, w.reference_plain),
        _wrk_row(ours, "gzip", w.gzip, w.gzip.body_bytes),
        _wrk_row(LABEL, "gzip", w.reference_gzip, w.reference_gzip.body_bytes),
        _wrk_ratio_row("gzip", w.gzip, w.reference_gzip),
        "",
        target_line(
            P99_TARGET_MS,
            [("plain", w.plain, w.reference_plain), ("gzip", w.gzip, w.reference_gzip)],
        ),
    ]


def _churn_line(f: Figures) -> str:
    p = f.process
    return churn_line(
        p.window.churn,
        f.rate,
        p.after,
        expected_pods=p.expected_pods,
        allocated_first=p.allocated_first,
        expected_allocated=p.expected_allocated,
        server="the test server",
    )


def churn_line(
    c: ChurnResult,
    rate: float,
    a: After,
    *,
    expected_pods: int,
    allocated_first: int,
    expected_allocated: int,
    server: str,
) -> str:
    """What the churn did, and whether the first view built after it holds what the server
    holds: every pod, and every GPU the churn left bound."""
    churned = sum(c.done.values())
    return (
        f"Churn: {churned:,} changes in {c.seconds:.0f} s ({churned / c.seconds:.1f}/s, asked "
        f"{rate:g}/s): " + ", ".join(f"{name} {n}" for name, n in c.done.items()) + "; the "
        f"furthest a change started behind schedule {ms(c.late_max_s)}, the slowest change at "
        f"{server} {ms(c.put_max_s)}. The first view built wholly after it "
        f"({a.first.seconds:.1f} s later) held {a.first.pods:,} pods and "
        f"{a.first.allocated:,} allocated `nvidia.com/gpu`; the server held "
        f"{expected_pods:,} pods, and the GPUs were {allocated_first:,} at the first "
        f"metrics + {expected_allocated - allocated_first} the churn left bound: "
        + agreement(a, expected_pods, expected_allocated)
        + "."
    )


def agreement(a: After, pods: int, gpus: int) -> str:
    """Whether the views after the churn came to hold what the server holds."""
    if a.agreed is a.first:
        return "no watch event lost"
    if a.agreed is not None:
        return (
            f"events were still on their way; the view {a.agreed.seconds:.1f} s after the "
            f"stop (the {a.views}th read) held {a.agreed.pods:,} pods and "
            f"{a.agreed.allocated:,} GPUs: no watch event lost"
        )
    return f"**events lost**: {a.views} views read, none held {pods:,} pods and {gpus:,} GPUs"


def _pending_line(f: Figures) -> str:
    p = f.process
    wanted = {DESIGNED[name]: round(count * f.pods / 50_000) for name, count, _, _ in PENDING}
    built = [f"{reason} {p.pending.get(reason, 0)} (built for {n})" for reason, n in wanted.items()]
    others = [f"{r} {n} (not built for)" for r, n in sorted(p.pending.items()) if r not in wanted]
    return f"Pending GPU pods at the first metrics, by reason: {', '.join(built + others)}."


def render(f: Figures, machine: str) -> str:
    gzip_kib = f"{f.process.bodies['gzip'] / 1024:.1f}"
    return "\n".join(
        [
            f"Run: {machine}",
            "",
            f"Cluster: {f.nodes:,} nodes, {f.pods:,} pods ({f.gpu_pods:,} request GPUs, "
            f"{f.pending_gpu_pods} of them pending), {f.quotas} GPU ResourceQuotas. The pods' "
            f"JSON: {mib(f.raw_json)}, {f.raw_json / f.pods / 1024:.1f} KiB a pod. Built in "
            f"{f.built_s:.0f} s and loaded into the test API server in {f.loaded_s:.0f} s before "
            f"the process starts. `--cluster.interval={f.interval_s:g}s`, churn at "
            f"{f.rate:g} changes a second.",
            "",
            "| figure | value | target |",
            "|---|---:|---|",
            *_start_rows(f),
            *_memory_rows(f),
            *_cpu_rows(f.process),
            "",
            "`/metrics` as Prometheus scrapes it (bench/scrape_client.py in a process of its "
            f"own: one keep-alive connection, gzip, OpenMetrics, 50 ms apart; {gzip_kib} KiB "
            "a body). A cycle's span: from its build's start to its publication (the build "
            f"gauge, and {ms(RENDER_S)} allowed for rendering); idle is right after the first "
            "metrics:",
            "",
            *scraper_table(f.process.idle, f.process.window.scraper),
            "",
            f"Under churn, `wrk -t{f.load.threads} -c{f.load.connections} "
            f"-d{f.load.seconds}s --latency` (this machine's cores shared with the test API "
            "server, the churn and wrk), against ours, then against the reference: Go's "
            "net/http serving the bytes ours served just before (bench/reference.py), the "
            "churn and our process still running. Ours ÷ the reference is our server's part; "
            "what the reference takes too is the machine's:",
            "",
            *_wrk_table(f),
            "",
            _churn_line(f),
            "",
            _pending_line(f),
        ]
    )
