"""Rules the real kube-scheduler taught the classification (tests/integration/
test_scheduler_oracle.py): each case here is a class of disagreement it found, made small."""

from __future__ import annotations

from typing import Any

import pytest

from cluster_objects import A100, GPU_TAINT, INFERENCE_TAINT, PRODUCT, make_gpu_pod, make_node
from kube_gpu_exporter.exporter.cluster import ClusterView, Reason, classify, parse_node, parse_pod


def _reason(nodes: list[dict[str, Any]], pod: dict[str, Any]) -> Reason | None:
    parsed = [parse_node(n) for n in nodes]
    view = ClusterView.build([n for n in parsed if n is not None], ())
    subject = parse_pod(pod)
    assert subject is not None
    return classify(view, subject).reason


@pytest.mark.parametrize(
    ("blocked", "pod_extra"),
    [
        ({"taints": (GPU_TAINT, INFERENCE_TAINT)}, {}),
        ({"product": A100}, {"node_selector": {PRODUCT: "NVIDIA-H100-80GB-HBM3"}}),
        ({"labels": {"zone": "b"}}, {"node_selector": {"zone": "a"}}),
        ({"unschedulable": True}, {}),
    ],
    ids=["taint", "gpu type", "selector", "cordon"],
)
def test_a_node_with_gpus_but_too_little_cpu_is_not_blamed_on_what_else_excludes_it(
    blocked: dict[str, Any], pod_extra: dict[str, Any]
) -> None:
    """The only node with free GPUs is excluded by a taint (selector, cordon) and lacks CPU
    too: tolerating the taint (matching the selector) would not place the pod, so the
    reason is the CPU (`other`), as the scheduler itself says once the taint is tolerated."""
    node = make_node("gpu-a", cpu="4", **blocked)
    pod = make_gpu_pod("train", 2, cpu="16", **pod_extra)
    assert _reason([node], pod) is Reason.OTHER


def test_a_node_excluded_by_a_taint_alone_is_still_the_taints_fault() -> None:
    """A second node with free GPUs that only the taint excludes: tolerating it places the
    pod, whatever the first node lacks."""
    short = make_node("gpu-a", cpu="4", taints=(GPU_TAINT, INFERENCE_TAINT))
    tainted = make_node("gpu-b", taints=(GPU_TAINT, INFERENCE_TAINT))
    pod = make_gpu_pod("train", 2, cpu="16")
    assert _reason([short, tainted], pod) is Reason.TAINT_NOT_TOLERATED
