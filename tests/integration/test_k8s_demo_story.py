"""The demo's cluster story told twice: to the demo's own small API server (demo/kube_api, what
`make demo` starts for a fast start) and to the real kube-apiserver, scheduler and controllers.
`kube-gpu-exporter cluster` watches each, and the cluster view's figures must be the same:
the small server is only a faster stand-in if nothing the view reports depends on it.

The story is put into the real server by the same `populate` the demo runs, through an
adapter that creates each object with the API (namespaces first); the real server then does
its own part — it sets creation times and uids, resets the pods' and the quota's status, the
scheduler finds the pending pods unschedulable, the ResourceQuota controller counts the
quota's use, and the Job controller's FailedCreate events stand in for the demo's recorded
refusal. What only differs by when the story was told (the pending pods' ages, the refusals'
count) is compared as the series present, the rest value for value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane

from kube_gpu_exporter.demo.cluster_story import QUOTA_NAMESPACE, populate, record_refusal
from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.demo.kube_api.cluster_objects import GPU_TOLERATION
from kube_gpu_exporter.demo.run import SCENARIO
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import Exporter, run_exporter, values, wait_until

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
# Series compared value for value: everything the view builds from nodes, pods and quotas.
SAME_VALUES = (
    "kube_gpu_pending_pods",
    "kube_gpu_node_allocatable_devices",
    "kube_gpu_node_allocated_devices",
    "kube_gpu_node_free_devices",
    "kube_gpu_largest_schedulable_request",
    "kube_gpu_fragmentation_ratio",
    "kube_gpu_quota_hard",
    "kube_gpu_quota_used",
    "kube_gpu_cluster_watch_up",
)
# Series compared by their labels: their values depend on when the story was told.
SAME_SERIES = ("kube_gpu_pending_seconds", "kube_gpu_quota_rejected_pods_total")


class RealApi:
    """What `populate` calls on the demo's server, done on the real one."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.namespaces: set[str] = set()

    def put_node(self, node: dict[str, Any]) -> None:
        self.plane.ok("POST", "/api/v1/nodes", node)

    def put(self, pod: dict[str, Any]) -> None:
        namespace = self._namespace(pod)
        for container in pod["spec"]["containers"]:
            # the demo's story pods name no image: the real server requires one
            container.setdefault("image", "registry.invalid/story:none")
        self.plane.ok("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def put_quota(self, quota: dict[str, Any]) -> None:
        namespace = self._namespace(quota)
        self.plane.ok("POST", f"/api/v1/namespaces/{namespace}/resourcequotas", quota)

    def _namespace(self, obj: dict[str, Any]) -> str:
        namespace: str = obj["metadata"]["namespace"]
        if namespace not in self.namespaces:
            self.plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            self.namespaces.add(namespace)
        return namespace


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario.load(SCENARIO)


def cluster_view(kubeconfig: Path, tmp_path: Path) -> Any:
    args = [f"--kubernetes.kubeconfig={kubeconfig}", "--cluster.interval=200ms"]
    return run_exporter(args, tmp_path, command="cluster")


def relevant(m: Samples) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float], set[Any]]:
    """(the series compared by value, the labels of those compared by presence)."""
    compared = {key: value for key, value in m.items() if key[0] in SAME_VALUES}
    present = {key for key in m if key[0] in SAME_SERIES}
    return compared, present


@pytest.fixture(scope="module")
def demo_metrics(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Samples]:
    """The story on the demo's API server, as `make demo` tells it."""
    tmp = tmp_path_factory.mktemp("demo")
    with KubeApiServer() as api:
        populate(api, scenario)
        with cluster_view(api.write_kubeconfig(tmp / "kubeconfig"), tmp) as exporter:
            record_refusal(api, 1)
            yield refused(exporter)


def refused(exporter: Exporter) -> Samples:
    """/metrics once the quota's refusal is counted and every watch is up: a watch that is
    (re)listing on a loaded machine says 0 for a moment, and the views compared are settled."""
    series = {"namespace": QUOTA_NAMESPACE, "resource": GPU}
    return exporter.metrics_when(
        lambda m: (
            sum(values(m, "kube_gpu_quota_rejected_pods_total", **series)) >= 1
            and set(values(m, "kube_gpu_cluster_watch_up")) == {1}
        ),
        "the quota's refusal counted, every watch up",
    )


@pytest.fixture(scope="module")
def real_metrics(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """The story on the real control plane; the refusal made by the Job controller."""
    tmp = tmp_path_factory.mktemp("real")
    with run_control_plane(
        tmp / "plane", scheduler=True, controllers=("resourcequota", "job")
    ) as plane:
        populate(RealApi(plane), scenario)  # type: ignore[arg-type]
        quota = f"/api/v1/namespaces/{QUOTA_NAMESPACE}/resourcequotas/gpu-quota"
        wait_until(
            lambda: plane.ok("GET", quota).get("status", {}).get("used"),
            what="the quota's use counted by its controller",
        )
        pending = "/api/v1/pods?fieldSelector=status.phase%3DPending,spec.nodeName%3D"
        wait_until(
            lambda: all(
                any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions", []))
                for p in plane.ok("GET", pending)["items"]
            ),
            what="the scheduler's verdict on the pending pods",
        )
        with cluster_view(plane.kubeconfig, tmp) as exporter:
            template = {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "sweep",
                            "image": "registry.invalid/sweep:none",
                            "resources": {"limits": {GPU: "1"}},
                        }
                    ],
                }
            }
            plane.ok(
                "POST",
                f"/apis/batch/v1/namespaces/{QUOTA_NAMESPACE}/jobs",
                {"metadata": {"name": "sweep"}, "spec": {"template": template}},
            )
            return refused(exporter)


def test_the_story_gives_the_same_cluster_view_on_the_real_api_server(
    demo_metrics: Samples, real_metrics: Samples
) -> None:
    demo, demo_series = relevant(demo_metrics)
    real, real_series = relevant(real_metrics)
    assert values(demo, "kube_gpu_pending_pods", reason="fragmented") == [1]  # the story holds
    assert values(demo, "kube_gpu_pending_pods", reason="taint_not_tolerated") == [1]
    assert real == demo
    assert real_series == demo_series
    for name in ("nodes", "pods", "resourcequotas"):
        watched = {"resource": name}
        assert values(real_metrics, "kube_gpu_cluster_watched_objects", **watched) == values(
            demo_metrics, "kube_gpu_cluster_watched_objects", **watched
        ), name
