"""`explain POD` on pods the real Kueue v0.17.0 holds or has admitted, the real scheduler
placing them.

The bench: one H100 node of 4 GPUs (the GPU Operator's taint) and an A100 node of 4 also
tainted `dedicated=a100`; a ResourceFlavor for each (their tolerations cover the GPU taint,
not `dedicated`); ClusterQueues with no quota, with 4 H100s, with 4 A100s; Kueue's `batch/job`
and `pod` integrations. Then:

- a plain pod queued where there is no quota: Kueue gates it, so explain answers with its
  Workload (exit 1, Kueue's own message), not `gated`;
- the same with a gate of its own beside Kueue's: today's `gated`, naming every gate;
- a plain pod queued where there is quota: Kueue lets it go, the scheduler binds it, and
  explain gives the pod's own answer (scheduled, exit 0);
- a Job admitted to the A100 flavor whose pod the scheduler cannot place: the node check's
  reason (the untolerated taint), and one line naming its Workload and ClusterQueue.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane import ControlPlane, run_control_plane
from kueue import Kueue, run_kueue

from kube_gpu_exporter.demo.kube_api.cluster_objects import A100, GPU_TAINT, H100, make_node
from support import exporter_command, wait_until

pytestmark = pytest.mark.k8s

GPU = "nvidia.com/gpu"
V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRODUCT = "nvidia.com/gpu.product"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "a100", "effect": "NoSchedule"}
NAMESPACE = "queued"
KUEUE_GATES = ["kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"]
QUEUES = {"cq-zero": ("h100", 0), "cq-h100": ("h100", 4), "cq-a100": ("a100", 4)}


def _kueue_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def _active(plane: ControlPlane, queue: str) -> bool:
    cq = plane.ok("GET", f"{V1BETA2}/clusterqueues/{queue}")
    conditions = (cq.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with (
        run_control_plane(
            tmp_path_factory.mktemp("control-plane"),
            scheduler=True,
            controllers=("serviceaccount", "job", "garbagecollector"),
        ) as plane,
        run_kueue(
            plane, tmp_path_factory.mktemp("kueue"), integrations=("batch/job", "pod")
        ) as kueue,
    ):
        assert isinstance(kueue, Kueue) and kueue.version == "v0.17.0"
        for node in (
            make_node("h100-0", 4, product=H100),
            make_node("a100-0", 4, product=A100, taints=(GPU_TAINT, DEDICATED)),
        ):
            del node["metadata"]["uid"]
            plane.ok("POST", "/api/v1/nodes", node)
        for flavor, product in (("h100", H100), ("a100", A100)):
            where = {"nodeLabels": {PRODUCT: product}, "tolerations": [GPU_TOLERATION]}
            plane.ok(
                "POST", f"{V1BETA2}/resourceflavors", _kueue_object("ResourceFlavor", flavor, where)
            )
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        for queue, (flavor, gpus) in QUEUES.items():
            group = {"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}
            spec = {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": [GPU], "flavors": [group]}],
            }
            plane.ok("POST", f"{V1BETA2}/clusterqueues", _kueue_object("ClusterQueue", queue, spec))
            local = _kueue_object("LocalQueue", _local(queue), {"clusterQueue": queue})
            plane.ok("POST", f"{V1BETA2}/namespaces/{NAMESPACE}/localqueues", local)
        for queue in QUEUES:
            wait_until(lambda q=queue: _active(plane, q), what=f"ClusterQueue {queue} Active")
        wait_until(
            lambda: (
                plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")[0]
                == 200
            ),
            what="the namespace's default ServiceAccount",
        )
        yield plane


def _local(queue: str) -> str:
    return queue.replace("cq-", "lq-")


def _pod_spec(gates: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "train",
                "image": "registry.invalid/train:1",
                "resources": {"limits": {GPU: "1"}},
            }
        ],
    }
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return spec


def _plain_pod(plane: ControlPlane, queue: str, gates: tuple[str, ...] = ()) -> dict[str, Any]:
    name = f"plain-{uuid.uuid4().hex[:6]}"
    return plane.ok(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "metadata": {"name": name, "labels": {QUEUE_LABEL: _local(queue)}},
            "spec": _pod_spec(gates),
        },
    )


def _workload_of(plane: ControlPlane, uid: str) -> dict[str, Any] | None:
    """The Workload an owner (a plain pod, a Job) owns, once Kueue has decided on it."""
    for workload in plane.ok("GET", f"{V1BETA2}/namespaces/{NAMESPACE}/workloads")["items"]:
        owners = {o.get("uid") for o in workload["metadata"].get("ownerReferences") or []}
        conditions = (workload.get("status") or {}).get("conditions") or []
        if uid in owners and any(c["type"] == "QuotaReserved" for c in conditions):
            return workload  # type: ignore[no-any-return]
    return None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def _explain(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        exporter_command("explain", *args, "-n", NAMESPACE, f"--kubeconfig={plane.kubeconfig}"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_pod_kueue_gates_is_explained_by_its_workload(plane: ControlPlane) -> None:
    pod = _plain_pod(plane, "cq-zero")
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    assert sorted(gates) == KUEUE_GATES, gates
    name = pod["metadata"]["name"]
    workload = wait_until(
        lambda: _workload_of(plane, pod["metadata"]["uid"]), timeout=90, what="its Workload"
    )
    reserved = _condition(workload, "QuotaReserved")
    assert reserved["status"] == "False", workload
    said = _explain(plane, name)
    assert said.returncode == 1, said.stdout + said.stderr
    lines = said.stdout.splitlines()
    wl = workload["metadata"]["name"]
    assert lines[0].startswith(f"pod {NAMESPACE}/{name} is held by Kueue (kueue.x-k8s.io/"), lines
    assert lines[0].endswith(f"until it admits the pod's Workload {NAMESPACE}/{wl}:"), lines
    assert lines[1] == f"workload {NAMESPACE}/{wl}: LocalQueue lq-zero → ClusterQueue cq-zero"
    assert f"QuotaReserved=False {reserved['reason']}: {reserved['message']}" in said.stdout
    assert "will not be admitted now: " in said.stdout, said.stdout
    assert "gated" not in said.stdout, said.stdout


def test_a_pod_with_a_gate_of_its_own_beside_kueue_s_stays_gated(plane: ControlPlane) -> None:
    pod = _plain_pod(plane, "cq-zero", ("example.com/hold",))
    gates = sorted(g["name"] for g in pod["spec"].get("schedulingGates") or [])
    assert gates == sorted(["example.com/hold", *KUEUE_GATES]), gates
    wait_until(lambda: _workload_of(plane, pod["metadata"]["uid"]), timeout=90, what="Workload")
    said = _explain(plane, pod["metadata"]["name"])
    assert said.returncode == 1, said.stdout + said.stderr
    assert "held by Kueue" not in said.stdout and "example.com/hold" in said.stdout, said.stdout
    assert "will not schedule: gated\n" in said.stdout, said.stdout
    assert said.stdout.splitlines()[-1] == (
        "  held by scheduling gates: example.com/hold, kueue.x-k8s.io/admission, "
        "kueue.x-k8s.io/topology"
    ), said.stdout


def test_a_pod_kueue_admits_leaves_the_gate_and_is_explained_as_itself(
    plane: ControlPlane,
) -> None:
    pod = _plain_pod(plane, "cq-h100")
    name = pod["metadata"]["name"]

    def bound() -> str:
        got = plane.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        return (
            str(got["spec"].get("nodeName") or "") if not got["spec"].get("schedulingGates") else ""
        )

    node = wait_until(bound, timeout=90, what="the admitted pod bound")
    said = _explain(plane, name)
    assert said.returncode == 0, said.stdout + said.stderr
    assert said.stdout.startswith(f"pod {NAMESPACE}/{name} is scheduled on {node}"), said.stdout


def test_an_admitted_job_s_pod_that_cannot_be_placed_names_its_workload(
    plane: ControlPlane,
) -> None:
    job = f"job-{uuid.uuid4().hex[:6]}"
    made = plane.ok(
        "POST",
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job, "labels": {QUEUE_LABEL: "lq-a100"}},
            "spec": {"template": {"spec": _pod_spec()}},
        },
    )
    workload = wait_until(
        lambda: _workload_of(plane, made["metadata"]["uid"]), timeout=90, what="the Job's Workload"
    )
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name%3D{job}"

    def unschedulable() -> str:
        for pod in plane.ok("GET", path)["items"]:
            scheduled = _condition(pod, "PodScheduled")
            if scheduled.get("reason") == "Unschedulable":
                return str(pod["metadata"]["name"])
        return ""

    name = wait_until(unschedulable, timeout=90, what="the Job's pod found unschedulable")
    said = _explain(plane, name)
    assert said.returncode == 1, said.stdout + said.stderr
    wl = workload["metadata"]["name"]
    assert said.stdout.splitlines()[0] == (
        f"Kueue admitted its Workload {NAMESPACE}/{wl} in ClusterQueue cq-a100: the quota is "
        "granted, the nodes are what it waits for"
    ), said.stdout
    assert "dedicated=a100:NoSchedule" in said.stdout, said.stdout
