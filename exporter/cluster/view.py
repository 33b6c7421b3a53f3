"""One consistent view of the cluster: nodes, the pods bound to them, quotas, and what each
node has left — built once from the slim values, then read by capacity, quota checks and
classification.

What a node has left is its allocatable minus the effective requests of the pods bound to
it that have not ended (phase Succeeded or Failed), as the scheduler's NodeResourcesFit
counts it; each bound pod also takes one of the node's `pods`. A pod that is being deleted
still holds its resources until it is gone, so it still counts. Pods bound to a node the
view does not know are left out.

`build` makes a view from scratch (`explain`'s one read, the reference in tests); the
`cluster` command keeps one current change by change instead (incremental_view.py), which
makes the same value per cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.quantities import PODS, Resources, add, frozen
from kube_gpu_exporter.exporter.cluster.settings import (
    DEFAULT_SETTINGS,
    GPU_NODE_LABELS,
    ClusterSettings,
)


@dataclass(frozen=True, eq=False)
class NodeState:
    """A node with what is allocated on it and what is free, per resource (`pods` counted)."""

    node: Node
    allocated: Resources
    free: Resources
    product: str  # the product label's value, "" when the node has none
    gpu_node: bool  # advertises a GPU resource (even at 0) or carries a GPU node label
    gpus: Resources  # the GPU resources it advertises above 0 (none: its plugin is silent)

    def free_of(self, resource: str) -> int:
        return self.free.get(resource, 0)

    def advertising(self) -> str:
        """What the node advertises of GPUs, as `explain` words it."""
        if not self.gpus:
            return "advertises no GPU resource"
        return "advertises only " + ", ".join(f"{n} {a}" for n, a in sorted(self.gpus.items()))


@dataclass(frozen=True, eq=False)
class ClusterView:
    """Nodes (by name, in name order), the pods, quotas by namespace, and the settings.

    Build it with `ClusterView.build` (or `IncrementalView`); it is immutable apart from a
    cache of classifications (`classify.py`) keyed by `Pod.placement_key`, valid for this
    view only. `pending`: the pods waiting for the scheduler that request a GPU resource.
    `carried`: the previous cycle's cache, from `IncrementalView`, whose node checks
    classification takes over where the node's state is the same object (else empty).
    """

    nodes: Mapping[str, NodeState]
    pods: tuple[Pod, ...]
    quotas: Mapping[str, tuple[Quota, ...]]
    settings: ClusterSettings
    advertised: Mapping[str, int]  # GPU resource → allocatable over all nodes
    pending: tuple[Pod, ...]
    cache: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    carried: Mapping[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        quotas: Iterable[Quota] = (),
        settings: ClusterSettings = DEFAULT_SETTINGS,
    ) -> ClusterView:
        pods = tuple(pods)
        by_name = {node.name: node for node in nodes}
        allocated: dict[str, dict[str, int]] = defaultdict(dict)
        for pod in pods:
            if pod.node_name in by_name and not pod.terminated:
                usage = allocated[pod.node_name]
                add(usage, pod.requests)
                usage[PODS] = usage.get(PODS, 0) + 1
        states = {
            name: node_state(by_name[name], allocated.get(name, {}), settings)
            for name in sorted(by_name)
        }
        advertised: dict[str, int] = {}
        for state in states.values():
            add(advertised, settings.gpu_part(state.node.allocatable))
        by_namespace: dict[str, list[Quota]] = defaultdict(list)
        for quota in quotas:
            by_namespace[quota.namespace].append(quota)
        return cls(
            nodes=MappingProxyType(states),
            pods=pods,
            quotas=MappingProxyType({ns: tuple(q) for ns, q in by_namespace.items()}),
            settings=settings,
            advertised=MappingProxyType(advertised),
            pending=tuple(pod for pod in pods if waits_for_gpu(pod, settings)),
        )

    def gpu_requests(self, pod: Pod) -> dict[str, int]:
        """The pod's requests of GPU resources (by the settings' patterns)."""
        return self.settings.gpu_part(pod.requests)

    def pending_gpu_pods(self) -> list[Pod]:
        """Pods waiting for the scheduler that request a GPU resource: what classification
        is for (a pod's own quota was charged when it was created, so it is not re-checked)."""
        return list(self.pending)

    def pod(self, namespace: str, name: str) -> Pod | None:
        return next((p for p in self.pods if p.namespace == namespace and p.name == name), None)


def waits_for_gpu(pod: Pod, settings: ClusterSettings) -> bool:
    """Waiting for the scheduler and requesting a GPU resource: what `pending` holds."""
    return pod.unscheduled and bool(settings.gpu_part(pod.requests))


def node_state(node: Node, allocated: Mapping[str, int], settings: ClusterSettings) -> NodeState:
    """The node with `allocated` (what its bound pods request, `pods` counted) taken off."""
    free = {
        name: max(0, amount - allocated.get(name, 0)) for name, amount in node.allocatable.items()
    }
    gpus = settings.gpu_part(node.allocatable)
    gpu_node = bool(gpus) or any(
        key in node.labels for key in (*GPU_NODE_LABELS, *settings.gpu_type_labels)
    )
    return NodeState(
        node=node,
        allocated=frozen(allocated),
        free=frozen(free, keep_zero=True),
        product=node.labels.get(settings.product_label, ""),
        gpu_node=gpu_node,
        gpus=frozen(gpus),
    )
