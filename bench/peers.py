"""`make bench`: the node exporter beside its peers, measured side by side in one run.

Four exporters read the same node (`--node`: 8 A100 × 7 MIG, 64 devices, or 8 whole H100s; the
fake libnvidia-ml through the real pynvml, bench/node.py): ours with attribution off (`serve
--collector.interval=5s --kubelet.pod-resources-socket=`), ours as deployed (the DaemonSet's
own flags read from deploy/daemonset.yaml, with a gRPC kubelet and an API server holding the
node's pods, bench/deployed.py), nvitop-exporter 1.7.2 (installed in a cache outside the
checkout by bench/peer_install.py) and prometheus-client's `start_http_server` over our
collector (bench/client_server.py). nvitop and ours with attribution off collect every 5 s; as
deployed, the manifest's interval. In order:

1. cold start to first data: spawn → first 200 /metrics naming every device, each exporter in
   turn, several times (the median is reported);
2. all started once more and left running: VmRSS at first data (as deployed: once every GPU
   pod is attributed);
3. all scraped once a second (gzip, as Prometheus asks) for a few minutes: the share of a core
   each used, VmRSS every 10 s (is it flat?); then body bytes plain and gzip. Beside them, the
   machine's floor (FLOOR): a Python asyncio loop that only wakes once a second, whose share
   of a core says what this machine charges for waking alone;
4. each in turn: its idle CPU rate without scrapes, then sequential scrapes plain and gzip;
   scrape CPU per request = (process CPU over the scrapes − idle rate × their time) ÷ N.

CPU is utime + stime of the whole process from /proc/<pid>/stat. Figures are reported beside
their targets (ratios to a peer's figure of the same run), never asserted.

    python bench/peers.py [--quick | --long] [--node a100-mig|h100] [--readme]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import peer_install
import procs
from deployed import DeployedNode, deployed_node
from errors import BenchError
from fake import FakeNode, prepare
from node import NODES
from peer_report import Figures, Run, ScrapeCpu, Settings, render, run_line
from peer_servers import Peer, Running, Scraper, peers, running, wait_first_data
from report import load_average, update_readme
from run import poller_cpu

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- peers:start -->", "<!-- peers:end -->"
# --long's hour has a section of its own: make bench's two minutes do not replace it
LONG_START, LONG_END = "<!-- peers-long:start -->", "<!-- peers-long:end -->"
LONG_S = 3600.0
# Ours, both ways: the exporters whose Xid watcher waits in the fake's nvmlEventSetWait
WATCHES_XIDS = ("ours", "deployed")
ALLOCATION_INFO = b"nvidia_gpu_allocation_info{"
API_UP = b"\nkube_gpu_exporter_kubernetes_api_up 1"
UUID = re.compile(rb"\b(?:GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--quick", action="store_true", help="a fast smoke run of every step")
    length.add_argument("--long", action="store_true", help="an hour at 1 scrape/s for RSS")
    parser.add_argument("--steady", type=float, help="seconds at 1 scrape/s (default 120)")
    parser.add_argument("--cold-starts", type=int, help="cold starts per exporter (default 5)")
    parser.add_argument("--idle", type=float, help="idle seconds before scrapes (default 20)")
    parser.add_argument("--scrapes", type=float, help="seconds of each scrape run (default 10)")
    parser.add_argument("--interval", type=int, default=5, help="collection interval, seconds")
    parser.add_argument("--node", choices=sorted(NODES), default="a100-mig", help="node layout")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    quick = args.quick
    steady = args.steady or (20.0 if quick else LONG_S if args.long else 120.0)
    settings = Settings(
        interval_s=args.interval,
        cold_starts=args.cold_starts or (2 if quick else 5),
        steady_s=steady,
        rss_every_s=5.0 if quick else 10.0 if steady <= 600 else 60.0,
        idle_s=args.idle or (6.0 if quick else 20.0),
        scrape_s=args.scrapes or (3.0 if quick else 10.0),
        node=args.node,
    )
    return settings, args.readme and not quick


def say(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", flush=True)


def device_uuids(node: FakeNode) -> frozenset[bytes]:
    """Every GPU and MIG UUID of the state file: first data names all of them."""
    return frozenset(UUID.findall(node.state.read_bytes()))


def cold_starts(
    all_peers: Sequence[Peer], node: FakeNode, uuids: frozenset[bytes], work: Path, times: int
) -> dict[str, list[float]]:
    """Spawn → first data, the exporters taking turns so that a load change hits them alike."""
    found: dict[str, list[float]] = {peer.key: [] for peer in all_peers}
    for attempt in range(times):
        for peer in all_peers:
            with running(peer, node.env, work) as server:
                seconds = wait_first_data(server, uuids)
            found[peer.key].append(seconds)
            say(f"cold start {attempt + 1}/{times}, {peer.name}: {seconds:.3f} s")
    return found


def samples(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def bodies(server: Running) -> tuple[int, int, int]:
    """Plain bytes, gzip bytes (as on the wire) and samples in the plain body."""
    scraper = Scraper(server.port)
    try:
        status, plain = scraper.get()
        gz_status, gzipped = scraper.get(gzip=True)
    finally:
        scraper.close()
    if status != 200 or gz_status != 200:
        raise BenchError(f"{server.peer.name}: /metrics answered {status} / {gz_status}")
    return len(plain), len(gzipped), samples(plain)


# The machine's floor (peer_report.floor): an asyncio loop that wakes once a second and does
# nothing else, measured over the same window as the exporters.
FLOOR = """
import asyncio

async def main():
    while True:
        await asyncio.sleep(1)

asyncio.run(main())
"""


@contextmanager
def floor_running() -> Iterator[Callable[[], float]]:
    """FLOOR running for the block; the callable gives its share of a core since the block
    began (its start and imports, before, are not the floor)."""
    proc = subprocess.Popen([sys.executable, "-c", FLOOR])
    try:
        time.sleep(2.0)
        before, started = procs.cpu_seconds(proc.pid), time.monotonic()
        yield lambda: (procs.cpu_seconds(proc.pid) - before) / (time.monotonic() - started)
    finally:
        proc.kill()
        proc.wait()


def steady(
    servers: Sequence[Running], seconds: float, rss_every_s: float
) -> dict[str, tuple[float, float, list[tuple[float, int]]]]:
    """All scraped once a second (gzip); per server: CPU s, the Xid watcher thread's CPU s
    (ours: the thread that sleeps most often, see run.poller_cpu) and (t, VmRSS) samples."""
    scrapers = [Scraper(s.port) for s in servers]
    cpu_before = [procs.cpu_seconds(s.pid) for s in servers]
    threads_before = [procs.thread_cpu(s.pid) for s in servers]
    rss: list[list[tuple[float, int]]] = [[(0.0, procs.rss_bytes(s.pid))] for s in servers]
    started = time.monotonic()
    tick, next_rss = 0, rss_every_s
    while (elapsed := time.monotonic() - started) < seconds:
        for scraper in scrapers:
            scraper.get(gzip=True)
        if elapsed >= next_rss:
            for server, track in zip(servers, rss, strict=True):
                track.append((elapsed, procs.rss_bytes(server.pid)))
            next_rss += rss_every_s
            if int(elapsed) % 60 < rss_every_s:
                say(f"  {elapsed:.0f} s: " + ", ".join(f"{t[-1][1] >> 10} KiB" for t in rss))
        tick += 1
        time.sleep(max(0.0, started + tick - time.monotonic()))
    elapsed = time.monotonic() - started
    found = {}
    for i, server in enumerate(servers):
        cpu = procs.cpu_seconds(server.pid) - cpu_before[i]
        poller = 0.0
        if server.peer.key in WATCHES_XIDS:
            poller = poller_cpu(server.pid, threads_before[i], procs.thread_cpu(server.pid))
        rss[i].append((elapsed, procs.rss_bytes(server.pid)))
        found[server.peer.key] = (cpu / elapsed, poller / elapsed, rss[i])
        scrapers[i].close()
    return found


def idle_rate(server: Running, seconds: float) -> float:
    """CPU seconds per second without scrapes: the collection loop's own cost."""
    before, started = procs.cpu_seconds(server.pid), time.monotonic()
    time.sleep(seconds)
    return (procs.cpu_seconds(server.pid) - before) / (time.monotonic() - started)


def scrape_cpu(server: Running, gzip: bool, seconds: float) -> ScrapeCpu:
    """Sequential scrapes for `seconds`: process CPU over them and how many there were."""
    scraper = Scraper(server.port)
    scraper.get(gzip=gzip)  # open the connection; a first ask may render on demand
    before, started, n = procs.cpu_seconds(server.pid), time.monotonic(), 0
    try:
        while time.monotonic() - started < seconds:
            status, _ = scraper.get(gzip=gzip)
            if status != 200:
                raise BenchError(f"{server.peer.name}: /metrics answered {status}")
            n += 1
    finally:
        scraper.close()
    return ScrapeCpu(n, procs.cpu_seconds(server.pid) - before, time.monotonic() - started)


def wait_attributed(server: Running, held: int) -> None:
    """Until /metrics attributes every device a GPU pod holds (the kubelet listed, a cycle ran)
    and the pod watch is up."""
    deadline = time.monotonic() + procs.START_TIMEOUT_SECONDS
    scraper = Scraper(server.port)
    try:
        while (found := (body := scraper.get()[1]).count(ALLOCATION_INFO)) < held or (
            API_UP not in body
        ):
            if time.monotonic() > deadline or server.proc.poll() is not None:
                raise BenchError(
                    f"{server.peer.name}: {found} of {held} devices attributed, API up: "
                    f"{API_UP in body} "
                    f"({server.last_log_line()})"
                )
            time.sleep(0.2)
    finally:
        scraper.close()


def measure(settings: Settings, work: Path, log: Callable[[str], None] = say) -> Run:
    nvitop = peer_install.nvitop_exporter(log)
    description, scenario = NODES[settings.node]
    node = prepare(work, scenario())
    uuids = device_uuids(node)
    with deployed_node(scenario().state_at(0), work) as deployed:
        log(f"as deployed: {' '.join(deployed.args)} ({deployed.pods} pods on the node)")
        all_peers = peers(nvitop, settings.interval_s, _deployed_peer(deployed))
        return _measure(settings, work, node, uuids, all_peers, deployed, description, log)


def _deployed_peer(deployed: DeployedNode) -> Peer:
    return Peer("deployed", "kube-gpu-exporter, as deployed", deployed.command, deployed.env)


def _measure(
    settings: Settings,
    work: Path,
    node: FakeNode,
    uuids: frozenset[bytes],
    all_peers: Sequence[Peer],
    deployed: DeployedNode,
    description: str,
    log: Callable[[str], None],
) -> Run:
    starts = cold_starts(all_peers, node, uuids, work, settings.cold_starts)
    first: dict[str, tuple[int, int, int, int]] = {}
    rss_first: dict[str, int] = {}
    costs: dict[str, tuple[float, ScrapeCpu, ScrapeCpu]] = {}
    with ExitStack() as stack:
        servers = []
        for peer in all_peers:
            server = stack.enter_context(running(peer, node.env, work))
            wait_first_data(server, uuids)
            if peer.key == "deployed":
                wait_attributed(server, deployed.held)
            rss_first[peer.key] = procs.rss_bytes(server.pid)
            servers.append(server)
        log(f"all {len(servers)} at 1 scrape/s for {settings.steady_s:.0f} s, the floor beside")
        with floor_running() as floor:
            at_one_per_s = steady(servers, settings.steady_s, settings.rss_every_s)
            floor_share = floor()
        for server in servers:
            # after the window: series that need two readings (rates) are in every body by now
            first[server.peer.key] = (rss_first[server.peer.key], *bodies(server))
        for server in servers:
            rate = idle_rate(server, settings.idle_s)
            plain = scrape_cpu(server, False, settings.scrape_s)
            gzipped = scrape_cpu(server, True, settings.scrape_s)
            costs[server.peer.key] = (rate, plain, gzipped)
            log(
                f"{server.peer.name}: idle {rate:.2%} of a core; {plain.n} plain scrapes "
                f"{plain.cpu_s:.2f} s CPU, {gzipped.n} gzip {gzipped.cpu_s:.2f} s"
            )
    figures = {
        key: Figures(starts[key], *first[key], *at_one_per_s[key], *costs[key]) for key in starts
    }
    return Run(
        settings,
        {p.key: p.name for p in all_peers},
        figures,
        len(uuids),
        description,
        deployed.args,
        (deployed.pods, deployed.gpu_pods),
        deployed.in_cluster,
        floor_share,
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings, write = parse_args(argv)
    load_at_start = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="kge-peers-") as work:
            result = measure(settings, Path(work))
    except (BenchError, OSError) as exc:
        print(f"peers: error: {exc}", file=sys.stderr)
        return 1
    text = render(result, run_line(load_at_start))
    print("\n" + text)
    if write:
        long = settings.steady_s >= LONG_S
        start, end = (LONG_START, LONG_END) if long else (START, END)
        if settings.node != "a100-mig":  # the other node's section
            start, end = (m.replace(" -->", f" {settings.node} -->") for m in (start, end))
        update_readme(README, text, start, end)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
