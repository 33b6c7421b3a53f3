"""explain's tie from a pod to its Kueue Workload: the pod's controller owner among the
Workload's owners (a Job's pods), or the pod itself (a plain pod); only Kueue's gates make a
pod Kueue's to explain; the line for a pod whose Workload is admitted."""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.exporter.cluster.explain.kueue_pod import (
    admitted_line,
    held,
    held_line,
    workload_of,
)
from kube_gpu_exporter.exporter.cluster.objects import Pod

ADMISSION, TOPOLOGY = "kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"


def _workload(name: str, *owners: str, namespace: str = "ns", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{"kind": "Job", "name": "j", "uid": uid} for uid in owners],
        },
        "spec": {"queueName": "lq"},
        "status": status,
    }


def test_a_job_s_pod_is_tied_by_its_controller_owner() -> None:
    workloads = [_workload("other", "uid-x"), _workload("mine", "uid-job")]
    pod = Pod("ns", "p", uid="uid-pod", owner_uid="uid-job")
    assert workload_of(pod, workloads) is workloads[1]


def test_a_plain_pod_is_tied_as_the_workload_s_owner() -> None:
    workloads = [_workload("pod-p", "uid-pod")]
    assert workload_of(Pod("ns", "p", uid="uid-pod"), workloads) is workloads[0]


def test_no_owner_no_workload_and_never_across_namespaces() -> None:
    workloads = [_workload("w", "uid-job", namespace="elsewhere"), _workload("blank", "")]
    assert workload_of(Pod("ns", "p", uid="uid-pod", owner_uid="uid-job"), workloads) is None
    assert workload_of(Pod("ns", "p"), workloads) is None  # "" matches no owner's ""


def test_only_kueue_s_gates_make_a_pod_kueue_s() -> None:
    assert held(Pod("ns", "p", scheduling_gates=(ADMISSION, TOPOLOGY)))
    assert held(Pod("ns", "p", scheduling_gates=(ADMISSION,)))
    assert not held(Pod("ns", "p", scheduling_gates=(ADMISSION, "example.com/hold")))
    assert not held(Pod("ns", "p"))


def test_the_lines_name_the_workload_and_its_queue() -> None:
    pod = Pod("ns", "p", scheduling_gates=(ADMISSION, TOPOLOGY))
    waiting = _workload("pod-p", "uid-pod")
    assert held_line(pod, waiting) == (
        f"pod ns/p is held by Kueue ({ADMISSION}, {TOPOLOGY}) until it admits the pod's "
        "Workload ns/pod-p:"
    )
    assert admitted_line(None) == "" and admitted_line(waiting) == ""
    admitted = _workload(
        "job-j",
        "uid-job",
        conditions=[{"type": "Admitted", "status": "True"}],
        admission={"clusterQueue": "cq"},
    )
    assert admitted_line(admitted) == (
        "Kueue admitted its Workload ns/job-j in ClusterQueue cq: the quota is granted, the "
        "nodes are what it waits for\n"
    )
