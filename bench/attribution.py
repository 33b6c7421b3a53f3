"""Pod attribution in this process: CPU per `attribute()` call, RSS under pod churn.

The node is `node.attribution_scenario()`: 56 MIG instances each held by one pod
(`nvidia.com/mig-1g.10gb`) and one whole GPU shared by ten time-slicing replicas
(`<uuid>::0..9`, `nvidia.com/gpu`), 66 pods in all. The pods are built as the kubelet sends
them (tests/fakes/kubelet_server.py's builders), serialized by protobuf and read back by the
client's own wire.py and `parse_allocations` / `parse_allocatable`, so what `attribute()` sees
here is exactly what the exporter gets from a real kubelet; the same pods are served over gRPC
by `FakeKubelet` for the scrape run (bench/run.py).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from cycles import RssTrack
from errors import BenchError
from node import MIG_PROFILE, SHARED_FIRST_PID, SHARED_REPLICAS
from procs import rss_bytes

from kube_gpu_exporter.exporter.attribution.attribute import NoPodDirectory, PodDirectory, attribute
from kube_gpu_exporter.exporter.attribution.source import AttributionSource, DirectorySource
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS
from kube_gpu_exporter.exporter.kubelet.client import PodResourcesWatcher
from kube_gpu_exporter.exporter.kubelet.listing import (
    Listing,
    ResourceFilter,
    parse_allocatable,
    parse_allocations,
)
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2
from kube_gpu_exporter.exporter.kubelet.wire import decode_allocatable, decode_list
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.scenario import NodeState
from kube_gpu_exporter.exporter.snapshot import AttributionSample, DeviceSample, Holder, NodeSample
from kubelet_server import container, devices, pod

NAMESPACE = "bench"
CONTAINER = "main"
MIG_RESOURCE = f"nvidia.com/mig-{MIG_PROFILE}"
GPU_RESOURCE = "nvidia.com/gpu"
WARMUP_CALLS = 20
CHURN_WARMUP_CYCLES = 50
CHECKPOINTS = 10
# Growth of the bench process over the churn run that counts as no leak (the target).
CHURN_GROWTH_TARGET_BYTES = 1_000_000
# The first MIG instance's pod is the one that comes and goes in the churn run.
CHURNED_SLOT = 0


# --- the node's pods -------------------------------------------------------------------------


def _shared_gpu(state: NodeState) -> str:
    return next(d.uuid for d in state.devices if not d.mig)


def _mig_pod_name(gpu: int, slot: int) -> str:
    return f"mig-{gpu}-{slot}"


def node_pods(state: NodeState, gpus: Collection[int] | None = None) -> list[api_pb2.PodResources]:
    """One pod per MIG instance, and one per time-slicing replica of the shared GPU.

    `gpus` keeps only the MIG pods of those GPU indexes (the replicas are always kept).
    """
    pods = [
        pod(
            NAMESPACE,
            _mig_pod_name(gpu.index, slot),
            container(CONTAINER, devices(MIG_RESOURCE, mig.uuid, numa=gpu.index // 4)),
        )
        for gpu in state.devices
        if gpus is None or gpu.index in gpus
        for slot, mig in enumerate(gpu.mig)
    ]
    shared = _shared_gpu(state)
    pods += [
        pod(
            NAMESPACE,
            f"shared-{replica}",
            container(CONTAINER, devices(GPU_RESOURCE, f"{shared}::{replica}", numa=1)),
        )
        for replica in range(SHARED_REPLICAS)
    ]
    return pods


def node_allocatable(
    state: NodeState, gpus: Collection[int] | None = None
) -> list[api_pb2.ContainerDevices]:
    """What GetAllocatableResources answers: every MIG instance and every replica."""
    shared = _shared_gpu(state)
    migs = (
        mig.uuid for gpu in state.devices if gpus is None or gpu.index in gpus for mig in gpu.mig
    )
    return [
        devices(MIG_RESOURCE, *migs),
        devices(GPU_RESOURCE, *(f"{shared}::{r}" for r in range(SHARED_REPLICAS))),
    ]


def parse_listing(
    pods: Sequence[api_pb2.PodResources], allocatable: Sequence[api_pb2.ContainerDevices]
) -> Listing:
    """The kubelet's answer turned into a Listing by the client's own parsers."""
    wanted = ResourceFilter(DEFAULT_RESOURCE_PATTERNS)
    listed = api_pb2.ListPodResourcesResponse(pod_resources=pods).SerializeToString()
    allocations, dra = parse_allocations(decode_list(listed), wanted)
    answer = api_pb2.AllocatableResourcesResponse(devices=allocatable).SerializeToString()
    return Listing(allocations, dra, parse_allocatable(decode_allocatable(answer), wanted))


class SharedGpuDirectory:
    """A PodDirectory that ties each process of the shared GPU to its replica's pod.

    Stands in for the Kubernetes watch plus /proc cgroup lookup, so `attribute()` splits
    the shared GPU by process (its costliest path) instead of giving up on it.
    """

    def __init__(self) -> None:
        self._owners = {
            SHARED_FIRST_PID + replica: Holder(NAMESPACE, f"shared-{replica}", CONTAINER)
            for replica in range(SHARED_REPLICAS)
        }

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return {}

    def owner_of_process(self, pid: int) -> Holder | None:
        return self._owners.get(pid)


def sample_node() -> NodeSample:
    """One NVML sample of the fake (already loaded into pynvml and pointed at the node)."""
    sampler = NvmlSampler(watch_xids=False)
    try:
        node = sampler.sample()
    finally:
        sampler.close()
    if not node.nvml_up:
        raise BenchError("the fake NVML did not answer in-process")
    return node


def check(result: AttributionSample, pods: int, split: bool) -> None:
    """The listing must attribute every pod, or the figures measure the wrong thing."""
    if len(result.allocations) != pods or result.unmapped:
        raise BenchError(
            f"attribution found {len(result.allocations)} of {pods} pods "
            f"(unmapped: {dict(result.unmapped)})"
        )
    shared = [u for u in result.usage if u.holder.pod.startswith("shared-")]
    if split and len(shared) != SHARED_REPLICAS:
        raise BenchError(f"the shared GPU was split into {len(shared)} holders, not 10")


# --- CPU per attribute() call ----------------------------------------------------------------


@dataclass(frozen=True)
class CallCpu:
    directory: str
    mean_s: float
    p99_s: float
    max_s: float
    calls: int


def cpu_per_call(
    devices_: tuple[DeviceSample, ...],
    listing: Listing,
    directory: PodDirectory,
    name: str,
    calls: int,
) -> CallCpu:
    """process_time() around each `attribute()` call, after a short warm-up."""
    for _ in range(WARMUP_CALLS):
        attribute(devices_, listing, directory)
    costs: list[float] = []
    for _ in range(calls):
        started = time.process_time()
        attribute(devices_, listing, directory)
        costs.append(time.process_time() - started)
    p99 = statistics.quantiles(costs, n=100, method="inclusive")[98] if calls > 1 else costs[0]
    return CallCpu(name, statistics.fmean(costs), p99, max(costs), calls)


def attribution_cpu(
    node: NodeSample, listing: Listing, pods: int, calls: int
) -> tuple[CallCpu, CallCpu]:
    """Without the Kubernetes API (shared GPU not split), and with the per-process split."""
    plain = NoPodDirectory()
    split = SharedGpuDirectory()
    check(attribute(node.devices, listing, plain), pods, split=False)
    check(attribute(node.devices, listing, split), pods, split=True)
    return (
        cpu_per_call(node.devices, listing, plain, "`NoPodDirectory`", calls),
        cpu_per_call(node.devices, listing, split, "shared GPU split by process", calls),
    )


# --- RSS under pod churn ---------------------------------------------------------------------


class _FixedSampler:
    """The collection loop's sampler, answering one stored NVML sample every cycle."""

    simulated = False

    def __init__(self, node: NodeSample) -> None:
        self._node = node

    def sample(self) -> NodeSample:
        return self._node

    def close(self) -> None:
        pass


class _ChurningKubelet:
    """A ListingSource whose answer the bench replaces between cycles."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing

    async def list(self) -> Listing:
        return self.listing


class _SplitDirectorySource(DirectorySource):
    def directory(self) -> PodDirectory:
        return SharedGpuDirectory()

    @property
    def up(self) -> bool | None:
        return True


@dataclass(frozen=True, kw_only=True)
class ChurnTrack(RssTrack):
    """VmRSS over create/delete cycles (RssTrack's figures), and what was churned."""

    devices: int
    pods_base: int  # pods in the listing without the churned one
    seconds: float

    @property
    def met(self) -> bool:
        return self.growth < CHURN_GROWTH_TARGET_BYTES


class ChurnBench:
    """The exporter's own cycle with attribution, while one pod comes and goes.

    Each create/delete cycle is two collection cycles: one where the kubelet lists pod
    `pod-<i>` on the first kept MIG instance, and one where it is gone (a new name every
    time, so label sets churn as real pods' do). Only the MIG GPUs `mig_gpus` and the shared
    GPU are kept in the stored NVML sample and in the listing, to keep a long run short.
    Every collection cycle runs the real chain: the `PodResourcesWatcher` refreshes from the
    kubelet stand-in, `AttributionSource` attributes the stored NVML sample (shared GPU split
    by process), and `CollectionLoop.cycle()` builds the snapshot and renders every body,
    gzip included.
    """

    def __init__(
        self, node: NodeSample, state: NodeState, mig_gpus: Collection[int], interval_s: float
    ) -> None:
        shared = next(d.index for d in state.devices if not d.mig)
        kept = {*mig_gpus, shared}
        node = replace(node, devices=tuple(d for d in node.devices if d.identity.index in kept))
        pods = node_pods(state, mig_gpus)
        allocatable = node_allocatable(state, mig_gpus)
        churned = _mig_pod_name(min(mig_gpus), CHURNED_SLOT)
        self._base = [p for p in pods if p.name != churned]
        self._template = next(p for p in pods if p.name == churned)
        self._allocatable = allocatable
        self._without = parse_listing(self._base, allocatable)
        self._kubelet = _ChurningKubelet(self._without)
        self._watcher = PodResourcesWatcher(self._kubelet, interval_s)
        source = AttributionSource(self._watcher, _SplitDirectorySource())
        self._collection = CollectionLoop(_FixedSampler(node), interval_s, source)
        self.devices = len(node.devices)
        self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        self._loop.close()

    def _with(self, name: str) -> Listing:
        created = api_pb2.PodResources()
        created.CopyFrom(self._template)
        created.name = name
        return parse_listing([*self._base, created], self._allocatable)

    def _cycle(self, listing: Listing, pods: int) -> None:
        self._kubelet.listing = listing
        if not self._loop.run_until_complete(self._watcher.refresh()):
            raise BenchError("the pod-resources watcher refused the listing")
        attribution = self._collection.cycle().snapshot.attribution
        if attribution is None or len(attribution.allocations) != pods:
            found = len(attribution.allocations) if attribution else None
            raise BenchError(f"churn: {found} allocations attributed, expected {pods}")

    def create_delete(self, name: str) -> None:
        self._cycle(self._with(name), len(self._base) + 1)
        self._cycle(self._without, len(self._base))

    def run(self, cycles: int, progress: Callable[[int, int], None]) -> ChurnTrack:
        """VmRSS after warm-up and after each tenth of `cycles` create/delete cycles."""
        for i in range(CHURN_WARMUP_CYCLES):
            self.create_delete(f"warm-up-{i}")
        step = max(1, cycles // CHECKPOINTS)
        started = time.monotonic()
        points = [(0, rss_bytes())]
        for done in range(1, cycles + 1):
            self.create_delete(f"pod-{done}")
            if done % step == 0 or done == cycles:
                points.append((done, rss_bytes()))
                progress(done, points[-1][1])
        return ChurnTrack(
            points=tuple(points),
            devices=self.devices,
            pods_base=len(self._base),
            seconds=time.monotonic() - started,
        )
