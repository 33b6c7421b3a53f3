"""Which container holds each device, and how much of it each one really uses.

A pure function of one cycle's NVML sample, the kubelet's latest pod-resources listing and a
directory of pods. The rule that matters most: on a shared GPU (time-slicing, MPS, several
holders) a device's own utilization and memory are never copied onto each holder, as
dcgm-exporter does by default (its per-process mode repeats a pod's share once per replica it
holds). Each holder gets what its own processes use, once, or nothing when that cannot be known.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.attribution.device_ids import DeviceResolver, parse_device_id
from kube_gpu_exporter.exporter.snapshot import (
    AllocationSample,
    AttributionSample,
    Capacity,
    DeviceIdentity,
    DeviceSample,
    Holder,
    PodUsage,
)

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.kubelet.listing import Listing


class PodDirectory(Protocol):
    """What attribution needs to know about pods beyond the kubelet's listing."""

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        """Extra labels for the holder's allocation; None when its pod is not running."""

    def owner_of_process(self, pid: int) -> Holder | None:
        """The container a host PID runs in, or None when that cannot be known."""

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        """The uuid a DRA device of gpu.nvidia.com stands for (from its ResourceSlice)."""


class NoPodDirectory:
    """Without the Kubernetes API: no extra labels, and no process can be tied to a pod."""

    def labels(self, holder: Holder) -> Mapping[str, str] | None:
        return {}

    def owner_of_process(self, pid: int) -> Holder | None:
        return None

    def dra_device_uuid(self, pool: str, device: str) -> str | None:
        return None


WHOLE_GPU_RESOURCE = "nvidia.com/gpu"


@dataclass
class _Holding:
    """One device and the containers the kubelet says hold it."""

    device: DeviceIdentity
    # holder → the resource it holds the device under; a device held under two names (a
    # renamed and a plain resource) keeps each holder's, the smaller name where one holder has
    # both, so the label never depends on the kubelet's order
    holders: dict[Holder, str] = field(default_factory=dict)
    replicated: bool = False


@dataclass(frozen=True)
class _Claim:
    """One device a container holds, as the kubelet names it (device plugins and DRA alike)."""

    holder: Holder
    resource: str
    raw_id: str
    device_id: str | None
    shared_by_construction: bool


@dataclass
class _Held:
    """Phase one's answer: the devices held (by uuid), and the ids that name no device."""

    holdings: dict[str, _Holding] = field(default_factory=dict)
    resolved: list[tuple[Holder, str, DeviceIdentity]] = field(default_factory=list)
    unmapped: set[tuple[str, str]] = field(default_factory=set)  # (resource, id), each once


@dataclass
class _InUse:
    """Phase two's answer: what running pods hold and use."""

    allocations: list[AllocationSample] = field(default_factory=list)
    usage: list[PodUsage] = field(default_factory=list)
    running: set[Holder] = field(default_factory=set)


def attribute(
    devices: tuple[DeviceSample, ...],
    listing: Listing | None,
    directory: PodDirectory,
) -> AttributionSample:
    """Three phases: which device each claim names, what the running holders hold and use of
    it, and what that leaves of the node's capacity."""
    if listing is None:
        whole_gpus = sum(not d.identity.is_mig for d in devices)
        return AttributionSample((), (), Capacity(whole_gpus, None, None, None), {})
    resolver = DeviceResolver(d.identity for d in devices)
    held = _held_devices(_claims(listing, directory), resolver)
    in_use = _allocations_and_usage(devices, held.holdings, directory)
    return _with_capacity(devices, listing, resolver, held, in_use)


def _claims(listing: Listing, directory: PodDirectory) -> list[_Claim]:
    """Every device id the kubelet lists as held, from device plugins and from DRA."""
    claims: list[_Claim] = []
    for alloc in listing.allocations:
        holder = Holder(alloc.namespace, alloc.pod, alloc.container)
        renamed = alloc.resource.endswith(".shared")
        for raw in alloc.device_ids:
            ref = parse_device_id(raw)
            shared = ref.replica is not None or renamed
            claims.append(_Claim(holder, alloc.resource, raw, ref.base, shared))
    for dra in listing.dra:
        if dra.driver == c.NVIDIA_DRA_DRIVER:
            # A DRA device is named by pool and device; its ResourceSlice gives the uuid.
            holder = Holder(dra.namespace, dra.pod, dra.container)
            uuid = directory.dra_device_uuid(dra.pool, dra.device)
            raw = f"{dra.pool}/{dra.device}/{dra.share_id or ''}"
            shared = dra.share_id is not None
            claims.append(_Claim(holder, f"dra/{dra.driver}", raw, uuid, shared))
    return claims


def _held_devices(claims: Iterable[_Claim], resolver: DeviceResolver) -> _Held:
    """Group the claims by the device NVML sees; a claim naming none is unmapped."""
    held = _Held()
    for claim in claims:
        device = resolver.resolve(claim.device_id) if claim.device_id else None
        if device is None:
            held.unmapped.add((claim.resource, claim.raw_id))
            continue
        held.resolved.append((claim.holder, claim.resource, device))
        holding = held.holdings.setdefault(device.uuid, _Holding(device))
        holding.device = device
        held_as = holding.holders.get(claim.holder)
        resource = claim.resource if held_as is None else min(held_as, claim.resource)
        holding.holders[claim.holder] = resource
        holding.replicated |= claim.shared_by_construction
    return held


def _allocations_and_usage(
    devices: tuple[DeviceSample, ...],
    holdings: Mapping[str, _Holding],
    directory: PodDirectory,
) -> _InUse:
    """Each held device's running holders, and their usage: the device's own when one holds it
    alone, the split by process when it is shared. A pod no longer running holds nothing."""
    samples = {d.identity.uuid: d for d in devices}
    in_use = _InUse()
    for uuid, holding in sorted(holdings.items()):
        device = holding.device
        active = {h: directory.labels(h) for h in sorted(holding.holders)}
        running = {h: labels for h, labels in active.items() if labels is not None}
        in_use.running.update(running)
        shared = holding.replicated or len(running) > 1
        sharing = "shared" if shared else "exclusive"
        for holder, labels in running.items():
            resource = holding.holders[holder]
            in_use.allocations.append(AllocationSample(device, holder, resource, sharing, labels))
        sample = samples.get(uuid)
        if sample is None or not sample.up:
            continue
        if shared:
            in_use.usage.extend(_split(device, sample, running, directory))
        else:
            in_use.usage.extend(_exclusive(device, sample, running))
    return in_use


def _with_capacity(
    devices: tuple[DeviceSample, ...],
    listing: Listing,
    resolver: DeviceResolver,
    held: _Held,
    in_use: _InUse,
) -> AttributionSample:
    """The sample, with the capacity and the unmapped ids counted as attribution counted them.

    What the exporter attributes is what it counts: ids that name no device and pods that are
    no longer running are not allocated devices (the former are `unmapped`).
    """
    allocated = Counter(r for h, r, _ in held.resolved if h in in_use.running)
    unmapped = set(held.unmapped)
    for resource, ids in (listing.allocatable or {}).items():
        unmapped.update((resource, i) for i in ids if resolver.gpu_of(i) is None)
    return AttributionSample(
        tuple(in_use.allocations),
        tuple(in_use.usage),
        _capacity(devices, listing, resolver, in_use.allocations, allocated),
        dict(Counter(resource for resource, _ in unmapped)),
    )


def _capacity(
    devices: tuple[DeviceSample, ...],
    listing: Listing,
    resolver: DeviceResolver,
    allocations: list[AllocationSample],
    allocated: Counter[str],
) -> Capacity:
    """The node's GPU capacity. A whole GPU is free only if a pod asking for `nvidia.com/gpu`
    could get it now: NVML can read it (not lost), it is not MIG-enabled (its instances are
    resources of their own), the kubelet advertises it (when the kubelet can say), and nothing
    is allocated on it."""
    whole_gpus = [d for d in devices if not d.identity.is_mig]
    mig_enabled = {d.identity.parent_uuid for d in devices if d.identity.is_mig}
    held = {a.device.parent_uuid or a.device.uuid for a in allocations}
    advertised: set[str] | None = None
    offered: frozenset[str] | None = None
    if listing.allocatable is not None:
        ids = [i for names in listing.allocatable.values() for i in names]
        advertised = {gpu for gpu in map(resolver.gpu_of, ids) if gpu is not None}
        # The kubelet lists its plugins' healthy devices only: a device it does not list is
        # one its plugin marked Unhealthy, or one no plugin serves (docs/metrics.md)
        listed = (resolver.resolve(parse_device_id(i).base) for i in ids)
        offered = frozenset(device.uuid for device in listed if device is not None)
    free = [
        g.identity.uuid
        for g in whole_gpus
        if g.up
        and g.identity.uuid not in mig_enabled
        and (advertised is None or g.identity.uuid in advertised)
        and g.identity.uuid not in held
    ]
    counts: dict[str, int] | None = None
    if listing.allocatable is not None:
        # Advertised devices are counted as allocated ones are: the ids that name a device
        # NVML sees (the others are `unmapped`), so allocated ÷ advertised reaches 1 on a full
        # node, and an id naming no GPU cannot stand in for a GPU the plugin lost. A kubelet
        # that advertises no GPU resource at all (the device plugin is gone) says so with a
        # 0, which is not the absence of a kubelet that cannot tell.
        counts = {
            r: sum(resolver.gpu_of(i) is not None for i in ids)
            for r, ids in sorted(listing.allocatable.items())
        }
        counts = counts or {WHOLE_GPU_RESOURCE: 0}
    return Capacity(
        driver_gpus=len(whole_gpus),
        advertised=counts,
        allocated=dict(sorted(allocated.items())),
        free_gpus=len(free),
        offered=offered,
    )


def _exclusive(
    device: DeviceIdentity, sample: DeviceSample, holders: Iterable[Holder]
) -> list[PodUsage]:
    """A device held alone: its holder's usage is the device's.

    A MIG instance has no NVML utilization; its activity is GPM's engine activity of that
    instance (Hopper and newer). On Ampere MIG neither exists and the usage stays absent:
    the instance's compute process count is the idle signal there (docs/metrics.md).
    """
    values = sample.values
    utilization = values.get(c.UTILIZATION.name, values.get(c.GRAPHICS_ACTIVE.name))
    return [
        PodUsage(device, holder, utilization, values.get(c.MEMORY_USED.name)) for holder in holders
    ]


def _split(
    device: DeviceIdentity,
    sample: DeviceSample,
    holders: Mapping[Holder, object],
    directory: PodDirectory,
) -> list[PodUsage]:
    """A shared device: each holder gets the sum over its own processes.

    Only when NVML's list can be the device's every process and each one can be tied to a
    container; otherwise the split is unknown and nothing is reported (absent, never a wrong
    number). A holder with no process on the device uses nothing of it: 0, which is exactly
    what an idle-share alert needs — and exactly what an invisible process would fake.
    """
    if sample.processes is None or not lists_every_process(sample):
        return []
    owners = {p.pid: directory.owner_of_process(p.pid) for p in sample.processes}
    if any(owner is None for owner in owners.values()):
        return []
    with_util = all(p.sm_utilization is not None for p in sample.processes)
    memory: defaultdict[Holder, float] = defaultdict(float)
    util: defaultdict[Holder, float] = defaultdict(float)
    for process in sample.processes:
        owner = owners[process.pid]
        assert owner is not None
        memory[owner] += process.used_memory_bytes or 0.0  # known: lists_every_process
        util[owner] += process.sm_utilization or 0.0
    return [
        PodUsage(device, h, min(util[h], 1.0) if with_util else None, memory[h]) for h in holders
    ]


# Framebuffer a device may hold beyond its listed processes' before a process must be missing
# from the list: the driver's own allocations stay well under it, while a CUDA context alone
# takes a few hundred MiB and a workload far more.
UNLISTED_MEMORY_SLACK_BYTES = 1 << 30
# How far the listed processes' summed SM utilization may fall short of the device's before a
# process must be missing. NVML samples the device over its last sample period and the
# processes since the previous cycle, so a steady workload's two differ by a few points; a
# hidden process that runs less than this is not caught, and its holder reads under the
# default idle threshold, as it nearly is.
UNLISTED_UTILIZATION_SLACK = 0.05


def lists_every_process(sample: DeviceSample) -> bool:
    """Whether NVML's process list can be all there is on the device.

    It cannot when NVML could not list, nor when the device's own readings show work that the
    listed processes do not account for: NVML lists only the caller's PID namespace (an
    exporter without hostPID sees an empty list on a busy GPU), and drivers and MPS set-ups
    hide processes for other reasons. Someone is missing when the device holds more memory
    than the listed processes by over the slack, and — whatever the memory, since a small
    process hides under the slack — when the device is busy and the listed processes' SM
    utilization falls short of it. A listed process whose memory or (on a busy device)
    utilization NVML cannot say leaves the question open: not all, as far as anyone knows.
    """
    processes = sample.processes
    if processes is None:
        return False
    memory = [p.used_memory_bytes for p in processes]
    if any(m is None for m in memory):
        return False
    used = sample.values.get(c.MEMORY_USED.name)
    listed = sum(m for m in memory if m is not None)
    if used is not None and used - listed > UNLISTED_MEMORY_SLACK_BYTES:
        return False
    busy = sample.values.get(c.UTILIZATION.name)
    if not busy:
        return True  # idle, or no utilization reading (MIG): the memory decides
    shares = [p.sm_utilization for p in processes]
    if any(s is None for s in shares):
        return False
    return sum(s for s in shares if s is not None) >= busy - UNLISTED_UTILIZATION_SLACK
