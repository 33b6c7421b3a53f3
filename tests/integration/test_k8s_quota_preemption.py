"""The cluster view's counters against what the real control plane does, not what our API
server fakes: the ResourceQuota admission and the Job and ReplicaSet controllers refuse and
retry pods over a GPU quota (their `FailedCreate` events, repeated and "combined from similar
events" by the controllers' own event recorder); the real scheduler preempts a lower-priority
GPU pod (the DisruptionTarget condition, then a graceful deletion no kubelet completes); and
pods wait for the scheduler for as long as their own PodScheduled conditions say.

`kube-gpu-exporter cluster` runs as users run it, on the admin kubeconfig, and every figure on
its /metrics is compared with what the API server holds at the end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane

from kube_gpu_exporter.demo.kube_api.cluster_objects import make_node
from kube_gpu_exporter.exporter.cluster.transitions import BUCKETS
from support import Exporter, run_exporter, values, wait_until

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
QUOTA = "gpu-quota"
OWNER_TAINT = "kube-gpu-exporter.test/owner"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with run_control_plane(
        tmp_path_factory.mktemp("control-plane"),
        scheduler=True,
        controllers=(
            "serviceaccount",
            "resourcequota",
            "job",
            "replicaset",
        ),
    ) as plane:
        yield plane


@pytest.fixture(scope="module")
def exporter(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """One cluster view for the module, started before any test's objects exist, so that
    every refusal and wait happens while it watches."""
    args = [f"--kubernetes.kubeconfig={plane.kubeconfig}", "--cluster.interval=200ms"]
    with run_exporter(args, tmp_path_factory.mktemp("cluster"), command="cluster") as running:
        yield running


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def namespace(plane: ControlPlane) -> str:
    name = _name("ns")
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    wait_until(
        lambda: (
            plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200
        ),
        what="the namespace's default ServiceAccount",
    )
    return name


def gpu_node(plane: ControlPlane, gpus: int) -> str:
    """A Ready node with `gpus` H100s, as a kubelet would register it, tainted for the test
    that made it (`only_on`): the other tests' pods left pending in this module's control
    plane (a quota test's orphaned one) would otherwise be bound to it first and take its
    GPUs, and a victim would then wait on a preemption of its own."""
    name = _name("gpu-node")
    owner = {"key": OWNER_TAINT, "value": name, "effect": "NoSchedule"}
    node = make_node(name, gpus, taints=(owner,))
    del node["metadata"]["uid"]
    plane.ok("POST", "/api/v1/nodes", node)
    return name


def only_on(node: str) -> dict[str, Any]:
    """The pod spec fields that put a pod on `node` (from `gpu_node`) and nowhere else."""
    toleration = {"key": OWNER_TAINT, "operator": "Equal", "value": node, "effect": "NoSchedule"}
    return {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [toleration]}


def bound(plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The pod once the scheduler has bound it. Timed out, the failure says what the scheduler
    said of it (its PodScheduled condition and its events), for a run that cannot be repeated."""
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    try:
        return wait_until(
            lambda: (found := plane.ok("GET", path))["spec"].get("nodeName") and found,
            what=f"{name} bound",
        )
    except AssertionError as timed_out:
        pod = plane.ok("GET", path)
        events = plane.ok("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        said = [
            f"{e.get('reason')}: {e.get('message')}"
            for e in events
            if e["involvedObject"].get("name") == name
        ]
        conditions = pod.get("status", {}).get("conditions")
        raise AssertionError(f"{timed_out}; conditions {conditions}; events {said}") from None


def pod_spec(gpus: int, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "cuda",
        "image": "registry.invalid/cuda:none",  # no kubelet runs: never pulled
        "resources": {"limits": {GPU: str(gpus)}},
    }
    return {"containers": [container], **spec}


def timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def scheduled_at(pod: dict[str, Any]) -> float | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "True":
            return timestamp(condition["lastTransitionTime"])
    return None


def refusals(plane: ControlPlane, ns: str) -> dict[str, int]:
    """The namespace's quota refusals as the API server holds them: each FailedCreate
    event's uid → how often it happened (`count`, or `series.count`)."""
    found = {}
    for event in plane.ok("GET", f"/api/v1/namespaces/{ns}/events")["items"]:
        if event.get("reason") == "FailedCreate" and f"exceeded quota: {QUOTA}," in event.get(
            "message", ""
        ):
            counts = (event.get("count") or 1, (event.get("series") or {}).get("count") or 1)
            found[event["metadata"]["uid"]] = max(counts)
    return found


def settled(plane: ControlPlane, ns: str) -> dict[str, int]:
    """`refusals` once they stop changing for 3 s (the recorder writes asynchronously)."""
    last: list[dict[str, int]] = [{}]

    def same() -> dict[str, int] | None:
        now = refusals(plane, ns)
        if now == last[0]:
            return now
        last[0] = now
        time.sleep(3)
        return None

    return wait_until(same, timeout=60, what="the refusal events to settle")


def test_quota_refusals_and_usage_as_the_controllers_record_them(
    plane: ControlPlane, exporter: Exporter
) -> None:
    """A quota of one GPU; a Job of three 1-GPU pods and a ReplicaSet of three: one pod is
    admitted, the rest refused, and both controllers retry with backoff, each retry a new
    FailedCreate event until the recorder combines them into one whose count grows. The
    counter equals the events' counts summed (every retry once, none twice), and the quota
    gauges equal the quota's status as the ResourceQuota controller wrote it."""
    ns = namespace(plane)
    plane.ok(
        "POST",
        f"/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": QUOTA}, "spec": {"hard": {f"requests.{GPU}": "1"}}},
    )
    wait_until(
        lambda: (
            plane.ok("GET", f"/api/v1/namespaces/{ns}/resourcequotas/{QUOTA}")
            .get("status", {})
            .get("used")
        ),
        what="the quota's status",
    )
    template = {"spec": pod_spec(1, restartPolicy="Never")}
    plane.ok(
        "POST",
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        {"metadata": {"name": "train"}, "spec": {"parallelism": 3, "template": template}},
    )
    labels = {"app": "serve"}
    plane.ok(
        "POST",
        f"/apis/apps/v1/namespaces/{ns}/replicasets",
        {
            "metadata": {"name": "serve"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec(1)},
            },
        },
    )
    # enough retries that the recorder has combined some (after 10 similar events)
    wait_until(
        lambda: any(count > 1 for count in refusals(plane, ns).values()),
        timeout=90,
        what="a combined refusal event",
    )
    for path in (f"/apis/batch/v1/namespaces/{ns}/jobs/train",
                 f"/apis/apps/v1/namespaces/{ns}/replicasets/serve"):  # fmt: skip
        plane.ok("DELETE", path, {"propagationPolicy": "Orphan"})  # the retries stop
    held = settled(plane, ns)

    series = {"namespace": ns, "quota": QUOTA, "resource": GPU}
    m = exporter.metrics_when(
        lambda m: values(m, "kube_gpu_quota_rejected_pods_total", **series) == [sum(held.values())],
        f"{sum(held.values())} refusals counted",
    )
    status = plane.ok("GET", f"/api/v1/namespaces/{ns}/resourcequotas/{QUOTA}")["status"]
    assert values(m, "kube_gpu_quota_hard", **series) == [int(status["hard"][f"requests.{GPU}"])]
    assert values(m, "kube_gpu_quota_used", **series) == [int(status["used"][f"requests.{GPU}"])]
    assert status["used"][f"requests.{GPU}"] == "1"
    time.sleep(1)  # several more cycles: nothing counted again
    again = exporter.metrics()
    assert values(again, "kube_gpu_quota_rejected_pods_total", **series) == [sum(held.values())]


def test_preemption_and_scheduling_waits_as_the_scheduler_makes_them(
    plane: ControlPlane, exporter: Exporter
) -> None:
    """A low-priority pod takes a node's two GPUs; a high-priority pod asking for both makes
    the scheduler preempt it: DisruptionTarget (PreemptionByScheduler), then a graceful
    deletion that no kubelet completes, so the victim stays Terminating and holds its GPUs —
    the preemptor waits, nominated, and the view says `awaiting_preemption`. The test then
    does what the kubelet would (deletes it at once): the preemptor is bound. One disruption
    is counted however many events carried the condition, and the histogram of waits is the
    pods' own creation → PodScheduled times."""
    ns = namespace(plane)
    node = gpu_node(plane, 2)
    low, high = _name("low"), _name("high")
    for name, value in ((low, 100), (high, 1000)):
        plane.ok(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": name}, "value": value},
        )
    pinned = only_on(node)

    def create(name: str, priority: str) -> None:
        plane.ok(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": {"name": name}, "spec": pod_spec(2, priorityClassName=priority, **pinned)},
        )

    def get(name: str) -> dict[str, Any]:
        found: dict[str, Any] = plane.ok("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        return found

    create("victim", low)
    bound(plane, ns, "victim")
    create("preemptor", high)
    victim = wait_until(
        lambda: (found := get("victim"))["metadata"].get("deletionTimestamp") and found,
        what="the victim preempted",
    )
    (target,) = (c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "PreemptionByScheduler"
    preempted = {"namespace": ns, "resource": GPU, "reason": "preempted"}
    m = exporter.metrics_when(
        lambda m: values(m, "kube_gpu_pod_disruptions_total", **preempted) == [1],
        "the preemption counted",
    )
    # no kubelet: the victim stays, Terminating, and the scheduler still counts its GPUs
    time.sleep(3)
    assert get("victim")["metadata"].get("deletionTimestamp")
    assert get("preemptor")["status"].get("nominatedNodeName") == node
    assert not get("preemptor")["spec"].get("nodeName")
    m = exporter.metrics()
    waiting = {"namespace": ns, "resource": GPU, "reason": "awaiting_preemption"}
    assert values(m, "kube_gpu_pending_pods", **waiting) == [1]
    assert values(m, "kube_gpu_node_allocated_devices", node=node) == [2]

    # what the kubelet does once the victim's containers have stopped
    plane.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/victim", {"gracePeriodSeconds": 0})
    preemptor = bound(plane, ns, "preemptor")
    waits = [
        scheduled_at(pod) - timestamp(pod["metadata"]["creationTimestamp"])
        for pod in (victim, preemptor)
    ]
    assert waits[1] >= 3, waits  # it waited while the victim terminated
    series = {"namespace": ns, "resource": GPU}
    m = exporter.metrics_when(
        lambda m: values(m, "kube_gpu_scheduling_wait_seconds_count", **series) == [2],
        "both waits observed",
    )
    assert values(m, "kube_gpu_scheduling_wait_seconds_sum", **series) == [sum(waits)]
    for upper in BUCKETS:
        expected = sum(1 for wait in waits if wait <= upper)
        assert values(m, "kube_gpu_scheduling_wait_seconds_bucket", **series, le=str(upper)) == [
            expected
        ], upper
    assert values(m, "kube_gpu_pod_disruptions_total", **preempted) == [1]
    assert values(m, "kube_gpu_pending_pods", namespace=ns) == []
    assert values(m, "kube_gpu_node_allocated_devices", node=node) == [2]


def test_an_eviction_is_counted_once_by_its_reason(plane: ControlPlane, exporter: Exporter) -> None:
    """The Eviction API (what `kubectl drain` and autoscalers call) marks the pod with its
    DisruptionTarget reason before the graceful deletion: one disruption, `evicted`, and none
    again when the pod finally goes. (The taint-eviction controller's NoExecute deletions are
    not run here: it finds a node's pods through an index only the node-lifecycle controller
    adds, and that controller would mark every kubelet-less node NotReady.)"""
    ns = namespace(plane)
    node = gpu_node(plane, 4)
    pinned = pod_spec(1, **only_on(node))
    pod = {"metadata": {"name": "drained"}, "spec": pinned}
    plane.ok("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    path = f"/api/v1/namespaces/{ns}/pods/drained"
    bound(plane, ns, "drained")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "drained"}}
    plane.ok("POST", f"{path}/eviction", eviction)
    evicted = wait_until(
        lambda: (found := plane.ok("GET", path))["metadata"].get("deletionTimestamp") and found,
        what="the pod terminating",
    )
    (target,) = (c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "EvictionByEvictionAPI"
    series = {"namespace": ns, "resource": GPU}
    exporter.metrics_when(
        lambda m: values(m, "kube_gpu_pod_disruptions_total", **series, reason="evicted") == [1],
        "the eviction counted",
    )
    plane.ok("DELETE", path, {"gracePeriodSeconds": 0})  # what the kubelet does
    wait_until(lambda: plane.request("GET", path)[0] == 404, what="the pod gone")
    time.sleep(1)
    assert values(exporter.metrics(), "kube_gpu_pod_disruptions_total", **series) == [1]
