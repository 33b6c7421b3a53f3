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
from control_plane import ControlPlane
from kueue_bench import (
    QUEUE_LABEL,
    add_queues,
    cluster_queue_spec,
    condition,
    explain,
    flavor_quota,
    gpu_job,
    gpu_pod_spec,
    h100_and_a100,
    job_pods,
    kueue_bench,
    wait_active,
    wait_default_service_account,
    workload_of,
)

from support import wait_until

pytestmark = pytest.mark.k8s

NAMESPACE = "queued"
KUEUE_GATES = ["kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"]
QUEUES = {"cq-zero": ("h100", 0), "cq-h100": ("h100", 4), "cq-a100": ("a100", 4)}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with kueue_bench(tmp_path_factory.mktemp("kueue-bench"), integrations=("batch/job", "pod")) as (
        plane,
        kueue,
    ):
        assert kueue.version == "v0.17.0"
        h100_and_a100(plane, h100_nodes=1)
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        for queue, (flavor, gpus) in QUEUES.items():
            spec = cluster_queue_spec(flavor_quota(flavor, gpus))
            add_queues(plane, NAMESPACE, queue, _local(queue), spec)
        wait_active(plane, list(QUEUES))
        wait_default_service_account(plane, NAMESPACE)
        yield plane


def _local(queue: str) -> str:
    return queue.replace("cq-", "lq-")


def _plain_pod(plane: ControlPlane, queue: str, gates: tuple[str, ...] = ()) -> dict[str, Any]:
    name = f"plain-{uuid.uuid4().hex[:6]}"
    return plane.ok(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "metadata": {"name": name, "labels": {QUEUE_LABEL: _local(queue)}},
            "spec": gpu_pod_spec(1, gates=gates),
        },
    )


def _workload_of(plane: ControlPlane, uid: str) -> dict[str, Any] | None:
    """The Workload an owner (a plain pod, a Job) owns, once Kueue has decided on it."""
    workload = workload_of(plane, NAMESPACE, uid=uid)
    return workload if condition(workload, "QuotaReserved") else None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return condition(obj, kind) or {}


def _explain(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return explain(plane, *args, "-n", NAMESPACE)


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
        gpu_job(job, "lq-a100", gpu_pod_spec(1)),
    )
    workload = wait_until(
        lambda: _workload_of(plane, made["metadata"]["uid"]), timeout=90, what="the Job's Workload"
    )

    def unschedulable() -> str:
        for pod in job_pods(plane, NAMESPACE, job):
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
