"""What the tests on the real Kueue share, so that each test file holds only its scenario: the
bench (a control plane with the scheduler and the Job controller, Kueue on it), Kueue's
objects as v1beta2 manifests, GPU nodes, the pod a GPU Job runs, and reading back Workloads,
pods and conditions as Kueue and the scheduler leave them.

Objects are built the way a user writes them (labels, not Kueue's own annotations), since
what is under test is what Kueue and the scheduler make of them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from control_plane import ControlPlane, run_control_plane
from kueue import Kueue, front_proxy_args, run_kueue

from kube_gpu_exporter.demo.kube_api.cluster_objects import A100, GPU_TAINT, H100, make_node
from kube_gpu_exporter.exporter.cluster.kueue import served_version
from kube_gpu_exporter.exporter.kubernetes.client import api_client
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch
from support import exporter_command, wait_until

GPU = "nvidia.com/gpu"
V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRODUCT = "nvidia.com/gpu.product"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
# the A100 node's own taint, which its flavor does not tolerate (nor do the Jobs)
DEDICATED = {"key": "dedicated", "value": "a100", "effect": "NoSchedule"}


@contextmanager
def kueue_bench(
    workdir: Path, *, integrations: Sequence[str] = ("batch/job",), visibility: bool = False
) -> Iterator[tuple[ControlPlane, Kueue]]:
    """A plane whose scheduler places and whose Job controller runs what Kueue admits (the
    garbage collector removes a preempted Job's pods), Kueue on it; with `visibility`, the
    plane aggregates Kueue's visibility API (kueue.py's module doc)."""
    extra = front_proxy_args(workdir / "front-proxy") if visibility else []
    with (
        run_control_plane(
            workdir / "control-plane",
            scheduler=True,
            controllers=("serviceaccount", "job", "garbagecollector"),
            extra_apiserver_args=extra,
        ) as plane,
        run_kueue(
            plane, workdir / "kueue", integrations=integrations, visibility=visibility
        ) as kueue,
    ):
        yield plane, kueue


def kueue_object(kind: str, name: str, spec: dict[str, Any], **meta: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def flavor_quota(
    flavor: str, nominal: int, borrowing: int | None = None, lending: int | None = None
) -> dict[str, Any]:
    """One flavor's `nvidia.com/gpu` quota in a ClusterQueue; an absent limit is no limit."""
    quota: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        quota["borrowingLimit"] = borrowing
    if lending is not None:
        quota["lendingLimit"] = lending
    return {"name": flavor, "resources": [quota]}


def cluster_queue_spec(*flavors: dict[str, Any]) -> dict[str, Any]:
    """A ClusterQueue's spec for every namespace, one resource group of GPUs over `flavors`
    (flavor_quota's), tried in that order."""
    return {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": list(flavors)}],
    }


def add_queues(
    plane: ControlPlane, namespace: str, cluster_queue: str, local_queue: str, spec: dict[str, Any]
) -> None:
    """A ClusterQueue of `spec` and the LocalQueue in `namespace` that sends to it."""
    plane.ok("POST", f"{V1BETA2}/clusterqueues", kueue_object("ClusterQueue", cluster_queue, spec))
    local = kueue_object("LocalQueue", local_queue, {"clusterQueue": cluster_queue})
    plane.ok("POST", f"{V1BETA2}/namespaces/{namespace}/localqueues", local)


def queue_active(plane: ControlPlane, cluster_queue: str) -> bool:
    return condition_true(plane.ok("GET", f"{V1BETA2}/clusterqueues/{cluster_queue}"), "Active")


def wait_active(plane: ControlPlane, cluster_queues: Sequence[str], timeout: float = 60) -> None:
    """Until Kueue holds every one of `cluster_queues` Active (it admits nothing before)."""
    for queue in cluster_queues:
        wait_until(
            lambda q=queue: queue_active(plane, q), timeout, what=f"ClusterQueue {queue} Active"
        )


def add_node(plane: ControlPlane, name: str, gpus: int, **kwargs: Any) -> None:
    """A Node object of `gpus` GPUs (cluster_objects.make_node's, its uid the server's)."""
    node = make_node(name, gpus, **kwargs)
    del node["metadata"]["uid"]
    plane.ok("POST", "/api/v1/nodes", node)


def h100_and_a100(plane: ControlPlane, h100_nodes: int) -> None:
    """`h100_nodes` H100 nodes of 4 GPUs and an A100 node of 4 also tainted DEDICATED (all
    with the GPU Operator's taint), and ResourceFlavors `h100` and `a100` selecting them by
    product, tolerating the GPU taint, not DEDICATED: a flavor Kueue admits to whose pods no
    node takes."""
    for index in range(h100_nodes):
        add_node(plane, f"h100-{index}", 4, product=H100)
    add_node(plane, "a100-0", 4, product=A100, taints=(GPU_TAINT, DEDICATED))
    for flavor, product in (("h100", H100), ("a100", A100)):
        where = {"nodeLabels": {PRODUCT: product}, "tolerations": [GPU_TOLERATION]}
        plane.ok(
            "POST", f"{V1BETA2}/resourceflavors", kueue_object("ResourceFlavor", flavor, where)
        )


def wait_default_service_account(plane: ControlPlane, namespace: str) -> None:
    """The Job controller creates no pod in a namespace before its default ServiceAccount."""
    wait_until(
        lambda: (
            plane.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")[0]
            == 200
        ),
        what=f"{namespace}'s default ServiceAccount",
    )


def gpu_pod_spec(
    gpus: int,
    *,
    priority: str = "",
    gates: Sequence[str] = (),
    tolerations: Sequence[dict[str, str]] = (),
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking `gpus` GPUs, tolerating the GPU Operator's taint (and `tolerations`)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION, *tolerations],
        "containers": [
            {
                "name": "train",
                "image": "registry.invalid/train:1",
                "resources": {"limits": {GPU: str(gpus)}},
            }
        ],
    }
    if priority:
        spec["priorityClassName"] = priority
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    if node_selector:
        spec["nodeSelector"] = node_selector
    return spec


def gpu_job(
    name: str,
    local_queue: str,
    pod: dict[str, Any],
    count: int = 1,
    *,
    namespace: str = "",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job of `count` pods like `pod`, queued to `local_queue` by its label; `namespace`
    written in where the manifest is read without one (explain -f)."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {QUEUE_LABEL: local_queue, **(labels or {})},
    }
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": count, "completions": count, "template": {"spec": pod}},
    }


def job_pods(plane: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    """The Job's pods, but those being deleted (a preempted Job's, on their way out)."""
    path = (
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}"
    )
    return [p for p in plane.ok("GET", path)["items"] if not p["metadata"].get("deletionTimestamp")]


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def condition_true(obj: dict[str, Any] | None, kind: str) -> bool:
    return (condition(obj, kind) or {}).get("status") == "True"


def workload_of(
    plane: ControlPlane, namespace: str, *, uid: str = "", job: str = ""
) -> dict[str, Any] | None:
    """The Workload Kueue made for an owner: by the owner's uid (a Job or a plain pod), or by
    a Job's name (before the test has read the Job back); None while there is none."""
    for workload in plane.ok("GET", f"{V1BETA2}/namespaces/{namespace}/workloads")["items"]:
        for owner in workload["metadata"].get("ownerReferences") or []:
            if (uid and owner.get("uid") == uid) or (
                job and owner.get("name") == job and owner.get("kind") == "Job"
            ):
                return workload  # type: ignore[no-any-return]
    return None


def explain(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """`kube-gpu-exporter explain ARGS` on the plane, as a user runs it."""
    return subprocess.run(
        exporter_command("explain", *args, f"--kubeconfig={plane.kubeconfig}"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def listed_once(
    plane: ControlPlane, parsers: Mapping[str, Callable[[dict[str, Any]], Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """What the cluster view's ListWatches of `parsers`' resources hold once each has listed
    (every one served and up), on the version the server serves first, and those versions."""
    client = api_client(str(plane.kubeconfig))
    held: dict[str, dict[str, Any]] = {}
    requests = {r: served_version(client.lister, r) for r in parsers}
    watches = [
        ListWatch(r, requests[r], parsers[r], lambda objs, r=r: held.__setitem__(r, dict(objs)))
        for r in parsers
    ]
    for watch in watches:
        watch.start()
    try:
        wait_until(
            lambda: len(held) == len(parsers) and all(w.up for w in watches),
            what=f"{', '.join(parsers)} listed",
        )
        assert all(w.served for w in watches)
        return held, {r: request.version for r, request in requests.items()}
    finally:
        for watch in watches:
            watch.stop()
        client.close()
