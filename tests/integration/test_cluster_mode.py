"""`kube-gpu-exporter cluster` against the test API server over real HTTP: the pending-pod
scenarios seeded together in one cluster (fragmentation, a pod pinned to A100s with only
H100s free, a tainted node, a Kueue-gated pod, a quota used up), the metrics it serves, and
how watch events (a pod scheduled, a pod removed) change them."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from cluster_objects import (
    A100,
    GPU_TAINT,
    H100,
    INFERENCE_TAINT,
    PRODUCT,
    Scenario,
    disrupted,
    make_gpu_pod,
    make_node,
    make_quota,
    scenarios,
    scheduled,
)
from kube_gpu_exporter.demo.kube_api import PODS_PATH, KubeApiServer
from support import Exporter, exporter_command, run_exporter, values, wait_until

GPU = "nvidia.com/gpu"
NOT_LISTED = b"the nodes, pods and resourcequotas have not all been listed yet"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def seed(api: KubeApiServer) -> None:
    """Three H100 nodes with one free GPU each, an empty H100 node tainted for inference,
    a full A100 node, and one pending pod per reason in its own namespace."""
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        api.put_node(make_node(name))
        api.put(make_gpu_pod(f"holder-{name}", 7, "batch", node=name))
    api.put_node(make_node("gpu-t", taints=(GPU_TAINT, INFERENCE_TAINT)))
    api.put_node(make_node("a100-a", product=A100))
    api.put(make_gpu_pod("holder-a100", 8, "batch", node="a100-a"))
    api.put(make_gpu_pod("train", 2, "frag"))
    api.put(make_gpu_pod("big", 4, "tainted"))
    api.put(make_gpu_pod("pinned", 1, "pinned", node_selector={PRODUCT: A100}))
    api.put(make_gpu_pod("queued", 1, "gated", gates=["kueue.x-k8s.io/admission"]))
    api.put(make_gpu_pod("web", 0, "web"))  # pending, no GPU: not a GPU pod, not held
    api.put_quota(make_quota("gpu-quota", "team", hard=8, used=8))


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


def start(api: KubeApiServer, tmp_path: Path, *args: str) -> AbstractContextManager[Exporter]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    return run_exporter(
        [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms", *args],
        tmp_path,
        command="cluster",
    )


def pending(parsed: Samples, namespace: str) -> dict[tuple[str, str, str], float]:
    """(resource, gpu_product, reason) → pods, for one namespace."""
    out = {}
    for (name, labels), value in parsed.items():
        got = dict(labels)
        if name == "kube_gpu_pending_pods" and got["namespace"] == namespace:
            out[(got["resource"], got["gpu_product"], got["reason"])] = value
    return out


def test_scenarios_metrics_and_watch_events(api: KubeApiServer, tmp_path: Path) -> None:
    seed(api)
    with start(api, tmp_path) as exporter:
        m = exporter.metrics()
        assert pending(m, "frag") == {(GPU, "", "fragmented"): 1}
        assert pending(m, "tainted") == {(GPU, "", "taint_not_tolerated"): 1}
        assert pending(m, "pinned") == {(GPU, A100, "gpu_type_unavailable"): 1}
        assert pending(m, "gated") == {(GPU, "", "gated"): 1}
        assert pending(m, "web") == {}
        created = time.time() - 1714557600  # cluster_objects.CREATED, 2024-05-01T10:00:00Z
        for namespace in ("frag", "tainted", "pinned", "gated"):
            (age,) = values(m, "kube_gpu_pending_seconds", namespace=namespace)
            assert created - 60 < age < created + 60

        node = {"node": "gpu-a", "resource": GPU, "gpu_product": H100}
        assert values(m, "kube_gpu_node_allocatable_devices", **node) == [8]
        assert values(m, "kube_gpu_node_allocated_devices", **node) == [7]
        assert values(m, "kube_gpu_node_free_devices", **node) == [1]
        assert values(m, "kube_gpu_node_free_devices", node="gpu-t") == [8]
        assert values(m, "kube_gpu_node_free_devices", node="a100-a") == [0]
        h100 = {"gpu_product": H100, "resource": GPU}
        a100 = {"gpu_product": A100, "resource": GPU}
        # gpu-t's inference taint is not in the standard GPU tolerations: not eligible
        assert values(m, "kube_gpu_largest_schedulable_request", **h100) == [1]
        assert values(m, "kube_gpu_fragmentation_ratio", **h100) == [pytest.approx(2 / 3)]
        assert values(m, "kube_gpu_largest_schedulable_request", **a100) == [0]
        assert values(m, "kube_gpu_fragmentation_ratio", **a100) == [0]

        quota = {"namespace": "team", "quota": "gpu-quota", "resource": GPU}
        assert values(m, "kube_gpu_quota_hard", **quota) == [8]
        assert values(m, "kube_gpu_quota_used", **quota) == [8]
        for resource in ("nodes", "pods", "resourcequotas"):
            assert values(m, "kube_gpu_cluster_watch_up", resource=resource) == [1]
        # 4 holders, the 4 pending GPU pods; the pending pod without a GPU is not held
        assert values(m, "kube_gpu_cluster_watched_objects", resource="pods") == [8]
        assert values(m, "kube_gpu_cluster_watched_objects", resource="nodes") == [5]

        # a holder leaves: gpu-a has 8 free, the fragmented pod now fits (pending: other)
        api.delete("batch", "holder-gpu-a")
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_node_free_devices", **node) == [8],
            "gpu-a freed",
        )
        assert pending(m, "frag") == {(GPU, "", "other"): 1}
        assert pending(m, "tainted") == {(GPU, "", "other"): 1}  # 4 fit on gpu-a now
        assert values(m, "kube_gpu_largest_schedulable_request", **h100) == [8]

        # the scheduler binds it: no longer pending, its GPUs allocated on gpu-a
        api.put(make_gpu_pod("train", 2, "frag", node="gpu-a"))
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_node_allocated_devices", **node) == [2],
            "train bound to gpu-a",
        )
        assert pending(m, "frag") == {}
        assert values(m, "kube_gpu_pending_seconds", namespace="frag") == []

        # the gated pod is deleted: its series go
        api.delete("gated", "queued")
        m = exporter.metrics_when(lambda m: not pending(m, "gated"), "gated pod removed")
        assert pending(m, "pinned") == {(GPU, A100, "gpu_type_unavailable"): 1}

        # a quota's usage changes
        api.put_quota(make_quota("gpu-quota", "team", hard=8, used=2))
        exporter.metrics_when(
            lambda m: values(m, "kube_gpu_quota_used", **quota) == [2],
            "quota used updated",
        )

        # a quota the quota controller has not counted yet: its use is unknown, not 0
        api.put_quota(make_quota("new-quota", "team", hard=4, used=None))
        fresh = {**quota, "quota": "new-quota"}
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_quota_hard", **fresh) == [4], "the new quota"
        )
        assert values(m, "kube_gpu_quota_used", **fresh) == []


@pytest.mark.parametrize(
    "scenario", [s for s in scenarios() if not s.manifest], ids=lambda s: s.name
)
def test_each_explain_scenario_is_served_with_its_reason(
    scenario: Scenario, api: KubeApiServer, tmp_path: Path
) -> None:
    """The classification `explain` gives each scenario's pod is the served `reason`."""
    for node in scenario.nodes:
        api.put_node(node)
    for pod in (*scenario.bound, scenario.subject):
        api.put(pod)
    labels = [f"--cluster.gpu-type-label={label}" for label in scenario.gpu_type_labels]
    with start(api, tmp_path, *labels) as exporter:
        reasons = {r for (_, _, r) in pending(exporter.metrics(), "ml")}
    assert reasons == {scenario.reason or "other"}


def test_not_ready_until_every_resource_is_listed(api: KubeApiServer, tmp_path: Path) -> None:
    seed(api)
    api.stall(3.0, times=1, resource="nodes")  # readiness waits for the nodes' list
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
    with run_exporter(args, tmp_path, wait_ready=False, command="cluster") as exporter:
        status, _, body = exporter.get("/readyz")
        assert (status, body) == (503, b"not ready: " + NOT_LISTED + b"\n")
        assert exporter.get()[0] == 503
        wait_until(lambda: exporter.get("/readyz")[0] == 200, what="ready once listed")
        assert values(exporter.metrics(), "kube_gpu_pending_pods", namespace="frag") == [1]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for bad in ("--cluster.interval=1ms", "--web.listen-address=nope", "--web.telemetry-path=/"):
        done = subprocess.run(
            exporter_command("cluster", bad), capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 2, bad
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    missing = subprocess.run(
        exporter_command("cluster", f"--kubernetes.kubeconfig={tmp_path / 'none'}"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"kube-gpu-exporter: error: kubeconfig {tmp_path / 'none'}: no such file"
    ]


def test_scheduling_wait_and_disruptions(api: KubeApiServer, tmp_path: Path) -> None:
    seed(api)
    waiting = make_gpu_pod("wait", 2, "queue")
    api.put(waiting)
    victim = make_gpu_pod("victim", 1, "batch", node="gpu-b")
    api.put(victim)
    with start(api, tmp_path) as exporter:
        m = exporter.metrics()
        assert values(m, "kube_gpu_scheduling_wait_seconds_count") == []
        assert values(m, "kube_gpu_pod_disruptions_total") == []

        api.delete("batch", "holder-gpu-a")
        api.put(scheduled(waiting, "gpu-a", "2024-05-01T10:01:30Z"))  # 90 s after creation
        series = {"namespace": "queue", "resource": GPU}
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_scheduling_wait_seconds_count", **series) == [1],
            "the wait observed",
        )
        assert values(m, "kube_gpu_scheduling_wait_seconds_sum", **series) == [90]
        assert values(m, "kube_gpu_scheduling_wait_seconds_bucket", **series, le="60.0") == [0]
        assert values(m, "kube_gpu_scheduling_wait_seconds_bucket", **series, le="120.0") == [1]

        # preempted: the condition is seen on two events, counted once; then the pod goes
        api.put(disrupted(victim, "PreemptionByScheduler"))
        api.put(disrupted(victim, "PreemptionByScheduler"))
        api.delete("batch", "victim")
        preempted = {"namespace": "batch", "resource": GPU, "reason": "preempted"}
        m = exporter.metrics_when(
            lambda m: values(m, "kube_gpu_pod_disruptions_total", **preempted) == [1],
            "the preemption counted",
        )
        time.sleep(0.5)
        assert values(exporter.metrics(), "kube_gpu_pod_disruptions_total", **preempted) == [1]
        # a pod already bound at start, and the pod with no GPU, gave no wait
        assert len(values(m, "kube_gpu_scheduling_wait_seconds_count")) == 1


def test_lists_are_paged(api: KubeApiServer, tmp_path: Path) -> None:
    """Only one page of raw JSON at a time: 1,100 pods come in three consistent pages."""
    api.put_node(make_node("gpu-a", cpu="2000"))
    for i in range(1100):
        api.put(make_gpu_pod(f"p{i}", 0, "web", node="gpu-a", cpu="1"), notify=False)
    with start(api, tmp_path) as exporter:
        m = exporter.metrics()
        assert values(m, "kube_gpu_cluster_watched_objects", resource="pods") == [1100]
        assert values(m, "kube_gpu_node_allocated_devices", node="gpu-a") == [0]
    pages = [r.params for r in api.lists(PODS_PATH)]
    assert [p.get("limit") for p in pages] == ["500"] * 3
    assert "resourceVersion" not in pages[0] and "continue" not in pages[0]
    assert all(p.get("continue") for p in pages[1:])


def test_web_config_basic_auth_as_serve(api: KubeApiServer, tmp_path: Path) -> None:
    """The same serving stack as `serve`: the web config's basic auth guards /metrics, the
    probes stay open."""
    import base64

    import bcrypt

    seed(api)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {hashed}\n")
    with start(api, tmp_path, f"--web.config.file={web}") as exporter:
        assert exporter.get("/metrics")[0] == 401
        assert exporter.get("/healthz")[0] == 200
        token = base64.b64encode(b"alice:s3cret").decode()
        status, _, body = exporter.get("/metrics", Authorization=f"Basic {token}")
        assert status == 200 and b"kube_gpu_pending_pods{" in body
