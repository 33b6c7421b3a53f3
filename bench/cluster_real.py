"""`make bench`, cluster view on the real kube-apiserver, at Kubernetes' published limits.

bench/cluster.py serves the pod list from pre-encoded JSON (bench/list_front.py) and churns
through the test server's hooks, so its figures are the process's own. Here the same fleet
(bench/cluster_fleet.py; at `--scale 3` 6,000 nodes and 150,000 pods, Kubernetes' published
limits of 5,000 nodes and 150,000 pods) is in a real etcd + kube-apiserver
(tests/fakes/control_plane.py, no scheduler and no controllers):

1. seeded once through the API (bench/fleet_cache.py: nodes with their status, pods created
   bound by `spec.nodeName` then given their status through the `status` subresource, quotas
   likewise, sixteen connections) and kept as etcd's data dir in a cache outside the
   checkout; each run starts etcd and the API server on a copy of it;
2. the bare paged list of what the view lists, twice (bench/bare_list.py: its pages and
   headers, one TLS connection), the floor its first complete metrics are compared with;
3. `kube-gpu-exporter cluster` starts on the admin kubeconfig and is measured as in
   bench/cluster.py, reusing its phases: the time to the first complete metrics (/readyz,
   every pod watched), CPU and VmRSS then; the scraper (bench/scrape_client.py) for six view
   intervals (bench/cluster.py's SCRAPED_INTERVALS), the cluster idle;
4. churn at `--rate` changes a second (bench/cluster_churn.py's mix, through the real API:
   bench/real_api.py): two intervals with a scrape a second (CPU, VmRSS once a second), six
   with the scraper; then the first view built wholly after it is checked against what the
   server holds (pods, and GPUs allocated), and the last pods deleted against the server.

Figures are reported beside their targets, never asserted. Usage:
    bench/cluster_real.py [--scale 1] [--rate 50] [--interval 15] [--readme]

The first run of a scale seeds (at `--scale 3` 13 to 24 minutes on the bench's two-core
machine, as loaded); later runs have the API server ready on the cached copy in about 35 s.
`--scale 0.2` (400 nodes, 10,000 pods) seeds in a minute or two.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import fake
import fleet_cache
import procs
import pytest
from bare_list import Listed, bare_lists
from cluster import (
    READY_TIMEOUT_S,
    SCRAPED_INTERVALS,
    Churned,
    after_churn,
    churn_scraped,
    command,
    memory,
    say,
)
from cluster_churn import Churn, ChurnResult
from cluster_fleet import Fleet, build
from cluster_report import (
    MIB,
    WATCHED,
    After,
    allocated,
    builds_seen,
    churn_line,
    mib,
    ms,
    scraper_table,
    value,
    verdict,
)
from errors import BenchError
from report import load_average, machine, update_readme
from scrape_client import BUILD, ScrapeLog, scrape_apart

sys.path.insert(0, str(fake.REPO / "tests"))  # control_plane imports the tests' support

from control_plane import ControlPlane, run_control_plane
from real_api import Api, RealTarget

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- cluster-real:start -->", "<!-- cluster-real:end -->"
READY_TARGET_S = 30.0
RSS_TARGET = 350 * MIB
CPU_TARGET = 0.1  # cores under churn, a scrape a second
BARE_TARGET = 1.5  # the first complete metrics ÷ the bare paged list of the same objects
# Quota admission adds each new pod's GPUs to its quota's `used`, and only the quota
# controller (not run here) takes them off again: under churn every team's quota would fill
# within seconds and refuse the churn's GPU pods. Off, the quotas keep the fleet's figures, as
# on the test server (the flag adds to the plane's own --disable-admission-plugins).
NO_QUOTA_ADMISSION = ("--disable-admission-plugins=ResourceQuota",)


@dataclass(frozen=True)
class Plane:
    """How this run's control plane came up."""

    seeding: fleet_cache.Seeding  # the cache's, made now when `seeded`
    seeded: bool
    copy_s: float  # the cached data dir copied into the run's folder
    up_s: float  # etcd and kube-apiserver started on the copy → /readyz 200


@dataclass(frozen=True)
class Measured:
    """The process, from its start to the first view built after the churn."""

    ready_s: float
    cpu_ready_s: float
    rss_ready: int
    hwm_ready: int
    watched: dict[str, int]
    first_build_s: float
    idle: ScrapeLog
    idle_cpu_per_s: float
    churned: Churned
    churn: ChurnResult
    samples_rss: list[int]
    builds: list[float]
    after: After
    expected_pods: int
    allocated_first: int
    expected_allocated: int
    rss_end: int
    hwm_end: int
    calls: int  # the churn's API calls
    deleted_checked: int
    still_there: list[str]


@dataclass(frozen=True)
class Result:
    nodes: int
    pods: int
    quotas: int
    raw_json: int
    plane: Plane
    m: Measured
    apiserver_rss: int
    etcd_rss: int
    bare: tuple[list[Listed], list[Listed]]  # the bare list twice, before the process starts


def wait_complete(server: procs.Server, started: float, pods: int) -> float:
    """/readyz 200 and every pod in `kube_gpu_cluster_watched_objects`."""
    while True:
        if server.proc.poll() is not None:
            raise BenchError(f"cluster exited ({server.proc.returncode}): {server.last_log_line()}")
        if time.monotonic() - started > READY_TIMEOUT_S:
            raise BenchError(f"cluster not complete after {READY_TIMEOUT_S:.0f}s")
        if procs.http_status(server.url + "/readyz") == 200:
            text = procs.http_text(server.metrics_url)
            if value(text, WATCHED.format(resource="pods")) >= pods:
                return time.monotonic() - started
        time.sleep(0.05)


def pid_of(binary: str, flag: str) -> int:
    """The process running `binary` with `flag` among its arguments."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(binary.encode()) and flag.encode() in argv:
            return int(cmdline.parent.name)
    raise BenchError(f"{binary} process not found")


def up(
    fleet: Fleet, digest: str, scale: float, work: Path
) -> tuple[fleet_cache.Seeding, bool, Path, float]:
    """The fleet's etcd data, seeded now when the cache has none, copied for this run."""
    folder = fleet_cache.cache_root() / fleet_cache.key(scale, digest)
    seeding = fleet_cache.cached(folder)
    seeded = seeding is None
    if seeding is None:
        seeding = fleet_cache.seed(fleet, folder, work, say)
    say(f"copying the fleet's etcd data from {folder}")
    began = time.monotonic()
    data = fleet_cache.copy_data(folder, work)
    return seeding, seeded, data, time.monotonic() - began


def measure(
    server: procs.Server, started: float, churn: Churn, target: RealTarget, interval_s: float
) -> Measured:
    """The process from its start: the first complete metrics, idle, then the churn."""
    pid = server.proc.pid
    ready_s = wait_complete(server, started, churn.expected_pods)
    cpu_ready = procs.cpu_seconds(pid)
    rss_ready, hwm_ready = memory(pid)
    text = procs.http_text(server.metrics_url)
    scraped_s = SCRAPED_INTERVALS * interval_s
    say(f"complete after {ready_s:.1f} s; a scrape every 50 ms, gzip, idle, for {scraped_s:g} s")
    cpu_idle, began = procs.cpu_seconds(pid), time.monotonic()
    idle = scrape_apart(server.port, scraped_s)
    idle_cpu = (procs.cpu_seconds(pid) - cpu_idle) / (time.monotonic() - began)
    allocated_first = allocated(text)
    churned = churn_scraped(server, churn, interval_s)
    churn_result = churn.stop()
    samples = churned.sampler.stop()
    if target.failure:
        raise BenchError(f"the churn stopped on a change that failed: {target.failure[:300]}")
    say("churn stopped; waiting for a view built wholly after it")
    after = after_churn(server, churn.expected_pods, allocated_first + churn.bound_gpus)
    rss_end, hwm_end = memory(pid)
    first_build_s = value(text, BUILD)
    return Measured(
        ready_s=ready_s,
        cpu_ready_s=cpu_ready,
        rss_ready=rss_ready,
        hwm_ready=hwm_ready,
        watched={
            r: int(value(text, WATCHED.format(resource=r)))
            for r in ("nodes", "pods", "resourcequotas")
        },
        first_build_s=first_build_s,
        idle=idle,
        idle_cpu_per_s=idle_cpu,
        churned=churned,
        churn=churn_result,
        samples_rss=[s.rss for s in samples],
        builds=builds_seen(first_build_s, samples),
        after=after,
        expected_pods=churn.expected_pods,
        allocated_first=allocated_first,
        expected_allocated=allocated_first + churn.bound_gpus,
        rss_end=rss_end,
        hwm_end=hwm_end,
        calls=target.calls,
        deleted_checked=len(target.deleted),
        still_there=target.still_there(),
    )


def run(args: argparse.Namespace, work: Path) -> Result:
    fleet = build(args.scale)
    counts = {"nodes": len(fleet.nodes), "pods": len(fleet.pods), "quotas": len(fleet.quotas)}
    digest, raw = fleet_cache.fingerprint(fleet)
    seeding, seeded, data, copy_s = up(fleet, digest, args.scale, work)
    began = time.monotonic()
    with run_control_plane(
        work / "plane",
        etcd_data=data,
        extra_etcd_args=fleet_cache.ETCD_ARGS,
        extra_apiserver_args=NO_QUOTA_ADMISSION,
        timeout=fleet_cache.READY_TIMEOUT_S,
    ) as plane:
        up_s = time.monotonic() - began
        say(f"API server ready on the copy after {up_s:.1f} s (copy {copy_s:.1f} s)")
        target = RealTarget(Api(plane))
        churn = Churn(target, fleet, args.rate)
        fleet.pods.clear()  # the server holds them; the churn keeps what it needs
        gc.collect()
        gc.freeze()  # what is left lives to the end: no full collection walks it under churn
        say("the bare paged list of the same objects, twice (bench/bare_list.py)")
        context = plane.ssl_context()
        bare = (
            bare_lists(plane.url, plane.token, context),
            bare_lists(plane.url, plane.token, context),
        )
        port = procs.free_port()
        started = time.monotonic()
        argv = command(plane.kubeconfig, port, args.interval)
        with procs.running("cluster-real", argv, port, {}, work, "/healthz") as server:
            measured = measure(server, started, churn, target, args.interval)
            apiserver, etcd = servers_rss(plane)
    return Result(
        nodes=counts["nodes"],
        pods=counts["pods"],
        quotas=counts["quotas"],
        raw_json=raw,
        plane=Plane(seeding, seeded, copy_s, up_s),
        m=measured,
        apiserver_rss=apiserver,
        etcd_rss=etcd,
        bare=bare,
    )


def servers_rss(plane: ControlPlane) -> tuple[int, int]:
    """VmRSS of kube-apiserver and of etcd."""
    port = plane.url.rsplit(":", 1)[1]
    apiserver = pid_of("kube-apiserver", f"--secure-port={port}")
    etcd = pid_of("etcd", f"--listen-client-urls={plane.etcd_url}")
    return memory(apiserver)[0], memory(etcd)[0]


def _seeding_line(r: Result, scale: float) -> str:
    s, p = r.plane.seeding, r.plane
    made = "this run" if p.seeded else f"{s.when}, cached since"
    return (
        f"Cluster: {r.nodes:,} nodes, {r.pods:,} pods, {r.quotas} GPU ResourceQuotas (scale "
        f"{scale:g} of bench/cluster_fleet.py; the pods' JSON {mib(r.raw_json)}) in a real "
        f"kube-apiserver over etcd ({fleet_cache.versions()}). Seeded cold ({made}) through the "
        f"API with {fleet_cache.CONNECTIONS} connections: nodes in {s.nodes_s:.0f} s, pods "
        f"(create, then status) in {s.pods_s:.0f} s ({r.pods / s.pods_s:.0f} pods/s), quotas "
        f"in {s.quotas_s:.1f} s; etcd's database {mib(s.db_bytes)}, compacted and "
        f"defragmented {mib(s.compacted_bytes)}; **{s.total_s:.0f} s** from the plane's start "
        f"to the data dir in the cache. Warm, this run: the cached data dir copied in "
        f"{p.copy_s:.1f} s, etcd and kube-apiserver ready on it {p.up_s:.1f} s later: "
        f"**{p.copy_s + p.up_s:.0f} s**. `--cluster.interval` as below, churn at the rate below."
    )


def _rows(r: Result) -> list[str]:
    expected = {"nodes": r.nodes, "pods": r.pods, "resourcequotas": r.quotas}
    complete = all(r.m.watched.get(k) == v for k, v in expected.items())
    builds = r.m.builds
    under = f"{ms(statistics.fmean(builds))} / {ms(max(builds))}" if builds else "none seen"
    rss = r.m.samples_rss or [r.m.rss_end]
    w = r.m.churned
    cold, warm = (sum(listed.seconds for listed in run) for run in r.bare)
    pods = [next(listed for listed in run if listed.resource == "pods") for run in r.bare]
    ratio = r.m.ready_s / warm
    return [
        "| figure | value | target |",
        "|---|---:|---|",
        f"| start → first complete metrics (`/readyz` 200, every pod watched) | {r.m.ready_s:.1f} s"
        f" | < {READY_TARGET_S:.0f} s: {verdict(r.m.ready_s < READY_TARGET_S)} |",
        f"| the bare paged list of the same objects (bench/bare_list.py: {pods[1].pages} pod "
        f"pages, {mib(pods[1].wire_bytes)} gzipped, {mib(pods[1].json_bytes)} of JSON), "
        f"first / second run; the pods' list alone | {cold:.1f} s / {warm:.1f} s; "
        f"{pods[0].seconds:.1f} s / {pods[1].seconds:.1f} s | |",
        f"| first complete metrics ÷ the bare list (its second run) | {ratio:.2f}× | "
        f"≤ {BARE_TARGET:g}×: {verdict(ratio <= BARE_TARGET)} |",
        f"| … the process's CPU by then | {r.m.cpu_ready_s:.1f} s | |",
        f"| watched objects at the first metrics: nodes / pods / quotas | "
        f"{r.m.watched['nodes']:,} / {r.m.watched['pods']:,} / {r.m.watched['resourcequotas']} | "
        f"all: {verdict(complete)} |",
        f"| first build of the view; per 1,000 pods | {ms(r.m.first_build_s)}; "
        f"{r.m.first_build_s * 1e6 / r.pods:.1f} ms | |",
        f"| builds under churn ({len(builds)}): mean / max | {under} | |",
        f"| VmRSS at the first metrics (VmHWM so far) | {mib(r.m.rss_ready)} ({mib(r.m.hwm_ready)})"
        f" | < 350 MiB: {verdict(r.m.hwm_ready < RSS_TARGET)} |",
        f"| VmRSS under churn, once a second: median / max | {mib(statistics.median(rss))} / "
        f"{mib(max(rss))} | < 350 MiB: {verdict(max(rss) < RSS_TARGET)} |",
        f"| VmRSS at the end; VmHWM over the whole run | {mib(r.m.rss_end)}; {mib(r.m.hwm_end)} | "
        f"< 350 MiB: {verdict(r.m.hwm_end < RSS_TARGET)} |",
        f"| CPU idle, the scraper's 50 ms scrapes ({r.m.idle.seconds:g} s and its tail) | "
        f"{r.m.idle_cpu_per_s:.3f} s/s | |",
        f"| CPU under churn, a scrape a second ({w.quiet_s:.0f} s) | {w.quiet_cpu_per_s:.3f} s/s"
        f" | < {CPU_TARGET:g} core: {verdict(w.quiet_cpu_per_s < CPU_TARGET)} |",
        f"| kube-apiserver / etcd VmRSS at the end | {mib(r.apiserver_rss)} / "
        f"{mib(r.etcd_rss)} | |",
    ]


def render(r: Result, scale: float, rate: float, when: str) -> str:
    gone = r.m.deleted_checked - len(r.m.still_there)
    deleted = f"{gone} of the last {r.m.deleted_checked} pods the churn deleted are gone (404)"
    if r.m.still_there:
        deleted += f"; **still there**: {', '.join(r.m.still_there[:3])}"
    changes = sum(r.m.churn.done.values())
    return "\n".join(
        [
            f"Run: {when}",
            "",
            _seeding_line(r, scale),
            "",
            *_rows(r),
            "",
            "`/metrics` as Prometheus scrapes it (bench/scrape_client.py in a process of its "
            "own: one keep-alive connection, gzip, OpenMetrics, 50 ms apart); idle right after "
            "the first metrics, then under churn; a scrape within a view cycle's span (its "
            "build, and 500 ms allowed for rendering) overlapped it:",
            "",
            *scraper_table(r.m.idle, r.m.churned.scraper),
            "",
            churn_line(
                r.m.churn,
                rate,
                r.m.after,
                expected_pods=r.m.expected_pods,
                allocated_first=r.m.allocated_first,
                expected_allocated=r.m.expected_allocated,
                server="the real API server",
            )
            + f" The churn's API calls: {r.m.calls:,} ({r.m.calls / max(changes, 1):.2f} a change);"
            f" {deleted}.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="changes a second")
    parser.add_argument("--interval", type=float, default=15.0, help="--cluster.interval, s")
    parser.add_argument("--scale", type=float, default=1.0, help="cluster size factor")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    load_at_start = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-real-") as work:
            result = run(args, Path(work))
    except (BenchError, pytest.fail.Exception) as exc:  # the latter: a binary missing, say
        print(f"bench/cluster_real.py: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    text = render(result, args.scale, args.rate, machine(load_at_start))
    print("\n" + text)
    if args.readme:
        update_readme(README, text + "\n", START, END)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
