"""The watches against the real kube-apiserver (and etcd), not our test server.

- `cluster` (a real process) lists more pods than its page size, following the server's
  continue tokens; the events watch's field selector `reason=FailedCreate` is accepted by the
  real server for list and watch; quota refusals are counted once each, also across a restart
  of kube-apiserver (its watches go down, `kube_gpu_cluster_watch_up` reads 0, then 1 once it
  is back, and the relist does not count the same events again).
- `serve --kubernetes.enabled` (a real process with a gRPC kubelet) attributes a GPU to its
  pod's owner and labels from the pod watch, and a DRA claim to its GPU from a
  resource.k8s.io/v1 ResourceSlice chosen by the field selectors; across a restart of
  kube-apiserver `kube_gpu_exporter_kubernetes_api_up` reads 0 then 1, and changes made after
  it are seen.
- A paged list whose continue token the server expires (etcd compacted between two pages: the
  real 410 Gone of a paged list) is relisted from the start, and no refusal is counted twice.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane

from cluster_objects import make_gpu_pod, make_node, make_quota, quota_refusal
from kube_gpu_exporter.demo.kube_api import make_event
from kube_gpu_exporter.exporter.cluster.quota_events import QuotaRejections
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.watches import REFUSALS
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE
from kubelet_server import FakeKubelet, claim, claim_device, container, devices, kubelet_args, pod
from support import Exporter, run_exporter, values, wait_until

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
REJECTED = "kube_gpu_quota_rejected_pods_total"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # On SIGTERM kube-apiserver drains open watches for this long (without the flag its HTTP
    # server waits up to 60 s for them to end): clients see their watches end, then 503s and
    # refused connections, as in a rolling restart.
    drain = "--shutdown-watch-termination-grace-period=2s"
    workdir = tmp_path_factory.mktemp("control-plane")
    with run_control_plane(workdir, extra_apiserver_args=[drain]) as running:
        for namespace in ("team", "batch", "lab", "serving", "paged"):
            running.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        yield running


def _create(plane: ControlPlane, path: str, obj: Mapping[str, Any]) -> Any:
    """POST `obj` as a client writes it: no status, uid or timestamps (the server sets them)."""
    body = json.loads(json.dumps(obj))
    for key in ("uid", "creationTimestamp"):
        body["metadata"].pop(key, None)
    return plane.ok("POST", path, body)


def _status(plane: ControlPlane, path: str, status: Mapping[str, Any]) -> None:
    """What a kubelet or a controller writes: the status subresource."""
    plane.ok(
        "PATCH",
        f"{path}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )


def _etcd(plane: ControlPlane, path: str, body: Mapping[str, Any]) -> Any:
    """etcd's v3 JSON gateway (keys and values base64)."""
    request = urllib.request.Request(
        plane.etcd_url + path, data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def compact_etcd(plane: ControlPlane) -> int:
    """A write outside Kubernetes' keys (etcd's revision moves on), then a compaction at it:
    every resourceVersion before it is gone, as after kube-apiserver's periodic compaction."""
    key = base64.b64encode(f"/test/{uuid.uuid4()}".encode()).decode()
    revision = int(_etcd(plane, "/v3/kv/put", {"key": key, "value": "MQ=="})["header"]["revision"])
    _etcd(plane, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def rejected(m: Samples) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["namespace"], dict(labels)["quota"]): value
        for (name, labels), value in m.items()
        if name == REJECTED
    }


def _refusal_event(plane: ControlPlane, name: str, count: int, quota: str = "gpu-quota") -> str:
    message = quota_refusal(quota, {f"requests.{GPU}": "4"})
    event = make_event(name, "team", message=message, count=count)
    return str(_create(plane, "/api/v1/namespaces/team/events", event)["metadata"]["name"])


def _start_cluster(plane: ControlPlane, tmp_path: Path) -> AbstractContextManager[Exporter]:
    args = [f"--kubernetes.kubeconfig={plane.kubeconfig}", "--cluster.interval=200ms"]
    return run_exporter(args, tmp_path, command="cluster")


def test_cluster_view_pages_filters_events_and_survives_a_restart(
    plane: ControlPlane, tmp_path: Path
) -> None:
    # more active pods than one page: bound, so held whether or not they ask for a GPU
    _create(plane, "/api/v1/nodes", make_node("gpu-a"))
    _create(plane, "/api/v1/nodes", make_node("cpu-a", gpus=None, product=None, taints=()))
    paged = PAGE + 37

    def bound(i: int) -> None:
        obj = make_gpu_pod(f"p-{i}", 0, "paged", node="cpu-a", tolerations=())
        _create(plane, "/api/v1/namespaces/paged/pods", obj)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(bound, range(paged)))
    _create(
        plane, "/api/v1/namespaces/batch/pods", make_gpu_pod("holder", 6, "batch", node="gpu-a")
    )
    quota = _create(
        plane, "/api/v1/namespaces/team/resourcequotas", make_quota("gpu-quota", "team")
    )
    key = f"requests.{GPU}"
    _status(
        plane,
        f"/api/v1/namespaces/team/resourcequotas/{quota['metadata']['name']}",
        {"hard": {key: "8"}, "used": {key: "8"}},
    )
    _refusal_event(plane, "old.1", count=5)  # before the start: a baseline, counted 0

    with _start_cluster(plane, tmp_path) as exporter:
        m = exporter.metrics_when(lambda m: rejected(m) == {("team", "gpu-quota"): 0}, "baseline")
        for resource in ("nodes", "pods", "resourcequotas", "events"):
            assert values(m, "kube_gpu_cluster_watch_up", resource=resource) == [1], resource
        assert values(m, "kube_gpu_cluster_watched_objects", resource="pods") == [paged + 1]
        node = {"node": "gpu-a", "resource": GPU}
        assert values(m, "kube_gpu_node_allocated_devices", **node) == [6]
        assert values(m, "kube_gpu_quota_used", namespace="team", resource=GPU) == [8]

        # new events through the watch: a GPU quota refusal counts, a CPU quota's does not,
        # and an event of another reason is filtered out by the server
        refusal = _refusal_event(plane, "train.1", count=1)
        cpu = quota_refusal("cpu-quota", {"requests.cpu": "64"})
        _create(plane, "/api/v1/namespaces/team/events", make_event("cpu.1", "team", message=cpu))
        message = quota_refusal("gpu-quota", {key: "4"})
        other = make_event("sched.1", "team", message=message, reason="FailedScheduling")
        _create(plane, "/api/v1/namespaces/team/events", other)
        m = exporter.metrics_when(
            lambda m: rejected(m) == {("team", "gpu-quota"): 1}, "the new refusal counted"
        )
        assert values(m, "kube_gpu_cluster_watched_objects", resource="events") == [2]
        assert values(m, "kube_gpu_cluster_watch_errors_total", resource="events") == [0] * 5

        # kube-apiserver restarted: every watch goes down while it is away, then comes back
        # (Kueue's two are idle here, not served, and so stay up)
        def up(m: Samples) -> list[float]:
            return [
                v
                for r in ("nodes", "pods", "resourcequotas", "events")
                for v in values(m, "kube_gpu_cluster_watch_up", resource=r)
            ]

        def while_down() -> None:
            exporter.metrics_when(lambda m: up(m) == [0] * 4, "watches down")

        plane.restart_apiserver(while_down)
        m = exporter.metrics_when(lambda m: up(m) == [1] * 4, "watches back up")
        # the relist saw the same events again: nothing is counted twice
        assert rejected(m) == {("team", "gpu-quota"): 1}
        assert values(m, "kube_gpu_cluster_watched_objects", resource="pods") == [paged + 1]

        # after the restart the watch follows again: the recorder raised the count to 3
        path = f"/api/v1/namespaces/team/events/{refusal}"
        plane.ok("PATCH", path, {"count": 3}, content_type="application/merge-patch+json")
        exporter.metrics_when(
            lambda m: rejected(m) == {("team", "gpu-quota"): 3}, "the repeats counted"
        )
        log = exporter.log()
    assert "Traceback" not in log


NODE = "gpu-node-1"
GPU0 = "GPU-0a0a0a0a-0000-4000-8000-000000000000"
GPU1 = "GPU-1b1b1b1b-0000-4000-8000-000000000000"
SCENARIO = f"""
devices:
  - uuid: {GPU0}
    readings: {{utilization: 0.8, memory_used_bytes: 10GiB}}
  - uuid: {GPU1}
    readings: {{utilization: 0.1, memory_used_bytes: 1GiB}}
"""
CID = "c" * 64


def _node_pod(
    plane: ControlPlane, name: str, namespace: str, node: str, labels: Mapping[str, str]
) -> str:
    """A pod on `node` as its kubelet reports it: Running, its container id in the status."""
    obj = {
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda:none"}]},
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    _create(plane, path, obj)
    running = {"running": {"startedAt": "2024-05-01T10:00:00Z"}}
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "main",
                "image": "cuda:none",
                "imageID": "",
                "containerID": f"containerd://{CID}",
                "ready": True,
                "restartCount": 0,
                "state": running,
            }
        ],
    }
    _status(plane, f"{path}/{name}", status)
    return name


def _slice(name: str, node: str, generation: int, uuids: Mapping[str, str]) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceSlice of the NVIDIA DRA driver, pool named for the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": NODE, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": device, "attributes": {"uuid": {"string": value}}}
                for device, value in uuids.items()
            ],
        },
    }


def test_node_exporter_pods_and_resource_slices_survive_a_restart(
    plane: ControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    _node_pod(plane, "notebook", "lab", NODE, {"team": "vision"})
    _node_pod(plane, "notebook", "batch", "gpu-node-2", {"team": "elsewhere"})
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    _create(plane, slices, _slice("mine", NODE, 1, {"gpu-0": GPU0, "gpu-1": GPU1}))
    # the same pool name on another node, newer: only the field selector keeps it out
    _create(plane, slices, _slice("theirs", "gpu-node-2", 9, {"gpu-1": GPU0}))
    _node_pod(plane, "llm-0", "serving", NODE, {})

    socket = tmp_path / "kubelet.sock"
    with FakeKubelet(socket) as kubelet:
        dra = claim("serving", "llm-0-gpu", claim_device(DRIVER, NODE, "gpu-1"))
        kubelet.pods = [
            pod("lab", "notebook", container("main", devices(GPU, GPU0))),
            pod("serving", "llm-0", container("main", claims=[dra])),
        ]
        args = [
            "--simulate", str(tmp_path / "node.yaml"), *kubelet_args(socket),
            "--kubernetes.enabled", f"--kubernetes.kubeconfig={plane.kubeconfig}",
            f"--kubernetes.node-name={NODE}", "--kubernetes.pod-labels=team",
        ]  # fmt: skip
        with run_exporter(args, tmp_path) as exporter:
            info = "nvidia_gpu_allocation_info"

            def attributed(m: Samples) -> bool:
                return bool(
                    values(m, info, pod="notebook", label_team="vision")
                    and values(m, info, pod="llm-0", uuid=GPU1)
                )

            m = exporter.metrics_when(attributed, "the pod and the DRA claim attributed")
            notebook = {"namespace": "lab", "pod": "notebook", "uuid": GPU0}
            assert values(m, info, **notebook, owner_kind="StatefulSet", owner_name="notebook")
            assert values(m, info, pod="llm-0", resource=f"dra/{DRIVER}") == [1]
            assert values(m, "kube_gpu_exporter_kubernetes_api_up") == [1]

            def while_down() -> None:
                exporter.metrics_when(
                    lambda m: values(m, "kube_gpu_exporter_kubernetes_api_up") == [0],
                    "the API marked down",
                )

            plane.restart_apiserver(while_down)
            exporter.metrics_when(
                lambda m: values(m, "kube_gpu_exporter_kubernetes_api_up") == [1], "back up"
            )
            # a change after the restart reaches the attribution: the watch follows again
            plane.ok(
                "PATCH",
                "/api/v1/namespaces/lab/pods/notebook",
                {"metadata": {"labels": {"team": "robotics"}}},
                content_type="application/merge-patch+json",
            )
            m = exporter.metrics_when(
                lambda m: bool(values(m, info, pod="notebook", label_team="robotics")),
                "the relabelled pod",
            )
            assert values(m, info, pod="llm-0", uuid=GPU1) == [1]
            log = exporter.log()
    assert "Traceback" not in log


def test_a_continue_token_expired_by_compaction_relists_and_counts_once(
    plane: ControlPlane,
) -> None:
    """kube-apiserver answers a paged list's next page 410 Gone once etcd has compacted the
    revision of its first page. The events watch's own ListWatch and counter, in pages of 2
    so that the list spans several requests: etcd is compacted after the first page."""
    names = [_refusal_event(plane, f"paged-{i}.1", count=2, quota="paged-quota") for i in range(5)]
    settings = ClusterSettings()
    rejections = QuotaRejections(settings)
    client = api_client(str(plane.kubeconfig))
    events = client.lister("/api/v1/events", field_selector=REFUSALS)
    pages: list[dict[str, Any]] = []
    compacted = threading.Event()

    def request(**params: Any) -> Any:
        pages.append({k: v for k, v in params.items() if not k.startswith("_request")})
        response = events(**params)
        if params.get("_continue") is None and not params.get("watch") and not compacted.is_set():
            compact_etcd(plane)  # after the first page has been served, before the second
            compacted.set()
        return response

    watch = ListWatch("events", request, rejections.parse, rejections.publish, page_size=2)
    watch.start()
    try:
        wait_until(lambda: watch.up, what="the events watch up")
        assert watch.errors_total["gone"] == 1
        continued = [p for p in pages if p.get("_continue")]
        assert continued, pages  # the first list did ask for its next page
        assert rejections.events >= len(names)
        # the first list was a baseline (each refusal at 0), and the relist counts nothing again
        assert rejections.totals.get(("team", "paged-quota", GPU)) == 0
        path = f"/api/v1/namespaces/team/events/{names[0]}"
        plane.ok("PATCH", path, {"count": 4}, content_type="application/merge-patch+json")
        wait_until(
            lambda: rejections.totals.get(("team", "paged-quota", GPU)) == 2,
            what="the growth of one event counted once",
        )
    finally:
        watch.stop()
        client.close()
