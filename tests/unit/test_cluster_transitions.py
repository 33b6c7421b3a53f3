"""What the pod watch counts beside the view: scheduling waits (pending → bound, once) and
disruptions (once per pod uid, by the DisruptionTarget reason), and how both are rendered."""

from __future__ import annotations

from typing import Any

from cluster_objects import disrupted, make_gpu_pod, make_node, scheduled
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS, ClusterView, parse_node, parse_pod
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.transitions import (
    DISRUPTED_KEEP_SECONDS,
    Transitions,
)
from kube_gpu_exporter.exporter.exposition.cluster_families import (
    ClusterState,
    WatchHealth,
    cluster_families,
)
from kube_gpu_exporter.exporter.exposition.render import FamiliesBody
from support import samples, values


def pod(obj: dict[str, Any]) -> Pod:
    parsed = parse_pod(obj)
    assert parsed is not None
    return parsed


BOUND_AT = "2024-05-01T10:00:40Z"  # 40 s after the pods' creation


def test_a_wait_is_observed_once_when_a_watched_pending_pod_is_bound() -> None:
    now = [0.0]
    transitions = Transitions(DEFAULT_SETTINGS, clock=lambda: now[0])
    pending = make_gpu_pod("train", 2)
    transitions.observe(pod(pending))
    transitions.observe(pod(scheduled(pending, "gpu-a", BOUND_AT)))
    # a later event of the same pod
    transitions.observe(pod(scheduled(pending, "gpu-a", BOUND_AT)))
    # first seen bound
    transitions.observe(pod(scheduled(make_gpu_pod("already", 1), "gpu-a", BOUND_AT)))
    transitions.observe(pod(make_gpu_pod("cpu", 0)))  # no GPU
    counts = transitions.snapshot()
    (histogram,) = counts.waits.values()
    assert list(counts.waits) == [("ml", "nvidia.com/gpu")]
    assert sum(histogram.counts) == 1 and histogram.total == 40.0


def test_a_disruption_is_counted_once_per_pod_and_forgotten_after_an_hour() -> None:
    now = [0.0]
    transitions = Transitions(DEFAULT_SETTINGS, clock=lambda: now[0])
    victim = make_gpu_pod("victim", 1, "batch", node="gpu-a")
    for reason in ("EvictionByEvictionAPI", "EvictionByEvictionAPI", "Unheard"):
        transitions.observe(pod(disrupted(victim, reason)))
    other = make_gpu_pod("other", 1, "batch", node="gpu-a")
    transitions.observe(pod(disrupted(other, "DeletionByPodGC")))
    assert transitions.snapshot().disruptions == {
        ("batch", "nvidia.com/gpu", "evicted"): 1,
        ("batch", "nvidia.com/gpu", "node_lost"): 1,
    }
    now[0] = DISRUPTED_KEEP_SECONDS + 1
    transitions.forget([], seen_before=now[0])
    transitions.observe(pod(disrupted(victim, "EvictionByEvictionAPI")))
    assert transitions.snapshot().disruptions[("batch", "nvidia.com/gpu", "evicted")] == 2


def test_a_pending_pod_that_is_gone_is_forgotten() -> None:
    now = [0.0]
    transitions = Transitions(DEFAULT_SETTINGS, clock=lambda: now[0])
    pending = make_gpu_pod("train", 1)
    transitions.observe(pod(pending))
    now[0] = 10.0
    transitions.forget([], seen_before=5.0)  # deleted while pending
    # a pod of the same name, bound at once
    transitions.observe(pod(scheduled(pending, "gpu-a", BOUND_AT)))
    assert transitions.snapshot().waits == {}


def test_families_render_as_text_and_openmetrics() -> None:
    transitions = Transitions(DEFAULT_SETTINGS)
    pending = make_gpu_pod("train", 2)
    transitions.observe(pod(pending))
    transitions.observe(pod(scheduled(pending, "gpu-a", BOUND_AT)))
    nodes = [n for n in map(parse_node, [make_node("gpu-a")]) if n]
    view = ClusterView.build(nodes, [pod(make_gpu_pod("wait", 9))])
    state = ClusterState(
        view,
        {"pods": WatchHealth(True, {"gone": 1}, 1)},
        1714557700.0,
        0.0,
        transitions.snapshot(),
    )
    body = FamiliesBody(list(cluster_families(state)))
    text, _ = body.body("", gzipped=False)
    parsed = samples(text)
    assert values(parsed, "kube_gpu_pending_pods", reason="insufficient_gpus") == [1]
    assert values(
        parsed, "kube_gpu_pending_seconds", namespace="ml", reason="insufficient_gpus"
    ) == [100.0]
    assert values(parsed, "kube_gpu_scheduling_wait_seconds_bucket", le="+Inf") == [1]
    assert values(parsed, "kube_gpu_cluster_watch_errors_total", kind="gone") == [1]
    openmetrics, content_type = body.body("application/openmetrics-text", gzipped=True)
    assert content_type.startswith("application/openmetrics-text")
    import gzip

    assert gzip.decompress(openmetrics).endswith(b"# EOF\n")
