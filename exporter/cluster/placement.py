"""One pod against one node: every filter evaluated, each failure kept as evidence.

The scheduler stops at a node's first failing filter; here every filter is evaluated, because
classification asks counterfactual questions ("would a node with room for the GPUs take the
pod if it tolerated the taint?") and `explain` shows all that excludes a node at once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from kube_gpu_exporter.exporter.cluster.filters import SelectorCheck, check_selectors, untolerated
from kube_gpu_exporter.exporter.cluster.objects import Pod, Taint
from kube_gpu_exporter.exporter.cluster.quantities import EMPTY, PODS, Resources, show
from kube_gpu_exporter.exporter.cluster.view import NodeState


class Filter(StrEnum):
    """The node filters, in kube-scheduler's order. TAINTS covers cordoned and not-ready
    nodes too (the lifecycle controller's taints); RESOURCES is every non-GPU resource:
    cpu, memory, the node's pod count, and any other the pod requests."""

    TAINTS = "taints"
    GPU_TYPE = "gpu_type"
    AFFINITY = "affinity"
    GPU = "gpu"
    RESOURCES = "resources"


# The filters that say whether the pod may use a node at all, whatever its free GPUs.
ACCESS_FILTERS: Final = frozenset({Filter.TAINTS, Filter.GPU_TYPE, Filter.AFFINITY})


@dataclass(frozen=True)
class Shortfall:
    resource: str
    requested: int
    free: int

    def __str__(self) -> str:
        wanted, left = show(self.resource, self.requested), show(self.resource, self.free)
        return f"{self.resource} {wanted} wanted, {left} free"


@dataclass(frozen=True)
class NodeCheck:
    """The pod against one node.

    - `untolerated`: the node's filtering taints the pod does not tolerate;
    - `selectors`: what the node fails of the node selector and required affinity;
    - `gpu_allocatable`, `gpu_free`: per GPU resource the pod requests, what the node
      advertises and has left;
    - `short`: the non-GPU resources that do not fit.
    What it derives is computed once: classification asks each node many questions.
    """

    node: str
    product: str
    untolerated: tuple[Taint, ...]
    selectors: SelectorCheck
    gpu_allocatable: Resources = field(hash=False)
    gpu_free: Resources = field(hash=False)
    gpu_requested: Resources = field(hash=False)
    short: tuple[Shortfall, ...] = ()

    @functools.cached_property
    def gpu_room(self) -> bool:
        """Enough free GPUs for the pod on this node (true for a pod that asks for none)."""
        return all(self.gpu_free.get(r, 0) >= n for r, n in self.gpu_requested.items())

    @functools.cached_property
    def advertises(self) -> bool:
        """The node advertises (above 0) every GPU resource the pod requests."""
        return all(self.gpu_allocatable.get(r, 0) > 0 for r in self.gpu_requested)

    @functools.cached_property
    def failed(self) -> frozenset[Filter]:
        failed = set()
        if self.untolerated:
            failed.add(Filter.TAINTS)
        if self.selectors.gpu_type:
            failed.add(Filter.GPU_TYPE)
        if self.selectors.other:
            failed.add(Filter.AFFINITY)
        if not self.gpu_room:
            failed.add(Filter.GPU)
        if self.short:
            failed.add(Filter.RESOURCES)
        return frozenset(failed)

    @property
    def fits(self) -> bool:
        return not self.failed

    @property
    def open(self) -> bool:
        """The pod may use the node (taints, selectors and non-GPU resources pass), whatever
        its free GPUs: the nodes whose free GPUs count for the pod."""
        return not (self.failed - {Filter.GPU})

    @property
    def blocked_by(self) -> Filter | None:
        """For a node with room for the GPUs that still does not fit: the one filter to
        blame, the most fundamental first. CPU, memory or a pod slot short: no toleration
        or selector places the pod there (the scheduler, with every taint tolerated and no
        selector, still refuses the node); then a GPU type asked for, which no toleration
        changes; another selector likewise; then taints, the one thing left."""
        failed = self.failed
        for candidate in (Filter.RESOURCES, Filter.GPU_TYPE, Filter.AFFINITY, Filter.TAINTS):
            if candidate in failed:
                return candidate
        return None


def check_node(
    pod: Pod,
    state: NodeState,
    gpu_requests: Mapping[str, int],
    type_labels: tuple[str, ...],
) -> NodeCheck:
    node = state.node
    short = [
        Shortfall(name, amount, state.free_of(name))
        for name, amount in pod.requests.items()
        if name not in gpu_requests and state.free_of(name) < amount
    ]
    if PODS in node.allocatable and state.free_of(PODS) < 1:
        short.append(Shortfall(PODS, 1, state.free_of(PODS)))
    return NodeCheck(
        node=node.name,
        product=state.product,
        untolerated=untolerated(node, pod.tolerations),
        selectors=check_selectors(pod, node, type_labels),
        gpu_allocatable=_part(node.allocatable, gpu_requests),
        gpu_free=_part(state.free, gpu_requests),
        gpu_requested=gpu_requests,
        short=tuple(short),
    )


def _part(resources: Resources, wanted: Mapping[str, int]) -> Resources:
    if not wanted:
        return EMPTY
    return {name: resources.get(name, 0) for name in wanted}
