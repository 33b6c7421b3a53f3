"""`make bench`: what `--kubernetes.enabled` costs the node exporter, and each 1,000 pods on its
node.

`serve` runs over the bench's 64-device fake NVML with the kubelet (a real gRPC pod-resources
server, `FakeKubelet`: the watches start with attribution) and the pod and ResourceSlice
watches on the test API server (`KubeApiServer`: real HTTP list and watch), whose node holds
0, then 10,000 pods as a kubelet would list them (labels, a ReplicaSet owner, two containers
with their ids), and beside it the same exporter without the watches. VmRSS from
`/proc/<pid>/status` once the API watch reports up and a few collection cycles later.
Targets: ≤ 65 MiB with the watch on; memory per 1,000 pods half of the 5.1 MiB measured before
the node's list was decoded an item at a time.

Figures are reported, never asserted. Usage: bench/pod_watch.py [--pods 10000] [--readme]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import fake
import node
from procs import free_port, rss_bytes
from report import load_average, machine, update_readme

sys.path.insert(0, str(fake.REPO / "tests" / "fakes"))

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod
from kubelet_server import FakeKubelet, kubelet_args

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- pod-watch:start -->", "<!-- pod-watch:end -->"
MIB = 1 << 20
SETTLE_S = 12.0  # a few 5 s collection cycles after the watch is up
TARGET_MIB = 65.0
BEFORE_PER_1000_MIB = 5.1  # 119 − 68 MiB for 10,000 pods, json.loads of the whole list


def say(message: str) -> None:
    print(f"[pod-watch {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _pod(i: int) -> dict[str, object]:
    return make_pod(
        f"trainer-7d9f8c-{i:05d}",
        f"team-{i % 20}",
        labels={
            "app": "trainer",
            "pod-template-hash": "7d9f8c",
            "team": f"t{i % 20}",
            "app.kubernetes.io/name": "trainer",
            "app.kubernetes.io/instance": f"run-{i % 50}",
            "version": "v1.2.3",
        },
        owner=("ReplicaSet", "trainer-7d9f8c"),
        containers={
            "main": f"containerd://{i:064x}",
            "sidecar": f"containerd://{i + 10**6:064x}",
        },
    )


def _serve(env: dict[str, str], args: Sequence[str], ready: str) -> tuple[float, float]:
    """(VmRSS once `ready` is in /metrics, VmRSS `SETTLE_S` later) of one exporter run."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "kube_gpu_exporter.exporter", "serve",
            "--collector.interval=5s", f"--web.listen-address=127.0.0.1:{port}", *args,
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                if ready in urllib.request.urlopen(url, timeout=2).read().decode():
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit(f"bench/pod_watch.py: the exporter never served {ready!r}")
        first = rss_bytes(proc.pid) / MIB
        time.sleep(SETTLE_S)
        return first, rss_bytes(proc.pid) / MIB
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000, help="pods on the node")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    options = parser.parse_args(argv)
    load_at_start = load_average()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-pod-watch-") as work:
        folder = Path(work)
        env = {**os.environ, **fake.prepare(folder, node.node_scenario()).env}
        with FakeKubelet(folder / "kubelet.sock") as _kubelet:
            kubelet = kubelet_args(folder / "kubelet.sock", "5s")
            say("the exporter with the kubelet, no API watch")
            rows.append(("kubelet only", *_serve(env, kubelet, "nvidia_gpu_up")))
            for pods in (0, options.pods):
                with KubeApiServer() as api:
                    for i in range(pods):
                        api.put(_pod(i))
                    config = api.write_kubeconfig(folder / f"kubeconfig-{pods}")
                    say(f"the exporter with the pod watch, {pods:,} pods on its node")
                    watch = [
                        *kubelet, "--kubernetes.enabled", f"--kubernetes.kubeconfig={config}",
                        f"--kubernetes.node-name={NODE}", "--kubernetes.pod-labels=team",
                    ]  # fmt: skip
                    up = "kube_gpu_exporter_kubernetes_api_up 1"
                    rows.append((f"pod watch, {pods:,} pods", *_serve(env, watch, up)))
    text = _render(rows, options.pods, machine(load_at_start))
    print("\n" + text)
    if options.readme:
        update_readme(README, text + "\n", START, END)
        say(f"results written to {README}")
    return 0


def _render(rows: list[tuple[str, float, float]], pods: int, run: str) -> str:
    (_, _, base), (_, _, empty), (_, _, full) = rows
    per_1000 = (full - empty) / pods * 1000
    lines = [
        f"Run: {run}",
        "",
        "64 devices on the fake NVML, the kubelet's pod-resources served by FakeKubelet, the "
        "API by the test server; VmRSS once ready and 12 s later.",
        "",
        "| exporter | VmRSS ready | VmRSS 12 s later | target |",
        "|---|---:|---:|---|",
    ]
    for name, first, later in rows:
        target = ""
        if name.startswith("pod watch, 0"):
            met = "met" if later <= TARGET_MIB else "**missed**"
            target = f"≤ {TARGET_MIB:g} MiB: {met}"
        lines.append(f"| {name} | {first:.1f} MiB | {later:.1f} MiB | {target} |")
    met = "met" if per_1000 <= BEFORE_PER_1000_MIB / 2 else "**missed**"
    lines += [
        "",
        f"The watch adds {empty - base:.1f} MiB; each 1,000 pods on the node {per_1000:.2f} MiB "
        f"(half of the {BEFORE_PER_1000_MIB} MiB before: {met}).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
