"""One pod against one node: every filter evaluated, each failure kept as evidence.

The scheduler stops at a node's first failing filter; here every filter is evaluated, because
classification asks counterfactual questions ("would a node with room for the GPUs take the
pod if it tolerated the taint?") and `explain` shows all that excludes a node at once.
"""

from __future__ import annotations

import itertools
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


@dataclass(frozen=True, slots=True)
class NodeCheck:
    """The pod against one node.

    - `untolerated`: the node's filtering taints the pod does not tolerate;
    - `selectors`: what the node fails of the node selector and required affinity;
    - `gpu_requested`: the GPU resources the pod requests, and how many of each;
    - `short`: the non-GPU resources that do not fit;
    - `gpu_room`, `advertises`, `failed`: derived once by `check_node`, since classification
      asks each node many questions.

    Classification keeps a check per node and placement until the view's cycle ends, and then
    frees them all at once while holding the GIL, a pause that grows with every allocation a
    check makes (bench/README.md). So a check is one object of slots that refers to what exists
    anyway: the node's state (GPUs free and advertised are read from it), the shared results of
    the filters, and one of the 32 sets of failed filters.
    """

    state: NodeState = field(compare=False, repr=False)
    untolerated: tuple[Taint, ...]
    selectors: SelectorCheck
    gpu_requested: Resources = field(hash=False)
    short: tuple[Shortfall, ...]
    gpu_room: bool  # enough free GPUs for the pod (true for a pod that asks for none)
    advertises: bool  # the node advertises (above 0) every GPU resource requested
    failed: frozenset[Filter]

    @property
    def node(self) -> str:
        return self.state.node.name

    @property
    def product(self) -> str:
        return self.state.product

    def free(self, resource: str) -> int:
        """Free units of `resource` on the node."""
        return self.state.free_of(resource)

    @property
    def gpu_free(self) -> Resources:
        """Per GPU resource the pod requests, what the node has left."""
        return _part(self.state.free, self.gpu_requested)

    @property
    def gpu_allocatable(self) -> Resources:
        """Per GPU resource the pod requests, what the node advertises."""
        return _part(self.state.node.allocatable, self.gpu_requested)

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


# Every set of failed filters, by which of (taints, GPU type, affinity, GPU, resources)
# failed: checks share these rather than each holding its own.
_FAILED: Final = {
    flags: frozenset(f for f, failed in zip(Filter, flags, strict=True) if failed)
    for flags in itertools.product((False, True), repeat=len(Filter))
}


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
    taints = untolerated(node, pod.tolerations, running=False)
    selectors = check_selectors(pod, node, type_labels)
    room = all(state.free_of(r) >= n for r, n in gpu_requests.items())
    flags = (bool(taints), bool(selectors.gpu_type), bool(selectors.other), not room, bool(short))
    return NodeCheck(
        state=state,
        untolerated=taints,
        selectors=selectors,
        gpu_requested=gpu_requests,
        short=tuple(short),
        gpu_room=room,
        advertises=all(node.allocatable.get(r, 0) > 0 for r in gpu_requests),
        failed=_FAILED[flags],
    )


def _part(resources: Resources, wanted: Mapping[str, int]) -> Resources:
    if not wanted:
        return EMPTY
    return {name: resources.get(name, 0) for name in wanted}
