"""GPU capacity as a new pod would find it: per node, and per GPU product the largest request
that could schedule right now, with a fragmentation index.

"Free" on a node is allocatable minus the requests of its pods that have not ended
(view.py). For "could schedule now" a node must also be *eligible* for a standard GPU pod:
Ready and not cordoned, every filtering taint tolerated by the settings' standard GPU
tolerations (default: `nvidia.com/gpu` NoSchedule), and room left for the settings' minimal
pod's CPU and memory and one more pod. A node advertising only `nvidia.com/mig-*` has no
`nvidia.com/gpu` to give, so it never counts for that resource: per-resource rows keep a
MIG slice from passing as a whole GPU.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from kube_gpu_exporter.exporter.cluster.filters import untolerated
from kube_gpu_exporter.exporter.cluster.quantities import PODS
from kube_gpu_exporter.exporter.cluster.view import ClusterView, NodeState


@dataclass(frozen=True)
class NodeCapacity:
    """One node's one GPU resource: what it advertises, what bound pods request, what is left
    (never below 0: requests above allocatable, e.g. after a device plugin lost GPUs, leave
    0 free), and the node's product label and eligibility."""

    node: str
    resource: str
    product: str
    allocatable: int
    allocated: int
    free: int
    eligible: bool


@dataclass(frozen=True)
class ProductCapacity:
    """One GPU product's one resource over the nodes that advertise it (above 0).

    - `largest_request`: the most of the resource one pod could get now (the largest free
      block on an eligible node), 0 when none is eligible or free;
    - `free`: free units on the eligible nodes, in total;
    - `fragmentation`: 1 − largest_request / free, 0 when nothing is free: 0 means all free
      units sit on one node, near 1 that they are scattered one per node;
    - `nodes`, `eligible_nodes`: how many nodes advertise it, how many of them are eligible.
    """

    product: str
    resource: str
    largest_request: int
    free: int
    fragmentation: float
    nodes: int
    eligible_nodes: int


def eligible(view: ClusterView, state: NodeState) -> bool:
    """Whether a standard GPU pod may land on the node now (see the module docstring)."""
    if untolerated(state.node, view.settings.standard_tolerations):
        return False
    if PODS in state.node.allocatable and state.free_of(PODS) < 1:
        return False
    return all(state.free_of(name) >= amount for name, amount in view.settings.minimal_pod.items())


def node_capacity(view: ClusterView) -> tuple[NodeCapacity, ...]:
    """Every node and GPU resource it advertises (at 0 too) or has requested of it, in node
    then resource order. Made once per view; a node's rows depend on its state alone, so
    those of a node whose state is the same object as in the last cycle's view (`carried`)
    are taken over."""
    made: Rows | None = view.cache.get(_ROWS)
    if made is not None:
        return made[1]
    earlier: Rows | None = view.carried.get(_ROWS)
    lent = earlier[0] if earlier is not None else {}
    kept: dict[str, tuple[NodeState, tuple[NodeCapacity, ...]]] = {}
    rows: list[NodeCapacity] = []
    for name, state in view.nodes.items():
        found = lent.get(name)
        if found is None or found[0] is not state:
            found = (state, _node_rows(view, name, state))
        kept[name] = found
        rows.extend(found[1])
    made = view.cache[_ROWS] = (kept, tuple(rows))
    return made[1]


# In the view's cache under _ROWS: node name → (its state, its rows), and all rows in order
Rows = tuple[dict[str, tuple[NodeState, tuple[NodeCapacity, ...]]], tuple[NodeCapacity, ...]]
_ROWS: Final = ("node_capacity",)


def _node_rows(view: ClusterView, name: str, state: NodeState) -> tuple[NodeCapacity, ...]:
    settings = view.settings
    resources = settings.gpu_part(state.node.allocatable) | settings.gpu_part(state.allocated)
    is_eligible = eligible(view, state)
    return tuple(
        NodeCapacity(
            node=name,
            resource=resource,
            product=state.product,
            allocatable=state.node.allocatable.get(resource, 0),
            allocated=state.allocated.get(resource, 0),
            free=state.free_of(resource),
            eligible=is_eligible,
        )
        for resource in sorted(resources)
    )


def fragmentation_index(largest: int, free: int) -> float:
    """1 − largest free block / total free; 0 when nothing is free."""
    return 0.0 if free <= 0 else 1.0 - largest / free


def product_capacity(view: ClusterView) -> tuple[ProductCapacity, ...]:
    """Per (product, resource) over the nodes advertising the resource above 0, in product
    then resource order; the product is "" for nodes without the product label."""
    groups: dict[tuple[str, str], list[NodeCapacity]] = defaultdict(list)
    for row in node_capacity(view):
        if row.allocatable > 0:
            groups[(row.product, row.resource)].append(row)
    result = []
    for (product, resource), rows in sorted(groups.items()):
        usable = [row.free for row in rows if row.eligible]
        largest, free = max(usable, default=0), sum(usable)
        result.append(
            ProductCapacity(
                product=product,
                resource=resource,
                largest_request=largest,
                free=free,
                fragmentation=fragmentation_index(largest, free),
                nodes=len(rows),
                eligible_nodes=len(usable),
            )
        )
    return tuple(result)
