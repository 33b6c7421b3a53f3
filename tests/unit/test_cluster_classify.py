"""Why a GPU pod waits: one reason per scenario, the precedence between reasons, and the
evidence each reason carries (the nodes and the numbers `explain` prints)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from cluster_objects import (
    A100,
    GPU_TAINT,
    H100,
    INFERENCE_TAINT,
    MIG,
    PRODUCT,
    Scenario,
    as_manifest,
    make_gpu_pod,
    make_node,
    make_quota,
    scenarios,
)
from kube_gpu_exporter.exporter.cluster import (
    DEFAULT_SETTINGS,
    PENDING_REASONS,
    ClusterSettings,
    ClusterView,
    Filter,
    Pod,
    Reason,
    classify,
    parse_node,
    parse_pod,
    parse_quota,
)


def pod(obj: dict[str, Any]) -> Pod:
    parsed = parse_pod(obj, "ml")
    assert parsed is not None
    return parsed


def view_of(
    nodes: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    pods: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
    quotas: tuple[dict[str, Any], ...] = (),
    settings: ClusterSettings = DEFAULT_SETTINGS,
) -> ClusterView:
    return ClusterView.build(
        [n for n in map(parse_node, nodes) if n],
        [pod(p) for p in pods],
        [q for q in (parse_quota(q, settings) for q in quotas) if q],
        settings,
    )


def scenario_view(scenario: Scenario) -> tuple[ClusterView, Pod]:
    settings = ClusterSettings(
        gpu_type_labels=(*DEFAULT_SETTINGS.gpu_type_labels, *scenario.gpu_type_labels)
    )
    subject = pod(scenario.subject)
    pods = scenario.bound if scenario.manifest else (*scenario.bound, scenario.subject)
    return view_of(scenario.nodes, pods, scenario.quotas, settings), subject


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s.name)
def test_each_scenario_gets_its_reason(scenario: Scenario) -> None:
    view, subject = scenario_view(scenario)
    result = classify(view, subject, admitted=not scenario.manifest)
    assert result.reason == scenario.reason, result.summary
    assert result.schedulable is (scenario.reason is None)
    if not scenario.manifest and scenario.reason is not None:
        assert subject in view.pending_gpu_pods()
        assert result.pending_reason in PENDING_REASONS


def test_reasons_are_the_metric_label_values_in_precedence_order() -> None:
    assert [str(r) for r in PENDING_REASONS] == [
        "gated",
        "awaiting_preemption",
        "not_advertised",
        "fragmented",
        "taint_not_tolerated",
        "gpu_type_unavailable",
        "affinity_unmatched",
        "insufficient_gpus",
        "other",
    ]


def test_fragmentation_evidence_names_each_node_and_its_free_gpus() -> None:
    view, subject = scenario_view(next(s for s in scenarios() if s.name == "fragmented"))
    result = classify(view, subject)
    assert result.summary == (
        "3 nvidia.com/gpu free in total on the nodes the pod may use, but no node has 2 "
        "(gpu-a 1, gpu-b 1, gpu-c 1)"
    )
    assert dict(result.open_free) == {"nvidia.com/gpu": 3}
    assert [(c.node, c.gpu_free["nvidia.com/gpu"], c.failed) for c in result.nodes] == [
        (name, 1, frozenset({Filter.GPU})) for name in ("gpu-a", "gpu-b", "gpu-c")
    ]


def test_a_pod_that_fits_has_no_reason_but_reports_other_while_pending() -> None:
    view = view_of([make_node("gpu-a")])
    result = classify(view, pod(make_gpu_pod("train", 8)))
    assert result.reason is None and result.fits == ("gpu-a",)
    assert result.pending_reason is Reason.OTHER


def test_gates_come_before_everything_then_the_nomination() -> None:
    nodes = [make_node("gpu-a", gpus=0)]  # not advertised, too
    gated = make_gpu_pod("a", 1, gates=["kueue.x-k8s.io/admission"], nominated="gpu-a")
    nominated = make_gpu_pod("b", 1, nominated="gpu-a")
    view = view_of(nodes, [gated, nominated])
    assert classify(view, pod(gated)).reason is Reason.GATED
    assert classify(view, pod(nominated)).reason is Reason.AWAITING_PREEMPTION


def test_quota_counts_only_for_a_pod_not_yet_created() -> None:
    quota = make_quota("gpu-quota", hard=4, used=4)
    view = view_of([make_node("gpu-a")], quotas=(quota,))
    subject = pod(make_gpu_pod("train", 1))
    assert classify(view, subject).reason is None  # created: admission already let it in
    result = classify(view, subject, admitted=False)
    assert result.reason is Reason.QUOTA_EXCEEDED
    assert [(q.quota, q.left, q.exceeded) for q in result.quota] == [("gpu-quota", 0, True)]
    other_namespace = pod(make_gpu_pod("train", 1, namespace="research"))
    assert classify(view, other_namespace, admitted=False).reason is None


def test_a_mig_node_beside_a_tainted_free_node_is_not_a_device_plugin_problem() -> None:
    """The MIG node advertises MIG slices (its plugin is up): the whole GPU the pod wants is
    free only on a node whose taint it does not tolerate."""
    nodes = [
        make_node("mig-a", gpus=None, product=A100, allocatable={MIG: "7"}),
        make_node("gpu-a", taints=(GPU_TAINT, INFERENCE_TAINT)),
    ]
    result = classify(view_of(nodes), pod(make_gpu_pod("train", 1)))
    assert result.reason is Reason.TAINT_NOT_TOLERATED, result.summary
    mig = next(c for c in result.nodes if c.node == "mig-a")
    assert not mig.advertises and mig.failed == {Filter.GPU}


def test_a_silent_gpu_node_the_pod_may_use_is_not_advertised_even_if_others_are_full() -> None:
    nodes = [make_node("gpu-a"), make_node("gpu-b", gpus=0)]
    view = view_of(nodes, [make_gpu_pod("holder", 8, "batch", node="gpu-a")])
    result = classify(view, pod(make_gpu_pod("train", 1)))
    assert result.reason is Reason.NOT_ADVERTISED
    assert "no GPU resource at all advertised by gpu-b" in result.summary


def test_a_wrong_gpu_type_on_a_tainted_node_is_blamed_on_the_type() -> None:
    """No toleration would help a pod that asks for an A100 where only H100s are free."""
    nodes = [make_node("gpu-a", taints=(GPU_TAINT, INFERENCE_TAINT))]
    subject = make_gpu_pod("train", 1, node_selector={PRODUCT: A100})
    result = classify(view_of(nodes), pod(subject))
    assert result.reason is Reason.GPU_TYPE_UNAVAILABLE
    assert result.nodes[0].failed == {Filter.TAINTS, Filter.GPU_TYPE}


def test_taints_win_over_gpu_type_across_nodes() -> None:
    """One node with room is excluded by a taint only, another by its type: tolerating the
    taint would place the pod, so that is the reason."""
    nodes = [
        make_node("gpu-a", product=A100, taints=(GPU_TAINT, INFERENCE_TAINT)),
        make_node("gpu-b", product=H100),
    ]
    subject = make_gpu_pod("train", 1, node_selector={PRODUCT: A100})
    assert classify(view_of(nodes), pod(subject)).reason is Reason.TAINT_NOT_TOLERATED


def test_cordoned_and_not_ready_nodes_are_excluded_as_by_their_taints() -> None:
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    nodes = [
        make_node("gpu-a", unschedulable=True),
        make_node("gpu-b", ready=False, taints=(GPU_TAINT, not_ready)),
    ]
    result = classify(view_of(nodes), pod(make_gpu_pod("train", 1)))
    assert result.reason is Reason.TAINT_NOT_TOLERATED
    assert "node.kubernetes.io/unschedulable:NoSchedule on gpu-a" in result.summary
    assert "node.kubernetes.io/not-ready:NoSchedule on gpu-b" in result.summary


def test_a_node_not_ready_is_judged_by_the_taints_it_carries() -> None:
    """Ready Unknown (no kubelet heartbeat): the lifecycle controller taints the node
    `unreachable`, not `not-ready`; until it does, the scheduler binds pods there."""
    unreachable = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
    lost = make_node("gpu-a", ready=False, taints=(GPU_TAINT, unreachable))
    tolerating = make_gpu_pod("train", 1)
    tolerating["spec"]["tolerations"].append(
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"}
    )
    assert classify(view_of([lost]), pod(tolerating)).reason is None
    result = classify(view_of([lost]), pod(make_gpu_pod("train", 1)))
    assert result.reason is Reason.TAINT_NOT_TOLERATED
    assert "not-ready" not in result.summary
    assert classify(view_of([make_node("gpu-b", ready=False)]), pod(tolerating)).reason is None


def test_ended_pods_free_their_gpus_and_bound_pending_pods_hold_them() -> None:
    nodes = [make_node("gpu-a")]
    done = make_gpu_pod("done", 8, "batch", node="gpu-a", phase="Succeeded")
    view = view_of(nodes, [done])
    assert classify(view, pod(make_gpu_pod("train", 8))).reason is None
    starting = make_gpu_pod("starting", 8, "batch", node="gpu-a", phase="Pending")
    view = view_of(nodes, [starting])
    assert classify(view, pod(make_gpu_pod("train", 8))).reason is Reason.INSUFFICIENT_GPUS


def test_a_job_s_replicas_are_classified_once() -> None:
    view = view_of([make_node("gpu-a")])
    first = classify(view, pod(make_gpu_pod("train-0", 9)))
    again = classify(view, pod(make_gpu_pod("train-1", 9)))
    assert again is first and len(view.cache) == 1


def test_a_pod_asking_for_no_gpu_is_checked_against_every_node() -> None:
    nodes = [make_node("cpu-a", gpus=None, product=None, taints=(), cpu="2")]
    result = classify(view_of(nodes), pod(make_gpu_pod("web", 0, cpu="4")))
    assert result.reason is Reason.OTHER and [c.node for c in result.nodes] == ["cpu-a"]


def test_limits_stand_in_for_requests_in_a_manifest() -> None:
    manifest = as_manifest(make_gpu_pod("train", 2, limits_only=True))
    assert dict(pod(manifest).requests)["nvidia.com/gpu"] == 2


def test_a_classification_keeps_about_one_small_object_per_node() -> None:
    """The view's cache holds a classification per placement until the cycle ends, and the
    cycle's end frees them all at once, holding the GIL: at 6,000 nodes × 4 placements that
    was ~170,000 objects (a check, its attribute dict, its GPU dicts, its set of failed
    filters) and a 20 ms pause for the scrape waiting then. A check is one object now,
    sharing the node's state and the common sets of failed filters."""
    gc.collect()
    nodes = [make_node(f"gpu-{n:04}", taints=(GPU_TAINT, INFERENCE_TAINT)) for n in range(2000)]
    nodes += [make_node(f"open-{n:04}", gpus=8) for n in range(1000)]
    view = view_of(nodes)
    subject = pod(make_gpu_pod("job-0", gpus=8))
    classify(view, pod(make_gpu_pod("warm", gpus=4)))  # what the nodes cache of themselves
    gc.collect()
    before = sys.getallocatedblocks()
    result = classify(view, subject)
    gc.collect()
    kept = sys.getallocatedblocks() - before
    assert len(result.nodes) == 3000
    assert {c.fits for c in result.nodes} == {True, False}  # both kinds of check made
    assert kept < 1.3 * len(result.nodes), f"{kept} blocks for {len(result.nodes)} checks"
