"""What the kubelet's pod-resources answer says, as small immutable values, and their making
from its two answers (as wire.py reads them): which container holds which device ids under
which resource, and which device ids each resource advertises.

Kept apart from the gRPC client (client.py) because attribution, the simulated node and the
tests build and read these values without a kubelet to talk to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from types import MappingProxyType

from kube_gpu_exporter.exporter.kubelet import wire


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """The devices of one resource that one container holds (all NUMA nodes merged)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DraAllocation:
    """One device a container got through a DRA resource claim (any driver)."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    share_id: str | None  # set by kubelets from 1.35 for shared (consumable) devices


@dataclass(frozen=True, slots=True)
class Listing:
    """One consistent answer of the kubelet, filtered to the resources we attribute."""

    allocations: tuple[ContainerAllocation, ...]
    dra: tuple[DraAllocation, ...]
    # resource name → device ids; None when the kubelet cannot say (before 1.21, or 1.21–1.22
    # with the KubeletPodResourcesGetAllocatable feature gate off): only the advertised counts
    # are unknown then, attribution is not
    allocatable: Mapping[str, tuple[str, ...]] | None
    # GetAllocatableResources refused for another reason than an old kubelet's (permission
    # denied, an internal error): the counts are unknown too, but that is a fault to count
    allocatable_refused: bool = False


# An NVIDIA GPU or MIG uuid as the device plugin names devices (`GPU-…`, `MIG-…`, and the
# R450/R460 `MIG-GPU-…/<gi>/<ci>`), with or without a `::<n>` replica suffix.
_NVIDIA_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}-")


class ResourceFilter:
    """Keeps resource names matching one of the fnmatch patterns (case-sensitive), and any
    other resource whose device ids are NVIDIA uuids: a device plugin configured to rename its
    resource (`nvidia.com/gpu-h100`, `example.com/a100`) still names devices by uuid, and such
    allocations must not vanish silently because the name is not among the patterns."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)

    def __call__(self, resource: str, device_ids: Sequence[str] = ()) -> bool:
        if any(fnmatchcase(resource, pattern) for pattern in self.patterns):
            return True
        return bool(device_ids) and all(_NVIDIA_UUID.match(i) for i in device_ids)


def _merge(target: dict[str, None], ids: Iterable[str]) -> None:
    # A dict keeps first-seen order and drops duplicates.
    for device_id in ids:
        target.setdefault(device_id, None)


def _dra_allocation(
    pod: wire.PodResources,
    container: wire.ContainerResources,
    claim: wire.DynamicResource,
    resource: wire.ClaimResource,
) -> DraAllocation:
    return DraAllocation(
        namespace=pod.namespace,
        pod=pod.name,
        container=container.name,
        claim_namespace=claim.claim_namespace,
        claim_name=claim.claim_name,
        driver=resource.driver_name,
        pool=resource.pool_name,
        device=resource.device_name,
        share_id=resource.share_id,
    )


def parse_allocations(
    response: wire.ListPodResourcesResponse, wanted: ResourceFilter
) -> tuple[tuple[ContainerAllocation, ...], tuple[DraAllocation, ...]]:
    """Flatten List's answer; merge one container's entries for the same resource.

    The kubelet sends one ContainerDevices entry per resource and NUMA node, so a container
    with GPUs on both sockets has two `nvidia.com/gpu` entries. DRA claims are kept for every
    driver: which driver is a GPU is the caller's decision.
    """
    merged: dict[tuple[str, str, str, str], dict[str, None]] = {}
    dra: list[DraAllocation] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if wanted(devices.resource_name, devices.device_ids):
                    key = (pod.namespace, pod.name, container.name, devices.resource_name)
                    _merge(merged.setdefault(key, {}), devices.device_ids)
            dra.extend(
                _dra_allocation(pod, container, claim, resource)
                for claim in container.dynamic_resources
                for resource in claim.claim_resources
            )
    allocations = tuple(
        ContainerAllocation(namespace, pod_name, container_name, resource, tuple(ids))
        for (namespace, pod_name, container_name, resource), ids in merged.items()
    )
    return allocations, tuple(dra)


def parse_allocatable(
    response: wire.AllocatableResourcesResponse, wanted: ResourceFilter
) -> Mapping[str, tuple[str, ...]]:
    """Resource name → allocatable device ids, NUMA entries merged."""
    merged: dict[str, dict[str, None]] = {}
    for devices in response.devices:
        if wanted(devices.resource_name, devices.device_ids):
            _merge(merged.setdefault(devices.resource_name, {}), devices.device_ids)
    return MappingProxyType({name: tuple(ids) for name, ids in merged.items()})
