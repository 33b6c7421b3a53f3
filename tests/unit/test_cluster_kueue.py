"""Kueue's objects as the cluster view reads them: which Workloads wait and with how many
GPUs, and the API version chosen (v1beta2, else v1beta1, else not served). The real Kueue's
own objects are read in tests/integration/test_k8s_kueue.py."""

from __future__ import annotations

from typing import Any

import pytest

from kube_gpu_exporter.exporter.cluster.kueue import (
    FlavorQuota,
    WaitingWorkload,
    parse_cluster_queue,
    parse_workload,
    pending_workloads,
    served_version,
)
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.kubernetes.client import ApiError
from kube_gpu_exporter.exporter.kubernetes.list_watch import NotServed

SETTINGS = ClusterSettings()


def workload(
    *conditions: tuple[str, str, str], gpus: str = "2", count: int = 2, queue: str = "lq"
) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "1"}}}
    return {
        "metadata": {"namespace": "team", "name": "job-x"},
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": "main", "count": count, "template": {"spec": {"containers": [container]}}}
            ],
        },
        "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]},
    }


def test_a_waiting_workload_counts_its_pod_sets_gpus_and_kueues_reason() -> None:
    obj = workload(("QuotaReserved", "False", "Pending"))
    obj["metadata"]["creationTimestamp"] = "2026-11-28T14:00:00Z"
    parsed = parse_workload(obj, SETTINGS)
    assert parsed == ("team/job-x", WaitingWorkload("team", "lq", "Pending", 4, 1795874400.0))


def test_not_yet_evaluated_has_no_reason() -> None:
    assert parse_workload(workload(), SETTINGS) == (
        "team/job-x",
        WaitingWorkload("team", "lq", "", 4),
    )


@pytest.mark.parametrize(
    "obj",
    [
        workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted")),
        workload(("Finished", "True", "Succeeded")),
        workload(gpus="0"),
        workload(queue=""),
    ],
    ids=["admitted", "finished", "no-gpu", "no-queue"],
)
def test_admitted_finished_or_gpu_less_workloads_are_dropped(obj: dict[str, Any]) -> None:
    assert parse_workload(obj, SETTINGS) == ("team/job-x", None)


def test_pending_by_cluster_queue_local_queue_and_reason() -> None:
    waiting = {
        "team/a": WaitingWorkload("team", "lq", "Pending", 2, 200.0),
        "team/b": WaitingWorkload("team", "lq", "Pending", 3, 100.0),
        "other/c": WaitingWorkload("other", "unknown-lq", "", 1),
    }
    assert pending_workloads(waiting, {"team/lq": "gpu-cq"}) == {
        ("gpu-cq", "team", "lq", "Pending"): (2, 5, 100.0),
        ("", "other", "unknown-lq", ""): (1, 1, None),
    }


def _lister(served: set[str], asked: list[str]) -> Any:
    def lister(path: str) -> Any:
        def request(**params: Any) -> str:
            asked.append(path)
            if path.split("/")[3] not in served:
                raise ApiError(404, "Not Found", "")
            return path

        return request

    return lister


def test_v1beta2_first_then_v1beta1_then_not_served() -> None:
    asked: list[str] = []
    both = served_version(_lister({"v1beta1", "v1beta2"}, asked), "workloads")
    assert both() == "/apis/kueue.x-k8s.io/v1beta2/workloads" and both.version == "v1beta2"
    old = served_version(_lister({"v1beta1"}, asked), "workloads")
    assert old() == "/apis/kueue.x-k8s.io/v1beta1/workloads" and old.version == "v1beta1"
    assert old() == "/apis/kueue.x-k8s.io/v1beta1/workloads", "the served one is kept"
    none = served_version(_lister(set(), asked), "workloads")
    with pytest.raises(NotServed, match="no Kueue"):
        none()


def test_other_failures_are_not_taken_for_absence() -> None:
    def lister(path: str) -> Any:
        def request(**params: Any) -> None:
            raise ApiError(403, "Forbidden", "")

        return request

    with pytest.raises(ApiError):
        served_version(lister, "workloads")()


def test_a_cluster_queues_gpu_quotas_per_flavor_with_kueues_usage() -> None:
    gpu = "nvidia.com/gpu"
    queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", gpu],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": gpu, "nominalQuota": 8, "borrowingLimit": "4"},
                            ],
                        },
                        {"name": "a100", "resources": [{"name": gpu, "nominalQuota": "2"}]},
                    ],
                }
            ]
        },
        "status": {
            "flavorsUsage": [
                {"name": "h100", "resources": [{"name": gpu, "total": "10", "borrowed": "2"}]}
            ]
        },
    }
    assert parse_cluster_queue(queue, SETTINGS) == (
        "cq",
        (FlavorQuota("h100", gpu, 8, 4, 10), FlavorQuota("a100", gpu, 2, None, None)),
    )
    cpu_only = {"metadata": {"name": "cpu"}, "spec": {"resourceGroups": []}}
    assert parse_cluster_queue(cpu_only, SETTINGS) == ("cpu", None)
