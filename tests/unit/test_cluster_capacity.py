"""Capacity as a new pod would find it: free GPUs per node and resource, the largest request
that could schedule now per GPU product, and the fragmentation index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cluster_objects import A100, GPU_TAINT, H100, INFERENCE_TAINT, MIG, make_gpu_pod, make_node
from kube_gpu_exporter.exporter.cluster import (
    ClusterSettings,
    ClusterView,
    NodeCapacity,
    ProductCapacity,
    Toleration,
    fragmentation_index,
    node_capacity,
    parse_node,
    parse_pod,
    product_capacity,
)


def view_of(
    nodes: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]] = (), **settings: Any
) -> ClusterView:
    return ClusterView.build(
        [n for n in map(parse_node, nodes) if n],
        [p for p in map(parse_pod, pods) if p],
        settings=ClusterSettings(**settings),
    )


def holder(node: str, gpus: int, phase: str | None = None, **kwargs: Any) -> dict[str, Any]:
    return make_gpu_pod(
        f"holder-{node}-{gpus}-{phase}", gpus, "batch", node=node, phase=phase, **kwargs
    )


@pytest.mark.parametrize(
    ("largest", "free", "index"), [(0, 0, 0.0), (4, 4, 0.0), (1, 4, 0.75), (2, 8, 0.75)]
)
def test_fragmentation_index(largest: int, free: int, index: float) -> None:
    assert fragmentation_index(largest, free) == index


def test_free_per_node_counts_bound_pods_that_have_not_ended() -> None:
    nodes = [make_node("gpu-a"), make_node("gpu-b", gpus=2)]
    pods = [
        holder("gpu-a", 3),
        holder("gpu-a", 1, "Pending"),  # bound, starting: holds its GPU
        holder("gpu-a", 4, "Succeeded"),
        holder("gpu-b", 3),  # more than advertised (the plugin lost a GPU): 0 free
        make_gpu_pod("waiting", 8),  # not bound: holds nothing
    ]
    assert node_capacity(view_of(nodes, pods)) == (
        NodeCapacity("gpu-a", "nvidia.com/gpu", H100, 8, 4, 4, True),
        NodeCapacity("gpu-b", "nvidia.com/gpu", H100, 2, 3, 0, True),
    )


def test_largest_request_per_product_only_on_eligible_nodes() -> None:
    nodes = [
        make_node("h-a"),
        make_node("h-b"),
        make_node("h-tainted", taints=(GPU_TAINT, INFERENCE_TAINT)),
        make_node("h-cordoned", unschedulable=True),
        make_node("h-not-ready", ready=False),
        make_node("h-no-cpu", cpu="2"),
        make_node("a-a", product=A100),
        make_node("bare", product=None),
    ]
    pods = [
        holder("h-a", 5),
        holder("h-b", 6),
        holder("a-a", 8),
        make_gpu_pod("cpu-hog", 0, "web", node="h-no-cpu", cpu="2"),
    ]
    assert product_capacity(view_of(nodes, pods)) == (
        ProductCapacity("", "nvidia.com/gpu", 8, 8, 0.0, 1, 1),
        ProductCapacity(A100, "nvidia.com/gpu", 0, 0, 0.0, 1, 1),
        ProductCapacity(H100, "nvidia.com/gpu", 3, 5, 1 - 3 / 5, 6, 2),
    )


def test_a_mig_only_node_has_no_whole_gpu_to_give() -> None:
    nodes = [
        make_node("mig-a", gpus=None, product=A100, allocatable={MIG: "7"}),
        make_node("h-a", gpus=1),
    ]
    rows = product_capacity(view_of(nodes, [holder("mig-a", 2, resource=MIG)]))
    assert [(r.product, r.resource, r.largest_request, r.free) for r in rows] == [
        (A100, MIG, 5, 5),
        (H100, "nvidia.com/gpu", 1, 1),
    ]


def test_the_standard_tolerations_and_minimal_pod_are_settings() -> None:
    nodes = [make_node("h-a", taints=(GPU_TAINT, INFERENCE_TAINT), cpu="1")]
    assert product_capacity(view_of(nodes))[0].largest_request == 0
    relaxed = view_of(
        nodes,
        standard_tolerations=(Toleration(operator="Exists"),),
        minimal_pod={"cpu": 1000},
    )
    assert product_capacity(relaxed)[0].largest_request == 8
