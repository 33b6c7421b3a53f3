"""Rules the real kube-scheduler taught the classification (tests/integration/
test_scheduler_oracle.py): each case here is a class of disagreement it found, made small."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_objects import A100, GPU_TAINT, INFERENCE_TAINT, PRODUCT, make_gpu_pod, make_node
from kube_gpu_exporter.exporter.cluster import ClusterView, Reason, classify, parse_node, parse_pod
from kube_gpu_exporter.exporter.cluster.explain.manifest import load_manifest

NOT_READY_NO_EXECUTE = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}


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


def test_a_tainted_node_with_room_wins_over_a_silent_node() -> None:
    """Tolerating the taint places the pod (the scheduler binds it once every taint is
    tolerated): that is the reason, not a device plugin down on another node."""
    tainted = make_node("gpu-t", taints=(GPU_TAINT, INFERENCE_TAINT))
    silent = make_node("gpu-s", gpus=0)
    assert _reason([tainted, silent], make_gpu_pod("train", 4)) is Reason.TAINT_NOT_TOLERATED


def test_limit_fragmented_wins_over_a_taint_the_scheduler_would_pass() -> None:
    """A documented limit (docs/scheduler-agreement.md): free GPUs scattered over the nodes
    the pod may use are reported as `fragmented` even where a tainted node has room, which
    the scheduler would use once the pod tolerates the taint."""
    tainted = make_node("gpu-t", taints=(GPU_TAINT, INFERENCE_TAINT))
    halves = [make_node(f"gpu-{c}", gpus=2) for c in "ab"]
    assert _reason([tainted, *halves], make_gpu_pod("train", 4)) is Reason.FRAGMENTED


def test_a_node_with_room_short_of_cpu_wins_over_a_silent_node() -> None:
    short = make_node("gpu-a", cpu="4")
    silent = make_node("gpu-s", gpus=0)
    assert _reason([short, silent], make_gpu_pod("train", 4, cpu="16")) is Reason.OTHER


def test_explain_f_reads_the_manifest_with_the_tolerations_admission_adds(
    tmp_path: Path,
) -> None:
    """A node whose only taint is not-ready:NoExecute takes a created pod: the API server's
    DefaultTolerationSeconds adds the toleration (for 300 s) to every pod without one. The
    manifest has not been through admission; explain -f must judge the pod it will be."""
    node = make_node("gpu-a", ready=False, taints=(NOT_READY_NO_EXECUTE,))
    manifest = make_gpu_pod("train", 2)
    del manifest["status"]
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(manifest))
    parsed = parse_node(node)
    assert parsed is not None
    view = ClusterView.build([parsed], ())
    result = classify(view, load_manifest(str(path), "ml"), admitted=False)
    assert result.schedulable, result.summary
    own = dict(manifest, spec={**manifest["spec"], "tolerations": [{"operator": "Exists"}]})
    path.write_text(yaml.safe_dump(own))  # its own toleration covers it: nothing added
    pod = load_manifest(str(path), "ml")
    assert [t.key for t in pod.tolerations] == [""]


def test_a_node_of_the_wrong_gpu_type_is_not_also_said_to_fail_other_terms_pins() -> None:
    """Terms ORed, each pinning a node by name and asking for an A100: the H100 node fails
    only the GPU type (its own term's pin matches); the other terms' pins are not its
    failures, and explain must not list them as a selector it fails."""
    nodes = [make_node("gpu-a"), make_node("gpu-b")]
    terms = [
        {
            "matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [A100]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}],
        }
        for name in ("gpu-a", "gpu-b")
    ]
    parsed = [parse_node(n) for n in nodes]
    view = ClusterView.build([n for n in parsed if n is not None], ())
    pod = parse_pod(make_gpu_pod("train", 1, affinity_terms=terms))
    assert pod is not None
    result = classify(view, pod)
    assert result.reason is Reason.GPU_TYPE_UNAVAILABLE
    for check in result.nodes:
        assert check.selectors.other == (), check
