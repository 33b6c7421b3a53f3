"""`make bench`: scrape latency, CPU and memory of the exporter on a 64-device node.

The node is a fake libnvidia-ml (tests/fakes/fakenvml) playing 8 A100s × 7 MIG instances, so the
bench runs anywhere and every run sees the same node. Steps 1-5 (serving) run with pod
attribution off; steps 6-8 (pod attribution) add a ninth GPU shared by ten time-slicing replicas and
66 pods. In order:

1. the exporter subprocess idle (CPU per cycle from /proc), then scraped by wrk, plain and
   gzip, then the same against Go's net/http serving the bytes it served (bench/reference.py);
2. the same scrapes while every NVML call sleeps 2 s (collection stalled);
3. prometheus-client's `start_http_server` over the same snapshot, scraped the same way;
4. CPU per `CollectionLoop.cycle()` in this process;
5. VmRSS of this process over many cycles;
6. the exporter subprocess with attribution on, its pods served by a fake gRPC kubelet in
   this process, scraped by wrk, plain and gzip;
7. CPU per `attribute()` call in this process;
8. VmRSS of this process over many pod create/delete cycles.

Figures are reported beside their targets, never asserted: the exit status is non-zero only
when something the bench needs breaks (a server does not start, wrk is missing, ...).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import procs
import reference
import wrk
from cycles import CpuPerCycle, CycleBench, RssTrack
from errors import BenchError
from fake import FakeNode, load_in_process, prepare
from node import ATTRIBUTION_DEVICE_COUNT, DEVICE_COUNT, attribution_scenario, node_scenario
from procs import ThreadCpu
from report import (
    AttributionRun,
    IdleExporter,
    PlainAndGzip,
    Results,
    Stall,
    load_average,
    machine,
    render,
    update_readme,
)
from wrk import GZIP_HEADERS, Load

from kube_gpu_exporter.exporter.simulated.scenario import Scenario

README = Path(__file__).resolve().with_name("README.md")
STALL_DELAY_MS = 2000
COLLECTIONS = "kube_gpu_exporter_collections_total"
LAST_SUCCESS = "kube_gpu_exporter_last_collection_success_timestamp_seconds"
ALLOCATION_INFO = "nvidia_gpu_allocation_info"
# The churn run keeps GPU 0 (and its MIG instances) besides the shared GPU: 9 devices, so
# 10,000 create/delete cycles (20,000 collection cycles) take about two minutes.
CHURN_MIG_GPUS = (0,)


@dataclass(frozen=True)
class Settings:
    load: Load
    interval_s: int
    idle_s: float
    cpu_cycles: int
    rss_cycles: int
    attribution_calls: int
    churn_cycles: int
    write_readme: bool


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run of every step")
    parser.add_argument("--cycles", type=int, help="cycles for the RSS run (default 10000)")
    parser.add_argument("--cpu-cycles", type=int, help="cycles timed for CPU (default 200)")
    parser.add_argument(
        "--attribution-calls", type=int, help="attribute() calls timed for CPU (default 1000)"
    )
    parser.add_argument(
        "--churn-cycles", type=int, help="pod create/delete cycles for RSS (default 10000)"
    )
    parser.add_argument("--duration", type=int, help="seconds per wrk run (default 15)")
    parser.add_argument("--idle", type=float, help="seconds of idle exporter CPU (default 60)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--interval", type=int, default=5, help="collector interval, seconds")
    parser.add_argument(
        "--no-readme", action="store_true", help="print only; --quick never writes the README"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    return Settings(
        load=Load(args.threads, args.connections, args.duration or (3 if quick else 15)),
        interval_s=args.interval,
        idle_s=args.idle or (2.2 * args.interval if quick else 60.0),
        cpu_cycles=args.cpu_cycles or (20 if quick else 200),
        rss_cycles=args.cycles or (200 if quick else 10_000),
        attribution_calls=args.attribution_calls or (100 if quick else 1_000),
        churn_cycles=args.churn_cycles or (200 if quick else 10_000),
        write_readme=not (quick or args.no_readme),
    )


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _summary(result: wrk.WrkResult) -> str:
    return (
        f"  p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
        f"{result.requests_per_second:,.0f} req/s, {result.non_2xx + result.socket_errors} errors"
    )


def scrape_both(url: str, load: Load, what: str) -> PlainAndGzip:
    """wrk plain then gzipped: Prometheus asks for gzip, curl and most tools do not."""
    say(f"wrk {what}, plain")
    plain = wrk.run(url, load)
    say(_summary(plain))
    say(f"wrk {what}, gzip")
    gzipped = wrk.run(url, load, GZIP_HEADERS)
    say(_summary(gzipped))
    return PlainAndGzip(plain, gzipped)


def exporter_value(server: procs.Server, name: str) -> float:
    return procs.sample_value(procs.http_text(server.metrics_url), name)


def poller_cpu(pid: int, before: dict[int, ThreadCpu], after: dict[int, ThreadCpu]) -> float:
    """CPU of the non-main thread that slept most often: the Xid watcher.

    It returns from nvmlEventSetWait twice a second (its 500 ms timeout; the fake wakes once
    per wait, as a driver does); the collector thread sleeps a few times per cycle and the
    event loop is the main thread, so the most frequent sleeper is the Xid watcher.
    """
    zero = ThreadCpu(0.0, 0)
    deltas = {
        tid: (
            now.voluntary_switches - before.get(tid, zero).voluntary_switches,
            now.cpu_s - before.get(tid, zero).cpu_s,
        )
        for tid, now in after.items()
        if tid != pid
    }
    if not deltas:
        return 0.0
    return max(deltas.values())[1]


def measure_idle(server: procs.Server, seconds: float) -> IdleExporter:
    """Process CPU over a window without scrapes, per cycle the exporter itself counted."""
    pid = server.proc.pid
    say(f"exporter idle for {seconds:.0f} s (CPU from /proc/{pid}/stat)")
    cycles_before = exporter_value(server, COLLECTIONS)
    cpu_before, threads_before = procs.cpu_seconds(pid), procs.thread_cpu(pid)
    started = time.monotonic()
    time.sleep(seconds)
    cpu_after, threads_after = procs.cpu_seconds(pid), procs.thread_cpu(pid)
    elapsed = time.monotonic() - started
    cycles = int(exporter_value(server, COLLECTIONS) - cycles_before)
    poller = poller_cpu(pid, threads_before, threads_after)
    idle = IdleExporter(elapsed, cpu_after - cpu_before, poller, cycles)
    say(
        f"  {idle.cpu_s:.2f} s CPU over {cycles} cycles ({idle.core_share(idle.cpu_s):.2%} of a "
        f"core; {poller:.2f} s of it the Xid watcher's)"
    )
    return idle


def measure_stalled(
    server: procs.Server, node: FakeNode, scenario: Scenario, settings: Settings
) -> tuple[PlainAndGzip, Stall]:
    """Slow every NVML call, wait until a cycle is stuck in them, then scrape."""
    say(f"every NVML call now takes {STALL_DELAY_MS} ms")
    node.set_delay(scenario, STALL_DELAY_MS)
    try:
        time.sleep(settings.interval_s + 1)  # the next cycle has started and is stuck
        before = exporter_value(server, COLLECTIONS)
        results = scrape_both(server.metrics_url, settings.load, "exporter, NVML stalled")
        metrics = procs.http_text(server.metrics_url)
        stall = Stall(
            delay_ms=STALL_DELAY_MS,
            cycles_during=int(procs.sample_value(metrics, COLLECTIONS) - before),
            last_success_age_s=time.time() - procs.sample_value(metrics, LAST_SUCCESS),
        )
    finally:
        # Let the stuck cycle finish at once, so the exporter stops promptly.
        node.set_delay(scenario, 0)
    say(f"  cycles during: {stall.cycles_during}, last success {stall.last_success_age_s:.0f}s ago")
    return results, stall


@dataclass(frozen=True)
class ExporterRun:
    """Everything measured on the one exporter subprocess."""

    series: int
    idle: IdleExporter
    scrapes: PlainAndGzip
    stalled: PlainAndGzip
    stall: Stall
    rss_ready: int
    rss_end: int
    reference: PlainAndGzip  # Go's net/http serving the bytes the exporter served


def bench_exporter(
    node: FakeNode, scenario: Scenario, settings: Settings, work_dir: Path
) -> ExporterRun:
    """Idle first, so the CPU window sees no scrapes; the stall last, as it is disruptive."""
    port = procs.free_port()
    command = procs.exporter_command(port, settings.interval_s)
    say(f"starting the exporter on {procs.HOST}:{port}")
    with procs.running("exporter", command, port, node.env, work_dir, "/readyz") as server:
        rss_ready = procs.rss_bytes(server.proc.pid)
        body = procs.http_text(server.metrics_url)
        series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        idle = measure_idle(server, settings.idle_s)
        ours = scrape_both(server.metrics_url, settings.load, "exporter")
        captured = reference.capture(server.metrics_url)
        with reference.serving(captured, work_dir) as peer:
            same = scrape_both(peer.metrics_url, settings.load, "Go net/http, the same bytes")
        stalled, stall = measure_stalled(server, node, scenario, settings)
        rss_end = procs.rss_bytes(server.proc.pid)
    return ExporterRun(series, idle, ours, stalled, stall, rss_ready, rss_end, same)


def bench_client(node: FakeNode, settings: Settings, work_dir: Path) -> PlainAndGzip:
    port = procs.free_port()
    command = procs.client_server_command(port)
    say(f"starting prometheus-client's start_http_server on {procs.HOST}:{port}")
    with procs.running("client", command, port, node.env, work_dir, "/metrics") as server:
        return scrape_both(server.metrics_url, settings.load, "prometheus-client")


def bench_cycles(node: FakeNode, settings: Settings) -> tuple[CpuPerCycle, RssTrack]:
    load_in_process(node)
    with CycleBench(settings.interval_s) as bench:
        say(f"CPU of {settings.cpu_cycles} cycles in-process")
        cpu = bench.cpu_per_cycle(settings.cpu_cycles)
        say(f"  mean {cpu.mean_s * 1000:.2f} ms, p99 {cpu.p99_s * 1000:.2f} ms")
        say(f"VmRSS over {settings.rss_cycles:,} cycles in-process")
        rss = bench.rss_over(
            settings.rss_cycles, lambda done, value: say(f"  {done:>6} cycles: {value >> 10} KiB")
        )
    return cpu, rss


@dataclass(frozen=True)
class AttributedExporter:
    series: int
    allocations: int
    scrapes: PlainAndGzip
    rss_ready: int
    rss_end: int


def wait_for_allocations(server: procs.Server, expected: int, interval_s: float) -> str:
    """/metrics once every pod is attributed: the kubelet was asked and a cycle ran since."""
    deadline = time.monotonic() + procs.START_TIMEOUT_SECONDS + 3 * interval_s
    while True:
        body = procs.http_text(server.metrics_url)
        found = procs.count_samples(body, ALLOCATION_INFO)
        if found == expected:
            return body
        if server.proc.poll() is not None:
            raise BenchError(f"the exporter exited: {server.last_log_line()}")
        if time.monotonic() > deadline:
            raise BenchError(f"{found} of {expected} {ALLOCATION_INFO} series after waiting")
        time.sleep(0.2)


def bench_attribution_exporter(
    node: FakeNode, scenario: Scenario, settings: Settings, work_dir: Path
) -> AttributedExporter:
    """The exporter with a kubelet socket; the kubelet (gRPC) runs in this process."""
    # Imported here: both load gRPC, which steps 1-5 (attribution off) must not carry.
    from attribution import node_allocatable, node_pods

    from kubelet_server import FakeKubelet

    state = scenario.state_at(0)
    pods = node_pods(state)
    port = procs.free_port()
    socket = work_dir / "kubelet.sock"
    interval = f"--kubelet.interval={settings.interval_s}s"
    command = procs.exporter_command(port, settings.interval_s, str(socket), interval)
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = pods
        kubelet.allocatable = node_allocatable(state)
        say(f"starting the exporter with attribution on {procs.HOST}:{port} ({len(pods)} pods)")
        with procs.running("exporter-attr", command, port, node.env, work_dir, "/readyz") as srv:
            body = wait_for_allocations(srv, len(pods), settings.interval_s)
            rss_ready = procs.rss_bytes(srv.proc.pid)
            say(f"  {len(pods)} pods attributed")
            scrapes = scrape_both(srv.metrics_url, settings.load, "exporter, attribution on")
            rss_end = procs.rss_bytes(srv.proc.pid)
    return AttributedExporter(
        procs.count_samples(body),
        procs.count_samples(body, ALLOCATION_INFO),
        scrapes,
        rss_ready,
        rss_end,
    )


def bench_attribution(
    node: FakeNode, scenario: Scenario, settings: Settings, work_dir: Path
) -> AttributionRun:
    from attribution import (
        ChurnBench,
        attribution_cpu,
        node_allocatable,
        node_pods,
        parse_listing,
        sample_node,
    )

    exporter = bench_attribution_exporter(node, scenario, settings, work_dir)
    load_in_process(node)
    nvml = sample_node()
    state = scenario.state_at(0)
    pods = node_pods(state)
    listing = parse_listing(pods, node_allocatable(state))
    say(f"CPU of {settings.attribution_calls:,} attribute() calls in-process")
    cpu = attribution_cpu(nvml, listing, len(pods), settings.attribution_calls)
    for each in cpu:
        say(f"  {each.directory}: mean {each.mean_s * 1000:.3f} ms, p99 {each.p99_s * 1000:.3f} ms")
    say(f"VmRSS over {settings.churn_cycles:,} pod create/delete cycles in-process")
    churn_bench = ChurnBench(nvml, state, CHURN_MIG_GPUS, settings.interval_s)
    try:
        churn = churn_bench.run(
            settings.churn_cycles,
            lambda done, value: say(f"  {done:>6} cycles: {value >> 10} KiB"),
        )
    finally:
        churn_bench.close()
    return AttributionRun(
        devices=ATTRIBUTION_DEVICE_COUNT,
        pods=len(pods),
        series=exporter.series,
        allocations=exporter.allocations,
        kubelet_interval_s=settings.interval_s,
        scrapes=exporter.scrapes,
        rss_ready=exporter.rss_ready,
        rss_end=exporter.rss_end,
        cpu=cpu,
        churn=churn,
        churn_mig_gpus=len(CHURN_MIG_GPUS),
    )


def run(settings: Settings) -> Results:
    wrk.wrk_path()  # fail before building anything
    reference.binary(say)  # ... Go included
    scenario = node_scenario()
    with tempfile.TemporaryDirectory(prefix="kge-bench-") as tmp:
        work_dir = Path(tmp)
        node = prepare(work_dir, scenario)
        exporter = bench_exporter(node, scenario, settings, work_dir)
        theirs = bench_client(node, settings, work_dir)
        cpu, rss = bench_cycles(node, settings)
        shared = attribution_scenario()
        attributed_node = FakeNode(node.lib_dir, work_dir / "nvml-state-attribution")
        attributed_node.set_delay(shared, 0)
        attribution = bench_attribution(attributed_node, shared, settings, work_dir)
    return Results(
        devices=DEVICE_COUNT,
        series=exporter.series,
        load=settings.load,
        interval_s=settings.interval_s,
        ours=exporter.scrapes,
        ours_stalled=exporter.stalled,
        stall=exporter.stall,
        theirs=theirs,
        reference=exporter.reference,
        idle=exporter.idle,
        exporter_rss_ready=exporter.rss_ready,
        exporter_rss_end=exporter.rss_end,
        cpu=cpu,
        rss=rss,
        attribution=attribution,
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    load_at_start = load_average()
    try:
        results = run(settings)
    except (BenchError, OSError, subprocess.SubprocessError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    section = render(results, machine(load_at_start))
    print("\n" + section)
    if settings.write_readme:
        update_readme(README, section)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
