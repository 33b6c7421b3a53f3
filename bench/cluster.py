"""`make bench`, cluster view: `kube-gpu-exporter cluster` on 2,000 nodes and 50,000 pods.

The cluster (bench/cluster_fleet.py: 5,000 GPU pods of which 300 pending for four reasons,
pods of 4-6 KiB of JSON each) is loaded into the test API server (`KubeApiServer`, real HTTP
list and watch) in this process without watch events, then the `cluster` command starts as
a user runs it, with a kubeconfig for that server, and lists everything in pages. Measured:

1. the time from its start to the first complete metrics (/readyz 200, and every pod in
   `kube_gpu_cluster_watched_objects`), with the test server's own cost per page beside it;
2. VmRSS then, and under churn (bench/cluster_churn.py: 50 changes a second), with VmHWM;
   beside the raw JSON of the pods and an empty cluster's process;
3. its CPU seconds per second under churn, scraped once a second as Prometheus would;
4. /metrics latency as Prometheus sees it (bench/scrape_client.py, a process of its own), the
   cluster idle and under churn, scrapes overlapping a view cycle told apart; and under
   churn `wrk -t2 -c16`, plain and gzip, then the same against Go's net/http serving the
   bytes ours just served (bench/reference.py), the churn still running;
5. the view's build duration (`kube_gpu_cluster_build_duration_seconds`), per 1,000 pods.

Figures are reported beside their targets, never asserted: the exit status is non-zero only
when something the bench needs breaks. Usage:
    bench/cluster.py [--rate 50] [--interval 15] [--scale 1] [--neighbour] [--readme]

`--neighbour` runs one busy Python loop per core (bench/neighbour.py) from the process's start
to the end of the run: the figures are then the machine's cores shared with work that never
sleeps, and the run line above the tables says so.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import procs
import reference
import wrk
from cluster_churn import Churn
from cluster_fleet import Fleet, build
from cluster_report import (
    WATCHED,
    After,
    Figures,
    Listing,
    Process,
    Sample,
    View,
    Window,
    allocated,
    pending_by_reason,
    render,
    value,
)
from errors import BenchError
from list_front import ListFront
from neighbour import Neighbour, busy
from report import load_average, machine, update_readme
from scrape_client import BUILD, ScrapeLog, scrape_apart

from kube_gpu_exporter.demo.kube_api import PODS_PATH, KubeApiServer, write_kubeconfig
from kube_gpu_exporter.exporter.cluster.objects import ACTIVE_PODS
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- cluster:start -->", "<!-- cluster:end -->"
READY_TIMEOUT_S = 300.0
RENDER_MARGIN_S = 2.0  # rendering the bodies after a build, at most
AGREE_VIEWS = 4  # views read after the churn before an event is called lost
# The scraper's windows, idle and under churn, in view intervals: each holds one cycle and
# ~19 scrapes overlapping it, so over one a single slow scrape was the row's p99; over six,
# ~110 overlapping scrapes, the p99 is the second slowest.
SCRAPED_INTERVALS = 6
COMMAND = str(Path(sys.executable).with_name("kube-gpu-exporter"))


def say(message: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {message}", flush=True)


def memory(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM (the peak RSS the kernel saw) of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(rest.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def load(api: KubeApiServer, fleet: Fleet) -> list[bytes]:
    """Everything into the server without watch events; each pod's JSON as the server
    stores and serves it (with the resourceVersion it was given), for the list front."""
    for node in fleet.nodes:
        api.put_node(node, notify=False)
    for quota in fleet.quotas:
        api.put_quota(quota, notify=False)
    encoded = []
    for pod in fleet.pods:
        pod["metadata"]["resourceVersion"] = str(api.put(pod, notify=False))
        encoded.append(json.dumps(pod).encode())
    return encoded


def page_cost(api: KubeApiServer, pods: int) -> float:
    """Seconds the test server takes for one page of the pod list, alone (the first, middle
    and last page of the query the process sends; mean)."""
    query = {"fieldSelector": ACTIVE_PODS, "limit": str(PAGE)}
    took = []
    for start in (0, pods // 2 // PAGE * PAGE, max(0, pods - PAGE) // PAGE * PAGE):
        params = {**query, "continue": str(start)} if start else query
        url = f"{api.url}{PODS_PATH}?{urllib.parse.urlencode(params)}"
        began = time.perf_counter()
        procs.http_text(url)
        took.append(time.perf_counter() - began)
    return sum(took) / len(took)


def command(kubeconfig: Path, port: int, interval_s: float) -> list[str]:
    return [
        COMMAND,
        "cluster",
        f"--web.listen-address={procs.HOST}:{port}",
        f"--kubernetes.kubeconfig={kubeconfig}",
        f"--cluster.interval={interval_s:g}s",
    ]


def wait_ready(server: procs.Server, started: float) -> float:
    while procs.http_status(server.url + "/readyz") != 200:
        if server.proc.poll() is not None:
            raise BenchError(f"cluster exited ({server.proc.returncode}): {server.last_log_line()}")
        if time.monotonic() - started > READY_TIMEOUT_S:
            raise BenchError(f"cluster not ready after {READY_TIMEOUT_S:.0f}s")
        time.sleep(0.05)
    return time.monotonic() - started


def empty_cluster_rss(work: Path, interval_s: float) -> int:
    """VmRSS of the process once ready on a cluster with nothing in it: its fixed part."""
    with KubeApiServer() as empty:
        kubeconfig = empty.write_kubeconfig(work / "empty-kubeconfig")
        port = procs.free_port()
        started = time.monotonic()
        argv = command(kubeconfig, port, interval_s)
        with procs.running("cluster-empty", argv, port, {}, work, "/healthz") as server:
            wait_ready(server, started)
            return memory(server.proc.pid)[0]


@dataclass
class Sampler:
    """Once a second: the process's VmRSS and a plain scrape (its build duration and pods)."""

    server: procs.Server
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            rss = memory(self.server.proc.pid)[0]
            text = procs.http_text(self.server.metrics_url)
            self.samples.append(Sample(time.monotonic(), rss, value(text, BUILD), _pods(text)))

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        return self.samples


def _pods(text: str) -> int:
    return int(value(text, WATCHED.format(resource="pods")))


@dataclass(frozen=True)
class PageLog:
    """Who served the process's pod list, and when it asked for each page."""

    api: KubeApiServer
    front: ListFront | None  # None: the test server itself

    def times(self) -> list[float]:
        if self.front is None:
            return [request.at for request in self.api.lists(PODS_PATH)]
        return list(self.front.page_times)

    def ready(self) -> None:
        """The first complete metrics are in: from now on pod lists go to the server."""
        if self.front is not None:
            self.front.serving = False


def measure(
    server: procs.Server,
    pages: PageLog,
    started: float,
    churn: Churn,
    interval_s: float,
    work: Path,
) -> Process:
    """The process from its start: the first complete metrics, then the churn window."""
    pid = server.proc.pid
    ready_s = wait_ready(server, started)
    pages.ready()
    cpu_ready = procs.cpu_seconds(pid)
    rss_ready, hwm_ready = memory(pid)
    text = procs.http_text(server.metrics_url)
    asked = [at for at in pages.times() if at >= started]
    listing = Listing(
        pages=len(asked),
        began_s=asked[0] - started if asked else 0.0,
        took_s=asked[-1] - asked[0] if asked else 0.0,
    )
    resources = ("nodes", "pods", "resourcequotas")
    bodies = {
        enc: wrk.body_size(server.metrics_url, headers)
        for enc, headers in (("plain", {}), ("gzip", wrk.GZIP_HEADERS))
    }
    scraped_s = SCRAPED_INTERVALS * interval_s
    say(f"ready after {ready_s:.1f} s; a scrape every 50 ms, gzip, idle, for {scraped_s:g} s")
    cpu_idle, began = procs.cpu_seconds(pid), time.monotonic()
    idle = scrape_apart(server.port, scraped_s)
    idle_cpu_per_s = (procs.cpu_seconds(pid) - cpu_idle) / (time.monotonic() - began)
    window = under_churn(server, churn, interval_s, work)
    after = after_churn(server, churn.expected_pods, allocated(text) + churn.bound_gpus)
    rss_end, hwm_end = memory(pid)
    return Process(
        ready_s=ready_s,
        cpu_ready_s=cpu_ready,
        rss_ready=rss_ready,
        hwm_ready=hwm_ready,
        watched={r: int(value(text, WATCHED.format(resource=r))) for r in resources},
        pending=pending_by_reason(text),
        first_build_s=value(text, BUILD),
        bodies=bodies,
        listing=listing,
        idle=idle,
        idle_cpu_per_s=idle_cpu_per_s,
        window=window,
        after=after,
        expected_pods=churn.expected_pods,
        allocated_first=allocated(text),
        expected_allocated=allocated(text) + churn.bound_gpus,
        rss_end=rss_end,
        hwm_end=hwm_end,
    )


@dataclass(frozen=True)
class Churned:
    """The churn's first three view intervals: CPU with a scrape a second, then the scraper."""

    sampler: Sampler  # still sampling: stopped by the caller with the churn
    quiet_cpu_per_s: float
    quiet_s: float
    scraper: ScrapeLog


def churn_scraped(server: procs.Server, churn: Churn, interval: float) -> Churned:
    """The churn started, two view intervals with a scrape a second only (the process's CPU),
    then SCRAPED_INTERVALS with a Prometheus-like scraper (latency as Prometheus sees it);
    whole intervals, so that each holds its share of builds. The churn goes on."""
    pid = server.proc.pid
    say(f"churn; for {2 * interval:g} s a scrape a second only (CPU)")
    churn.start()
    sampler = Sampler(server)
    cpu_start, began = procs.cpu_seconds(pid), time.monotonic()
    time.sleep(2 * interval)
    cpu_quiet = procs.cpu_seconds(pid) - cpu_start
    quiet_s = time.monotonic() - began
    say(f"a scrape every 50 ms, gzip, for {SCRAPED_INTERVALS * interval:g} s")
    scraper = scrape_apart(server.port, SCRAPED_INTERVALS * interval)
    return Churned(sampler, cpu_quiet / quiet_s, quiet_s, scraper)


def under_churn(server: procs.Server, churn: Churn, interval: float, work: Path) -> Window:
    """Twelve view intervals of churn: churn_scraped's eight, then wrk plain and wrk gzip for
    one each, then the same two against the reference server with the bytes ours served
    just before (the machine's share of wrk's figures; the churn, the test server and our
    process go on meanwhile)."""
    pid = server.proc.pid
    churned = churn_scraped(server, churn, interval)
    say("wrk -t2 -c16, plain then gzip")
    cpu_start, began = procs.cpu_seconds(pid), time.monotonic()
    plain = wrk.run(server.metrics_url, scrape_load(interval))
    gzip = wrk.run(server.metrics_url, scrape_load(interval), wrk.GZIP_HEADERS)
    cpu_wrk = procs.cpu_seconds(pid) - cpu_start
    wrk_s = time.monotonic() - began
    captured = reference.capture(server.metrics_url)
    with reference.serving(captured, work) as peer:
        say(f"wrk -t2 -c16 against Go's net/http with the same bytes ({peer.url}), plain then gzip")
        peer_plain = wrk.run(peer.metrics_url, scrape_load(interval))
        peer_gzip = wrk.run(peer.metrics_url, scrape_load(interval), wrk.GZIP_HEADERS)
    return Window(
        churn=churn.stop(),
        samples=churned.sampler.stop(),
        quiet_cpu_per_s=churned.quiet_cpu_per_s,
        quiet_s=churned.quiet_s,
        scraper=churned.scraper,
        plain=plain,
        gzip=gzip,
        wrk_cpu_per_s=cpu_wrk / wrk_s,
        reference_plain=peer_plain,
        reference_gzip=peer_gzip,
    )


def scrape_load(seconds: float) -> wrk.Load:
    """wrk as bench/run.py runs it."""
    return wrk.Load(threads=2, connections=16, seconds=max(1, round(seconds)))


def after_churn(server: procs.Server, pods: int, gpus: int) -> After:
    """The first view built wholly after the churn stopped: a build is told apart by its
    duration gauge changing, and it began after the stop if it ended later than its own
    build time plus RENDER_MARGIN_S after it (the view is read at the start of a cycle).
    When it does not hold `pods` pods and `gpus` allocated GPUs, the views after it are read
    too, up to AGREE_VIEWS in all: an event still on its way (the test server shares this
    process's GIL with the churn and may be seconds behind; the real one queues them under
    load) reaches a later view, a lost one never does."""
    stopped = time.monotonic()
    last = value(procs.http_text(server.metrics_url), BUILD)
    first: View | None = None
    views = 0
    while time.monotonic() - stopped < READY_TIMEOUT_S:
        text = procs.http_text(server.metrics_url)
        build_s, since = value(text, BUILD), time.monotonic() - stopped
        if build_s != last and since > build_s + RENDER_MARGIN_S:
            view = View(since, _pods(text), allocated(text))
            first, views = first or view, views + 1
            if (view.pods, view.allocated) == (pods, gpus):
                return After(first, view, views)
            if views >= AGREE_VIEWS:
                return After(first, None, views)
        last = build_s
        time.sleep(0.25)
    raise BenchError(f"no view built in the {READY_TIMEOUT_S:.0f}s after the churn")


def run(args: argparse.Namespace, work: Path) -> tuple[Figures, Neighbour | None]:
    reference.binary(say)  # built (or found) before anything else: Go missing fails at once
    gc.disable()
    began = time.monotonic()
    fleet = build(args.scale)
    built_s = time.monotonic() - began
    with KubeApiServer() as api:
        encoded = load(api, fleet)
        raw = sum(map(len, encoded))
        loaded_s = time.monotonic() - began - built_s
        counts = (len(fleet.nodes), len(fleet.pods), fleet.gpu_pods, fleet.pending_gpu_pods)
        quotas = len(fleet.quotas)
        churn = Churn(api, fleet, args.rate)
        fleet.pods.clear()  # the server holds its own copies; the churn keeps what it needs
        gc.freeze()
        gc.enable()
        say(f"{counts[1]:,} pods loaded in {built_s + loaded_s:.0f} s; timing the server's pages")
        per_page = page_cost(api, counts[1])
        empty_rss = empty_cluster_rss(work, args.interval)
        front = ListFront(("127.0.0.1", api.port), encoded, api.version)
        with front:
            url = api.url if args.direct else front.url
            kubeconfig = write_kubeconfig(work / "kubeconfig", url)
            port = procs.free_port()
            say(f"starting `kube-gpu-exporter cluster` against {url}")
            started = time.monotonic()
            argv = command(kubeconfig, port, args.interval)
            with (
                busy(args.neighbour) as neighbour,
                procs.running("cluster", argv, port, {}, work, "/healthz") as server,
            ):
                log = PageLog(api, None if args.direct else front)
                process = measure(server, log, started, churn, args.interval, work)
    figures = Figures(
        nodes=counts[0],
        pods=counts[1],
        gpu_pods=counts[2],
        pending_gpu_pods=counts[3],
        quotas=quotas,
        raw_json=raw,
        built_s=built_s,
        loaded_s=loaded_s,
        page_s=per_page,
        empty_rss=empty_rss,
        direct=args.direct,
        interval_s=args.interval,
        rate=args.rate,
        load=scrape_load(args.interval),
        process=process,
    )
    return figures, neighbour


def targets(f: Figures, neighbour: Neighbour | None) -> str:
    """The load the figures were taken under, and gzip's p99 against the reference's."""
    w = f.process.window
    ratio = w.gzip.p99_ms / w.reference_gzip.p99_ms
    load = neighbour.describe() if neighbour else "no neighbour (`--neighbour` not given)"
    return (
        f"Load on the machine: {load}. Under churn, gzip p99 ours ÷ Go's net/http serving the "
        f"same bytes: **{ratio:.2f}×** (target ≤ 2×: {'met' if ratio <= 2 else '**missed**'})."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="changes a second")
    parser.add_argument("--interval", type=float, default=15.0, help="--cluster.interval, s")
    parser.add_argument("--scale", type=float, default=1.0, help="cluster size factor (0.1: try)")
    parser.add_argument(
        "--direct", action="store_true", help="list from the test server itself (no front)"
    )
    parser.add_argument(
        "--neighbour", action="store_true", help="a busy loop per core beside the process"
    )
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    load_at_start = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as work:
            figures, neighbour = run(args, Path(work))
    except BenchError as exc:
        print(f"bench/cluster.py: {exc}", file=sys.stderr)
        return 1
    run_line, rest = render(figures, machine(load_at_start)).split("\n", 1)
    text = f"{run_line}\n\n{targets(figures, neighbour)}\n{rest}"
    print("\n" + text)
    if args.readme and not args.direct:  # the run line says the scale and the rate
        update_readme(README, text + "\n", START, END)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
