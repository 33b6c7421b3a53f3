"""The cluster view's cost per cycle, in one process: a full build against one cycle of 100
changes applied incrementally, at Kubernetes' published limits (5,000 nodes, 150,000 pods).

The cluster is bench/cluster_fleet.py's at `--scale` 2.5 (5,000 nodes, 125,000 pods: GPU
pools, pending GPU pods for four reasons, 40 GPU quotas) topped up with pods without GPUs to
`--pods`. Each object is made as the API server serves it and parsed as the watches parse it
(`parse_node`, `parse_pod`, the pod watch's filter), then held in `HeldObjects` as a list
leaves it; the heap is frozen as the cluster loop freezes it after a list. Then:

1. full build: what the loop did each cycle before, `take()` and `ClusterView.build` of
   every object, `--repeat` times;
2. rebuild: `IncrementalView.update` right after a (re)list, once;
3. incremental: `--cycles` cycles, each after `--changes` changes applied through
   `HeldObjects.store` as the watch threads apply events (bench/cluster_churn.py's mix:
   pods created, started and deleted, GPU pods created pending, bound and deleted, node
   labels and Ready flipped), timing `take()` and `IncrementalView.update` only: the
   events' parsing and storing is the watch threads' work, reported apart;
4. what every cycle costs either way after the view: the families (classification
   included) and the plain text body, once.

Wall-clock (`time.perf_counter`) and this thread's CPU time (`time.thread_time`) around each
step, in this process alone (no server, no other thread); figures are medians and maxima,
printed, never asserted. At the end the incremental view is checked against a full build of
the same objects. Usage:
    bench/cluster_incremental.py [--scale 2.5] [--pods 150000] [--changes 100] [--cycles 20]
"""

from __future__ import annotations

import argparse
import copy
import gc
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cluster_fleet import Fleet, build, cpu_pod, gpu_pod, running_status
from report import load_average

from cluster_objects import H100, PRODUCT
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS, ClusterView, Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.incremental_view import IncrementalView
from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod, parse_quota
from kube_gpu_exporter.exporter.cluster.view_changes import HeldObjects
from kube_gpu_exporter.exporter.exposition.cluster_families import ClusterState, cluster_families
from kube_gpu_exporter.exporter.exposition.render import Demand, FamiliesBody

SETTINGS = DEFAULT_SETTINGS


def say(message: str) -> None:
    print(f"[cluster-incremental {time.strftime('%H:%M:%S')}] {message}", flush=True)


def held_pod(obj: Mapping[str, Any]) -> tuple[str, Pod | None]:
    """As the pod watch holds a pod (watches.py's `_pod`): ended ones and pending ones
    without a GPU are not held."""
    pod = parse_pod(obj)
    assert pod is not None
    key = f"{pod.namespace}/{pod.name}"
    if pod.terminated or (pod.unscheduled and not SETTINGS.gpu_part(pod.requests)):
        return key, None
    return key, pod


class Cluster:
    """The three resources as the watches hold them, and the churn's changes to them."""

    def __init__(self, fleet: Fleet, pods: int) -> None:
        self.nodes: HeldObjects[Node] = HeldObjects()
        self.pods: HeldObjects[Pod] = HeldObjects()
        self.quotas: HeldObjects[Quota] = HeldObjects()
        nodes = {n.name: n for n in map(parse_node, fleet.nodes) if n is not None}
        self.names = list(nodes)
        held: dict[str, Pod] = {}
        for obj in fleet.pods:
            key, pod = held_pod(obj)
            if pod is not None:
                held[key] = pod
        serial = itertools.count(len(fleet.pods))
        while len(held) < pods:
            n = next(serial)
            key, pod = held_pod(cpu_pod(f"web-{n}", self.names[n % len(self.names)], n))
            assert pod is not None
            held[key] = pod
        quotas = {}
        for obj in fleet.quotas:
            quota = parse_quota(obj, SETTINGS)
            assert quota is not None
            quotas[f"{quota.namespace}/{quota.name}"] = quota
        self.nodes.publish(nodes)
        self.pods.publish(held)
        self.quotas.publish(quotas)
        self._node_items, self._pod_items = nodes, held  # the dicts the watches' events change
        self._old = [k for k in held if k.split("/", 1)[1].startswith("web-")]
        self._free = list(fleet.free_h100)
        self._flipped = [copy.deepcopy(n) for n in fleet.nodes[-16:]]
        self._serial = itertools.count(10_000_000)
        self._starting: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._bound: list[dict[str, Any]] = []

    def changes(self, count: int) -> Iterator[Callable[[], None]]:
        """`count` changes in bench/cluster_churn.py's proportions (10:10:10:4:4:4:4:4)."""
        mix = ["create", "start", "delete"] * 10 + ["gpu_create", "gpu_bind", "gpu_delete"] * 4
        mix += ["node_label", "node_ready"] * 4
        for step in itertools.islice(itertools.cycle(mix), count):
            yield getattr(self, f"_{step}")

    def _pod(self, obj: dict[str, Any]) -> None:
        key, pod = held_pod(obj)
        self.pods.store(self._pod_items, key, pod)

    def _create(self) -> None:
        n = next(self._serial)
        obj = cpu_pod(f"web-{n}", self.names[n % len(self.names)], n)
        obj["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]}
        self._pod(obj)
        self._starting.append(obj)

    def _start(self) -> None:
        if self._starting:
            obj = self._starting.pop(0)
            obj["status"] = running_status(next(self._serial), obj["spec"]["nodeName"])
            self._pod(obj)

    def _delete(self) -> None:
        self.pods.store(self._pod_items, self._old.pop(0), None)

    def _gpu_create(self) -> None:
        n = next(self._serial)
        obj = gpu_pod(f"churn-{n}", 1, "", n, node_selector={PRODUCT: H100})
        self._pod(obj)
        self._pending.append(obj)

    def _gpu_bind(self) -> None:
        if self._pending and self._free:
            obj, node = self._pending.pop(0), self._free.pop(0)
            obj["spec"]["nodeName"] = node
            obj["status"] = running_status(next(self._serial), node)
            self._pod(obj)
            self._bound.append(obj)

    def _gpu_delete(self) -> None:
        if len(self._bound) > 8:
            obj = self._bound.pop(0)
            meta = obj["metadata"]
            self.pods.store(self._pod_items, f"{meta['namespace']}/{meta['name']}", None)
            self._free.append(obj["spec"]["nodeName"])

    def _node_label(self) -> None:
        obj = self._flipped[next(self._serial) % len(self._flipped)]
        labels = obj["metadata"]["labels"]
        if labels.pop("cloud.example.com/maintenance", None) is None:
            labels["cloud.example.com/maintenance"] = "scheduled"
        self._node(obj)

    def _node_ready(self) -> None:
        obj = self._flipped[next(self._serial) % len(self._flipped)]
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        ready["status"] = "False" if ready["status"] == "True" else "True"
        self._node(obj)

    def _node(self, obj: dict[str, Any]) -> None:
        node = parse_node(obj)
        assert node is not None
        self.nodes.store(self._node_items, node.name, node)


@dataclass(frozen=True)
class Took:
    """One step's wall-clock and CPU time (this thread's: on a shared machine the CPU time
    is the steadier figure, the wall-clock one counts the waits for a core too)."""

    wall: float
    cpu: float


def timed(action: Callable[[], Any]) -> tuple[Took, Any]:
    wall, cpu = time.perf_counter(), time.thread_time()
    result = action()
    return Took(time.perf_counter() - wall, time.thread_time() - cpu), result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def spread(samples: list[Took]) -> str:
    """Medians and maxima of CPU and wall-clock time."""
    cpu, wall = [t.cpu for t in samples], [t.wall for t in samples]
    return (
        f"CPU median {ms(statistics.median(cpu))}, max {ms(max(cpu))}; wall median "
        f"{ms(statistics.median(wall))}, max {ms(max(wall))} (n={len(samples)})"
    )


def run(args: argparse.Namespace) -> None:
    gc.disable()
    say(f"building the fleet at scale {args.scale:g} and parsing it")
    fleet = build(args.scale)
    cluster = Cluster(fleet, args.pods)
    del fleet
    gc.collect()
    gc.freeze()  # as the cluster loop does after a list
    gc.enable()
    nodes, pods = len(cluster.nodes.items), len(cluster.pods.items)
    say(f"{nodes:,} nodes, {pods:,} pods held, {len(cluster.quotas.items)} quotas")

    def full() -> ClusterView:
        n, p, q = cluster.nodes.take(), cluster.pods.take(), cluster.quotas.take()
        return ClusterView.build(n.values, p.values, q.values, SETTINGS)

    builds = [timed(full)[0] for _ in range(args.repeat)]
    say(f"full build: {spread(builds)}")
    view = IncrementalView(SETTINGS)

    def update() -> ClusterView:
        return view.update(cluster.nodes.take(), cluster.pods.take(), cluster.quotas.take())

    rebuild_s, latest = timed(update)
    say(f"rebuild after a list: {spread([rebuild_s])}")
    cycles, applying, cycle_families = [], [], []
    for _ in range(args.cycles):
        steps = list(cluster.changes(args.changes))
        applying.append(timed(lambda steps=steps: [step() for step in steps])[0])
        took, latest = timed(update)
        cycles.append(took)
        state = ClusterState(latest, {}, time.time())
        cycle_families.append(timed(lambda state=state: list(cluster_families(state)))[0])
    say(f"incremental, {args.changes} changes a cycle: {spread(cycles)}")
    say(f"  (the watch threads' parsing and storing of those changes: {spread(applying)})")
    say(f"  then the families, as the loop makes them each cycle: {spread(cycle_families)}")
    assert view.rebuilds == 1
    check(latest, full())
    state = ClusterState(latest, {}, time.time())
    families_s, families = timed(lambda: list(cluster_families(state)))
    render_s, body = timed(lambda: FamiliesBody(families, Demand()).body("", gzipped=False)[0])
    say(f"after the view, either way: families {spread([families_s])}")
    say(f"  and the plain body: {spread([render_s])}")
    print(
        f"\n{nodes:,} nodes, {pods:,} pods; {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average at start {args.load}, at end "
        f"{load_average()}\n"
        f"full build (take + ClusterView.build): {spread(builds)}\n"
        f"rebuild after a list (IncrementalView): {spread([rebuild_s])}\n"
        f"one cycle of {args.changes} changes (take + update): {spread(cycles)}\n"
        f"the families after each of those cycles: {spread(cycle_families)}\n"
        f"then either way, families: {spread([families_s])}\n"
        f"and the plain body ({len(body):,} bytes): {spread([render_s])}"
    )


def check(view: ClusterView, built: ClusterView) -> None:
    """The incremental view after every cycle is the full build of the same objects."""
    assert list(view.nodes) == list(built.nodes)
    for name, state in view.nodes.items():
        assert dict(state.allocated) == dict(built.nodes[name].allocated), name
        assert state.node is built.nodes[name].node, name
    assert dict(view.advertised) == dict(built.advertised)
    assert {id(p) for p in view.pending} == {id(p) for p in built.pending}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=2.5, help="the fleet's size factor")
    parser.add_argument("--pods", type=int, default=150_000, help="pods held, topped up")
    parser.add_argument("--changes", type=int, default=100, help="changes a cycle")
    parser.add_argument("--cycles", type=int, default=20, help="incremental cycles timed")
    parser.add_argument("--repeat", type=int, default=5, help="full builds timed")
    args = parser.parse_args(argv)
    args.load = load_average()
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
