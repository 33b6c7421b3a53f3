"""`make bench`, cluster view on the real kube-apiserver: what changes when the server is real.

bench/cluster.py serves the pod list from pre-encoded JSON (bench/list_front.py), so its
figures are the process's own. Here the same fleet (bench/cluster_fleet.py) is created through
the API of a real etcd + kube-apiserver (tests/fakes/control_plane.py, no scheduler and no
controllers): nodes with their status (the API server keeps a Node's status on create), pods
bound by `spec.nodeName` then given their status through the `status` subresource, quotas
likewise, sixteen connections at a time. Then `kube-gpu-exporter cluster` starts on the
admin kubeconfig and is measured as in bench/cluster.py: the time to the first complete
metrics, VmRSS and CPU then, the build duration, and /metrics latency as Prometheus sees it
while the cluster is idle. The server's own paging (its watch cache, TLS, protobuf-free JSON
encoding of each page) is in the time to ready here, and is what differs from the front.

Figures are reported, never asserted. Usage:
    bench/cluster_real.py [--scale 1] [--interval 15] [--readme]

On the bench's two-core machine the real server creates about 200 pods a second (a create
and a status update each): the 50,000 take some four and a half minutes before anything is
measured; `--scale 0.2` (400 nodes, 10,000 pods) takes under one.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fake
import procs
import pytest
from cluster import READY_TIMEOUT_S, command, memory, say
from cluster_fleet import Fleet, build
from cluster_report import MIB, P99_TARGET_MS, RSS_TARGET, WATCHED, value
from errors import BenchError
from report import load_average, machine, update_readme
from scrape_client import BUILD, scrape_apart

sys.path.insert(0, str(fake.REPO / "tests"))  # control_plane imports the tests' support

from control_plane import ControlPlane, run_control_plane

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- cluster-real:start -->", "<!-- cluster-real:end -->"
CONNECTIONS = 16
MERGE = "application/merge-patch+json"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")


class Api:
    """Admin calls on one keep-alive TLS connection per thread."""

    def __init__(self, plane: ControlPlane) -> None:
        self._host, port = plane.url.removeprefix("https://").rsplit(":", 1)
        self._port = int(port)
        self._token = plane.token
        self._context = plane.ssl_context()
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=60
            )
            self._local.conn = conn
        return conn

    def call(self, method: str, path: str, body: Any, content_type: str) -> Any:
        data = json.dumps(body).encode()
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": content_type,
            "Accept": "application/json",
        }
        conn = self._conn()
        try:
            conn.request(method, path, data, headers)
            response = conn.getresponse()
            status, raw = response.status, response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._local.conn = None
            raise
        if status == 409 and method == "POST" and path.endswith("/namespaces"):
            return None  # the namespace is there already
        if not 200 <= status < 300:
            raise BenchError(f"{method} {path} -> {status}: {raw[:300]!r}")
        return json.loads(raw)


def fresh(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client creates it: without the fields the server sets."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_SET}
    return {**obj, "metadata": meta}


def _each(work: Callable[[dict[str, Any]], None], objects: Iterable[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        for _ in pool.map(work, objects):
            pass


@dataclass(frozen=True)
class Loaded:
    nodes_s: float
    pods_s: float
    quotas_s: float


def load(api: Api, fleet: Fleet) -> Loaded:
    """Namespaces, nodes (status kept on create, checked), pods then their status, quotas
    last (so that quota admission does not weigh on the pods) then their status."""
    namespaces = {o["metadata"]["namespace"] for o in [*fleet.pods, *fleet.quotas]}
    _each(
        lambda ns: api.call("POST", "/api/v1/namespaces", ns, "application/json"),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces),
    )
    began = time.monotonic()

    def node(obj: dict[str, Any]) -> None:
        made = api.call("POST", "/api/v1/nodes", fresh(obj), "application/json")
        if made.get("status", {}).get("allocatable") != obj["status"].get("allocatable"):
            path = f"/api/v1/nodes/{obj['metadata']['name']}/status"
            api.call("PATCH", path, {"status": obj["status"]}, MERGE)

    _each(node, fleet.nodes)
    nodes_s = time.monotonic() - began

    def namespaced(kind: str) -> Callable[[dict[str, Any]], None]:
        def create(obj: dict[str, Any]) -> None:
            base = f"/api/v1/namespaces/{obj['metadata']['namespace']}/{kind}"
            api.call("POST", base, fresh(obj), "application/json")
            path = f"{base}/{obj['metadata']['name']}/status"
            api.call("PATCH", path, {"status": obj["status"]}, MERGE)

        return create

    began = time.monotonic()
    _each(namespaced("pods"), fleet.pods)
    pods_s = time.monotonic() - began
    began = time.monotonic()
    _each(namespaced("resourcequotas"), fleet.quotas)
    return Loaded(nodes_s, pods_s, time.monotonic() - began)


@dataclass(frozen=True)
class Result:
    nodes: int
    pods: int
    raw_json: int
    loaded: Loaded
    ready_s: float
    cpu_ready_s: float
    rss_ready: int
    hwm_ready: int
    watched_pods: int
    first_build_s: float
    builds_s: list[float]
    idle_p50_ms: float
    idle_p99_ms: float
    idle_max_ms: float
    idle_scrapes: int
    idle_cpu_per_s: float
    apiserver_rss: int


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


def apiserver_pid(plane: ControlPlane) -> int:
    port = plane.url.rsplit(":", 1)[1]
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = status.read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"kube-apiserver")
            and f"--secure-port={port}".encode() in argv
        ):
            return int(status.parent.name)
    raise BenchError("kube-apiserver process not found")


def run(args: argparse.Namespace, work: Path) -> Result:
    fleet = build(args.scale)
    raw = sum(len(json.dumps(p)) for p in fleet.pods)
    with run_control_plane(work / "plane", timeout=180) as plane:
        api = Api(plane)
        say(f"creating {len(fleet.nodes):,} nodes and {len(fleet.pods):,} pods through the API")
        loaded = load(api, fleet)
        say(f"created: nodes {loaded.nodes_s:.0f} s, pods {loaded.pods_s:.0f} s")
        pods = len(fleet.pods)
        fleet.pods.clear()
        port = procs.free_port()
        started = time.monotonic()
        argv = command(plane.kubeconfig, port, args.interval)
        with procs.running("cluster-real", argv, port, {}, work, "/healthz") as server:
            pid = server.proc.pid
            ready_s = wait_complete(server, started, pods)
            cpu_ready = procs.cpu_seconds(pid)
            rss_ready, hwm_ready = memory(pid)
            text = procs.http_text(server.metrics_url)
            say(f"complete after {ready_s:.1f} s; scraping every 50 ms for {3 * args.interval:g} s")
            cpu_idle, began = procs.cpu_seconds(pid), time.monotonic()
            idle = scrape_apart(server.port, 3 * args.interval)
            idle_cpu = (procs.cpu_seconds(pid) - cpu_idle) / (time.monotonic() - began)
            scrapes = idle.all()
            latencies = sorted(scrapes.latencies_ms)
            return Result(
                nodes=len(fleet.nodes),
                pods=pods,
                raw_json=raw,
                loaded=loaded,
                ready_s=ready_s,
                cpu_ready_s=cpu_ready,
                rss_ready=rss_ready,
                hwm_ready=hwm_ready,
                watched_pods=int(value(text, WATCHED.format(resource="pods"))),
                first_build_s=value(text, BUILD),
                builds_s=[c.build_s for c in idle.cycles],
                idle_p50_ms=latencies[len(latencies) // 2],
                idle_p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
                idle_max_ms=latencies[-1],
                idle_scrapes=len(latencies),
                idle_cpu_per_s=idle_cpu,
                apiserver_rss=memory(apiserver_pid(plane))[0],
            )


def render(r: Result, scale: float, when: str, interval_s: float) -> str:
    per_k = r.first_build_s / r.pods * 1000 * 1000
    builds = ", ".join(f"{b * 1000:.0f}" for b in r.builds_s) or "none"
    rate = r.pods / r.loaded.pods_s if r.loaded.pods_s else 0.0
    lines = [
        f"Measured {when}.",
        "",
        f"Cluster: {r.nodes:,} nodes, {r.pods:,} pods (scale {scale:g} of bench/cluster_fleet.py;"
        f" the pods' JSON {r.raw_json / MIB:.1f} MiB), created through the real kube-apiserver"
        f" v1.37.2 over etcd v3.7.3 with {CONNECTIONS} connections: nodes in"
        f" {r.loaded.nodes_s:.0f} s, pods (create, then status) in {r.loaded.pods_s:.0f} s"
        f" ({rate:.0f} pods/s), quotas in {r.loaded.quotas_s:.1f} s."
        f" `--cluster.interval={interval_s:g}s`; no churn.",
        "",
        "| figure | real kube-apiserver | target |",
        "|---|---|---|",
        f"| start → first complete metrics (/readyz, every pod watched) | {r.ready_s:.1f} s | |",
        f"| CPU seconds of the process by then | {r.cpu_ready_s:.1f} s | |",
        f"| VmRSS then (VmHWM) | {r.rss_ready / MIB:.1f} MiB ({r.hwm_ready / MIB:.1f} MiB)"
        f" | < {RSS_TARGET // MIB} MiB: {'met' if r.rss_ready < RSS_TARGET else 'missed'} |",
        f"| pods watched then | {r.watched_pods:,} of {r.pods:,} | |",
        f"| first build duration | {r.first_build_s * 1000:.0f} ms ({per_k:.1f} ms per 1,000"
        " pods) | |",
        f"| builds while idle, ms | {builds} | |",
        f"| CPU while idle, a scrape every 50 ms | {r.idle_cpu_per_s:.3f} s/s | |",
        f"| /metrics gzip, idle: {r.idle_scrapes} scrapes, p50 / p99 / max"
        f" | {r.idle_p50_ms:.1f} / {r.idle_p99_ms:.1f} / {r.idle_max_ms:.1f} ms"
        f" | p99 < {P99_TARGET_MS:g} ms: {'met' if r.idle_p99_ms < P99_TARGET_MS else 'missed'} |",
        f"| kube-apiserver VmRSS at the end | {r.apiserver_rss / MIB:.0f} MiB | |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    text = render(result, args.scale, machine(load_at_start), args.interval)
    print("\n" + text)
    if args.readme:
        update_readme(README, text + "\n", START, END)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
