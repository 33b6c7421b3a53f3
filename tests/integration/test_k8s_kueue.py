"""The real Kueue in the test bench: built from its Go module, its CRDs and webhooks on
the real API server, and the real scheduler placing what it admits.

A GPU quota of 2 in one ClusterQueue: a Job asking 1 GPU is suspended by Kueue's webhook,
gets a Workload, is admitted and let go, and its pod is bound to a GPU node; a Job asking 2
more waits, its pods not yet created, with Kueue's own reason on its Workload. What Kueue
says is recorded here as it says it: the cluster view's reasons are to join them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane
from kueue import Kueue, install_v1beta1_only
from kueue_bench import (
    GPU,
    PRODUCT,
    V1BETA2,
    add_node,
    add_queues,
    cluster_queue_spec,
    condition,
    flavor_quota,
    gpu_job,
    gpu_pod_spec,
    job_pods,
    kueue_bench,
    kueue_object,
    listed_once,
    wait_active,
    wait_default_service_account,
    workload_of,
)
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.cluster.kueue import (
    LOCAL_QUEUES,
    WORKLOADS,
    WaitingWorkload,
    parse_local_queue,
    parse_workload,
    pending_workloads,
    served_version,
)
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch
from support import run_exporter, samples, values, wait_until

pytestmark = pytest.mark.k8s

V1BETA1 = "/apis/kueue.x-k8s.io/v1beta1"
FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE = "gpu-h100", "gpu-cq", "gpu-lq"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kueue]]:
    with kueue_bench(tmp_path_factory.mktemp("kueue-bench")) as bench:
        yield bench


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _namespace(plane: ControlPlane) -> str:
    name = _name("team")
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    wait_default_service_account(plane, name)
    return name


def _queues(plane: ControlPlane, namespace: str, gpus: int) -> None:
    """A ResourceFlavor for the H100 nodes, a ClusterQueue with `gpus` of them, a LocalQueue."""
    where = {"nodeLabels": {PRODUCT: "NVIDIA-H100-80GB-HBM3"}}
    plane.ok("POST", f"{V1BETA2}/resourceflavors", kueue_object("ResourceFlavor", FLAVOR, where))
    spec = cluster_queue_spec(flavor_quota(FLAVOR, gpus))
    add_queues(plane, namespace, CLUSTER_QUEUE, LOCAL_QUEUE, spec)
    wait_active(plane, [CLUSTER_QUEUE])


def _gpu_job(name: str, gpus: int) -> dict[str, Any]:
    return gpu_job(name, LOCAL_QUEUE, gpu_pod_spec(gpus))


def _workload_of(plane: ControlPlane, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue made for `job` (its owner reference is the Job)."""
    return wait_until(
        lambda: workload_of(plane, namespace, uid=job["metadata"]["uid"]),
        what=f"a Workload for Job {job['metadata']['name']}",
    )


def test_kueue_admits_within_gpu_quota_and_holds_the_rest(
    bench: tuple[ControlPlane, Kueue], tmp_path: Path
) -> None:
    plane, kueue = bench
    for _ in range(2):
        add_node(plane, _name("h100"), 8)
    namespace = _namespace(plane)
    _queues(plane, namespace, gpus=2)
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"

    # within quota: suspended by the webhook on creation, admitted, let go, placed
    first = plane.ok("POST", jobs, _gpu_job("fits", 1))
    assert first["spec"]["suspend"] is True, "Kueue's mutating webhook suspends a queued Job"
    workload = _workload_of(plane, namespace, first)
    assert workload["spec"]["queueName"] == LOCAL_QUEUE
    assert workload["spec"]["podSets"][0]["count"] == 1

    first_path = f"{V1BETA2}/namespaces/{namespace}/workloads/{workload['metadata']['name']}"

    def admitted() -> dict[str, Any] | None:
        wl = plane.ok("GET", first_path)
        done = condition(wl, "Admitted")
        return wl if done and done["status"] == "True" else None

    wl = wait_until(admitted, what="the first Workload admitted")
    reserved = condition(wl, "QuotaReserved")
    assert reserved is not None and reserved["status"] == "True", wl["status"]
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == CLUSTER_QUEUE
    assert admission["podSetAssignments"][0]["flavors"] == {GPU: FLAVOR}
    assert admission["podSetAssignments"][0]["resourceUsage"] == {GPU: "1"}
    wait_until(
        lambda: plane.ok("GET", f"{jobs}/fits")["spec"]["suspend"] is False,
        what="the admitted Job unsuspended",
    )
    pods = wait_until(
        lambda: [p for p in job_pods(plane, namespace, "fits") if p["spec"].get("nodeName")],
        what="the admitted Job's pod bound by the scheduler",
    )
    assert pods[0]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, (
        "Kueue injects the flavor's node labels"
    )

    # over quota: 1 of 2 used, 2 more asked: the Workload waits, and the Job has no pods
    second = plane.ok("POST", jobs, _gpu_job("waits", 2))
    waiting = _workload_of(plane, namespace, second)
    path = f"{V1BETA2}/namespaces/{namespace}/workloads/{waiting['metadata']['name']}"

    def refused() -> dict[str, Any] | None:
        found = condition(plane.ok("GET", path), "QuotaReserved")
        return found if found and found["status"] == "False" else None

    refusal = wait_until(refused, what="the second Workload's QuotaReserved=False")
    # Kueue v0.17.0's words (the reasons of 0.19+, WaitingForQuota …, are not in it yet)
    assert refusal["reason"] == "Pending", refusal
    assert refusal["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        f"{GPU} in flavor {FLAVOR}, 1 more needed"
    ), refusal
    assert plane.ok("GET", f"{jobs}/waits")["spec"]["suspend"] is True
    assert job_pods(plane, namespace, "waits") == []
    assert condition(plane.ok("GET", path), "Admitted") is None

    # the ClusterQueue's status follows on its own (Kueue updates it apart from the Workloads)
    def counted() -> dict[str, Any] | None:
        cq = plane.ok("GET", f"{V1BETA2}/clusterqueues/{CLUSTER_QUEUE}")["status"]
        return cq if (cq.get("pendingWorkloads"), cq.get("admittedWorkloads")) == (1, 1) else None

    cq = wait_until(counted, what="the ClusterQueue's status: 1 pending, 1 admitted")
    assert cq["flavorsUsage"] == [
        {"name": FLAVOR, "resources": [{"name": GPU, "total": "1", "borrowed": "0"}]}
    ], cq

    # the deprecated v1beta1 is still served, through Kueue's conversion webhook
    old = plane.ok("GET", f"{V1BETA1}/clusterqueues/{CLUSTER_QUEUE}")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert old["spec"]["resourceGroups"][0]["flavors"][0]["name"] == FLAVOR
    assert kueue.version in kueue.log_tail(10**6), "the built Kueue logs its pinned version"

    # Kueue's own metrics say the same (what users have today, and ours are to agree with)
    def kueue_says() -> dict[str, float]:
        return {
            f"{s.name}{dict(sorted(s.labels.items()))}": s.value
            for f in text_string_to_metric_families(kueue.metrics(plane.token))
            for s in f.samples
            if s.labels.get("cluster_queue") == CLUSTER_QUEUE
            and s.name in ("kueue_pending_workloads", "kueue_admitted_workloads_total")
        }

    said = {
        "kueue_admitted_workloads_total{'cluster_queue': 'gpu-cq', 'priority_class': '', "
        "'replica_role': 'standalone'}": 1.0,
        "kueue_pending_workloads{'cluster_queue': 'gpu-cq', 'replica_role': 'standalone', "
        "'status': 'active'}": 0.0,
        "kueue_pending_workloads{'cluster_queue': 'gpu-cq', 'replica_role': 'standalone', "
        "'status': 'inadmissible'}": 1.0,
    }
    wait_until(lambda: kueue_says() == said, what=f"Kueue's metrics to say {said}")

    # what the cluster view will read: the Workloads and LocalQueues through ListWatch on the
    # first Kueue version served (v1beta2 here), the admitted Job's Workload dropped
    held = _kueue_watched(plane)
    queued = _created(waiting)
    assert held[WORKLOADS] == {
        f"{namespace}/{waiting['metadata']['name']}": WaitingWorkload(
            namespace, LOCAL_QUEUE, "Pending", 2, queued
        )
    }
    assert held[LOCAL_QUEUES] == {f"{namespace}/{LOCAL_QUEUE}": CLUSTER_QUEUE}
    assert pending_workloads(held[WORKLOADS], held[LOCAL_QUEUES]) == {
        (CLUSTER_QUEUE, namespace, LOCAL_QUEUE, "Pending"): (1, 2, queued)
    }

    # and `kube-gpu-exporter cluster` as users run it: the waiting Job in Kueue's words
    with run_exporter(
        [f"--kubernetes.kubeconfig={plane.kubeconfig}", "--cluster.interval=200ms"],
        tmp_path,
        command="cluster",
    ) as exporter:
        series = {
            "cluster_queue": CLUSTER_QUEUE,
            "namespace": namespace,
            "local_queue": LOCAL_QUEUE,
            "reason": "Pending",
        }

        def served() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            status, _, body = exporter.get()
            parsed = samples(body) if status == 200 else {}
            return parsed if values(parsed, "kube_gpu_pending_workloads", **series) else None

        parsed = wait_until(served, what="kube_gpu_pending_workloads served")
        assert values(parsed, "kube_gpu_pending_workloads", **series) == [1.0]
        assert values(parsed, "kube_gpu_pending_workload_gpus", **series) == [2.0]
        assert len(values(parsed, "kube_gpu_pending_workloads")) == 1, "the admitted one is not"
        [age] = values(parsed, "kube_gpu_pending_workload_seconds", **series)
        assert 0 <= age <= time.time() - queued + 1, age  # creation times are whole seconds
        quota = {"cluster_queue": CLUSTER_QUEUE, "flavor": FLAVOR, "resource": GPU}
        assert values(parsed, "kube_gpu_queue_nominal_quota", **quota) == [2.0]
        assert values(parsed, "kube_gpu_queue_used_quota", **quota) == [1.0], "Kueue's count"
        assert values(parsed, "kube_gpu_queue_borrowing_limit") == [], "no limit set"
        # Workloads held: the admitted one too (its pod tied to its queue), and the waiting one
        for resource, held in (("workloads", 2.0), ("localqueues", 1.0), ("clusterqueues", 1.0)):
            assert values(parsed, "kube_gpu_cluster_watch_up", resource=resource) == [1.0]
            watched = values(parsed, "kube_gpu_cluster_watched_objects", resource=resource)
            assert watched == [held], resource


def _created(obj: dict[str, Any]) -> float:
    stamp = obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def _kueue_watched(plane: ControlPlane, version: str = "v1beta2") -> dict[str, dict[str, Any]]:
    """Kueue's Workloads and LocalQueues as two ListWatches hold them once listed."""
    parsers = {
        WORKLOADS: lambda obj: parse_workload(obj, ClusterSettings()),
        LOCAL_QUEUES: parse_local_queue,
    }
    held, versions = listed_once(plane, parsers)
    assert set(versions.values()) == {version}
    return held


def test_without_kueue_nothing_is_watched_and_nothing_fails(
    tmp_path: Any,
) -> None:
    """A cluster without Kueue: both watches idle as not served, up, without errors."""
    with run_control_plane(tmp_path / "plane") as plane:
        client = api_client(str(plane.kubeconfig))
        seen: list[dict[str, Any]] = []
        watch = ListWatch(
            WORKLOADS,
            served_version(client.lister, WORKLOADS),
            lambda obj: parse_workload(obj, ClusterSettings()),
            lambda objs: seen.append(dict(objs)),
        )
        watch.start()
        try:
            wait_until(lambda: seen and not watch.served, what="the watch idle, not served")
            assert watch.up and seen == [{}]
            assert not any(watch.errors_total.values()), watch.errors_total
        finally:
            watch.stop()
            client.close()


def test_a_server_with_only_v1beta1_is_read_on_it(tmp_path: Path) -> None:
    """Kueue before v1beta2 (its CRDs serving v1beta1 only): the same watches fall back to
    it. No Kueue runs, so the Workload has no condition yet: its reason is ""."""
    with run_control_plane(tmp_path / "plane") as plane:
        install_v1beta1_only(plane)
        namespace = "old-team"
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        old = f"{V1BETA1}/namespaces/{namespace}"
        plane.ok(
            "POST",
            f"{old}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": LOCAL_QUEUE},
                "spec": {"clusterQueue": "old-cq"},
            },
        )
        template = _gpu_job("old", 4)["spec"]["template"]
        made = plane.ok(
            "POST",
            f"{old}/workloads",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {"name": "job-old"},
                "spec": {
                    "queueName": LOCAL_QUEUE,
                    "podSets": [{"name": "main", "count": 2, "template": template}],
                },
            },
        )
        held = _kueue_watched(plane, version="v1beta1")
        assert pending_workloads(held[WORKLOADS], held[LOCAL_QUEUES]) == {
            ("old-cq", namespace, LOCAL_QUEUE, ""): (1, 8, _created(made))
        }
