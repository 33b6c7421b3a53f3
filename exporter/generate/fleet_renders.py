"""The bodies the fleet cost is counted from: a node and a cluster view rendered by the real code.

The node is an HGX H100 (8 GPUs, every reading NVML gives, GPM, 18 NVLinks), whole or with each
GPU split into seven 1g.10gb MIG instances, played by the simulated backend and put through the
collection loop as `serve` runs it in the generated DaemonSet: every device held by one pod
(the kubelet's listing), the pod watch on (`--kubernetes.enabled`: owners), the PCI bus read.
No clock reaches a body, so that its bytes, which `generate --check` compares, are the same on
every run: the sampler and the collection loop read their wall clock as `NOW` (every Unix time
served: the cycle's, a GPU's needed action's "since"), and the cycle's duration, which the loop
times on the monotonic clock, is pinned. The cluster view is the same fleet's nodes, every GPU
held by a running pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from kube_gpu_exporter.exporter.attribution.source import AttributionSource, DirectorySource
from kube_gpu_exporter.exporter.catalog.errors import KUBERNETES_ERROR_KINDS
from kube_gpu_exporter.exporter.cluster.objects import Node, Pod
from kube_gpu_exporter.exporter.cluster.transitions import Histogram, TransitionCounts
from kube_gpu_exporter.exporter.cluster.view import ClusterView
from kube_gpu_exporter.exporter.exposition.cluster_families import (
    ClusterState,
    WatchHealth,
    cluster_families,
)
from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat
from kube_gpu_exporter.exporter.exposition.render import FamiliesBody, render
from kube_gpu_exporter.exporter.kubelet.listing import ContainerAllocation, Listing
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioSpec
from kube_gpu_exporter.exporter.snapshot import DeviceSample, Holder

GPUS = 8  # an HGX board
MIG_PER_GPU = 7  # 1g.10gb instances of an H100 80GB
MIG_PROFILE = "1g.10gb"
FIRST_GPU_INSTANCE_ID = 9
NVLINKS = 18  # an H100 SXM's
PRODUCT = "NVIDIA-H100-80GB-HBM3"
NOW = 1_790_000_000.0  # the wall clock of every render
DURATION = 0.0125  # a cycle's duration as served (its digits count in the bytes)
CLUSTER_WATCHES = ("events", "nodes", "pods", "resourcequotas")


def node_scenario(mig: bool) -> Scenario:
    """The HGX H100 node, whole or every GPU in seven MIG instances."""

    def gpu(index: int) -> dict[str, Any]:
        slices = [
            {
                "profile": MIG_PROFILE,
                "gpu_instance_id": FIRST_GPU_INSTANCE_ID + slot,
                "memory_total_bytes": 10240 << 20,
            }
            for slot in range(MIG_PER_GPU if mig else 0)
        ]
        return {"nvlink_links": NVLINKS, "mig": slices, "energy_joules": 1e6 * (index + 1)}

    spec = ScenarioSpec.model_validate(
        {"driver_version": "570.124.06", "devices": [gpu(i) for i in range(GPUS)]}
    )
    return Scenario(spec, source="exporter/generate/fleet_renders.py")


class _Kubelet:
    """A pod-resources watcher whose last listing holds every device, one pod each."""

    def __init__(self, devices: tuple[DeviceSample, ...]) -> None:
        held = [d for d in devices if d.identity.is_mig or not _has_mig(d, devices)]
        allocations = tuple(
            ContainerAllocation("ml", f"train-{i}-0", "main", _resource(d), (d.identity.uuid,))
            for i, d in enumerate(held)
        )
        allocatable: dict[str, tuple[str, ...]] = {}
        for allocation in allocations:
            allocatable.setdefault(allocation.resource, ())
            allocatable[allocation.resource] += allocation.device_ids
        self.latest = Listing(allocations, (), allocatable)
        self.up = True
        self.last_success = NOW
        self.errors_total: Mapping[str, int] = {}


def _has_mig(device: DeviceSample, devices: tuple[DeviceSample, ...]) -> bool:
    return any(d.identity.parent_uuid == device.identity.uuid for d in devices)


def _resource(device: DeviceSample) -> str:
    return f"nvidia.com/mig-{MIG_PROFILE}" if device.identity.is_mig else "nvidia.com/gpu"


class _PodWatch(DirectorySource):
    """`--kubernetes.enabled`: every pod a Job's, both watches up, their error kinds at 0."""

    def directory(self) -> _PodWatch:
        return self

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return {"owner_kind": "Job", "owner_name": holder.pod.rsplit("-", 1)[0]}

    def owner_of_process(self, pid: int) -> Holder | None:
        return None

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        return None

    @property
    def up(self) -> bool | None:
        return True

    @property
    def errors_total(self) -> Mapping[str, int]:
        kinds = dict.fromkeys(KUBERNETES_ERROR_KINDS, 0)
        return kinds | {f"resourceslices_{kind}": 0 for kind in KUBERNETES_ERROR_KINDS}


class _PciBus:
    """The node's PCI bus: its eight GPUs."""

    def gpus(self) -> int:
        return GPUS


def node_body(mig: bool, dcgm: bool = False) -> bytes:
    """The plain text body of the node, with dcgm-exporter's classic names when `dcgm`."""
    scenario = node_scenario(mig)
    sampler = SimulatedSampler(scenario, clock=lambda: 0.0, wall_clock=lambda: NOW)
    devices = sampler.sample().devices
    attribution = AttributionSource(cast(Any, _Kubelet(devices)), _PodWatch())
    bus = cast(Any, _PciBus())
    loop = CollectionLoop(sampler, 10, attribution, pci_bus=bus, wall_clock=lambda: NOW)
    snapshot = loop.cycle().snapshot
    exporter = dataclasses.replace(snapshot.exporter, collection_duration_seconds=DURATION)
    snapshot = dataclasses.replace(snapshot, exporter=exporter)
    extra = DcgmCompat(hostname="gpu-node-0").families(snapshot) if dcgm else ()
    body, _ = render(snapshot, extra).body("", gzipped=False)
    return body


def cluster_body(nodes: int, scheduled_namespaces: int = 0) -> bytes:
    """The cluster view's plain body over `nodes` HGX nodes whose GPUs running pods hold all,
    nothing pending, no quota; `scheduled_namespaces` namespaces whose pods the view saw wait
    and be scheduled (each has a wait histogram)."""
    gpu = {"nvidia.com/gpu": GPUS, "cpu": 192_000, "memory": 2 << 40, "pods": 110}
    names = [f"gpu-node-{i}" for i in range(nodes)]
    fleet = [Node(n, {"nvidia.com/gpu.product": PRODUCT}, allocatable=gpu) for n in names]
    pods = [
        Pod("ml", f"train-{n}-{g}", phase="Running", node_name=n, requests={"nvidia.com/gpu": 1})
        for n in names
        for g in range(GPUS)
    ]
    view = ClusterView.build(fleet, pods)
    objects = {"events": 0, "nodes": len(fleet), "pods": len(pods), "resourcequotas": 0}
    watches = {
        name: WatchHealth(True, dict.fromkeys(KUBERNETES_ERROR_KINDS, 0), objects[name])
        for name in CLUSTER_WATCHES
    }
    transitions = TransitionCounts(_waits(scheduled_namespaces), {})
    state = ClusterState(view, watches, NOW, None, transitions, {})
    return FamiliesBody(list(cluster_families(state))).body("", gzipped=False)[0]


def _waits(namespaces: int) -> dict[tuple[str, str], Histogram]:
    """One observed scheduling wait in each of `namespaces` namespaces."""
    out = {}
    for i in range(namespaces):
        histogram = Histogram()
        histogram.observe(42.0)
        out[(f"team-{i}", "nvidia.com/gpu")] = histogram
    return out
