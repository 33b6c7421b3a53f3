"""What `explain` prints of a queued Job: the queue, its quota table, Kueue's conditions, the
position (unknown where the visibility API is not served) and the verdict."""

from __future__ import annotations

from kube_gpu_exporter.exporter.cluster.explain.kueue_api import KueueRead, Position
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import (
    parse_cluster_queue,
    parse_flavor,
    pod_sets_of_job,
    workload_state,
)
from kube_gpu_exporter.exporter.cluster.explain.kueue_report import NOT_SERVED, render_kueue
from kube_gpu_exporter.exporter.cluster.explain.kueue_verdict import judge
from kube_gpu_exporter.exporter.cluster.view import ClusterView

GPU = "nvidia.com/gpu"
JOB = {
    "metadata": {"name": "train", "namespace": "ns"},
    "spec": {
        "parallelism": 2,
        "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: "2"}}}]}},
    },
}
CQ = {
    "metadata": {"name": "cq"},
    "spec": {
        "cohortName": "c",
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [{"name": GPU, "nominalQuota": 2, "borrowingLimit": 1}],
                    }
                ],
            }
        ],
    },
}
OTHER = {**CQ, "metadata": {"name": "other"}}
WAITING = {
    "metadata": {"namespace": "ns", "name": "job-train"},
    "spec": {"queueName": "lq"},
    "status": {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient unused quota "
                f"for {GPU} in flavor h100, 1 more needed",
            }
        ]
    },
}


def _read() -> KueueRead:
    flavor = parse_flavor({"metadata": {"name": "h100"}, "spec": {}})
    queues = [parse_cluster_queue(CQ), parse_cluster_queue(OTHER)]
    assert flavor is not None and all(queues)
    return KueueRead(
        served=True,
        flavors={"h100": flavor},
        queues={q.name: q for q in queues if q},
        local_queue={"spec": {"clusterQueue": "cq"}},
        workloads=[WAITING],
    )


def test_a_waiting_workload_with_its_queue_quota_conditions_and_unknown_position() -> None:
    pod_sets = pod_sets_of_job(JOB)
    verdict = judge(_read(), "lq", pod_sets, skip="ns/job-train")
    assert not verdict.quota and "maximum capacity (3)" in verdict.assignment.message
    text = render_kueue(
        "job ns/train",
        "lq",
        pod_sets,
        verdict,
        ClusterView.build([], []),
        state=workload_state(WAITING),
        position=None,
        predicted=False,
    )
    lines = text.splitlines()
    assert lines[0] == "job ns/train: LocalQueue lq → ClusterQueue cq (cohort c)"
    assert lines[1] == f"  pod set main: 2 × ({GPU} 2)"
    assert lines[3].split() == ["FLAVOR", "RESOURCE", "NOMINAL", "BORROW", "LIMIT", "USED",
                                "COHORT", "UNUSED", "FREE", "NOW"]  # fmt: skip
    assert lines[4].split() == ["h100", GPU, "2", "1", "0", "1", "3"]
    assert "    QuotaReserved=False Pending: couldn't assign flavors" in text
    assert f"  {NOT_SERVED}" in lines
    assert lines[-2].startswith("will not be admitted now: couldn't assign flavors to pod set main")


def test_a_position_the_visibility_api_gives() -> None:
    pod_sets = pod_sets_of_job({**JOB, "spec": {**JOB["spec"], "parallelism": 1}})
    verdict = judge(_read(), "lq", pod_sets, skip="ns/job-train")
    assert verdict.assignment.fits and verdict.assignment.flavors == ({GPU: "h100"},)
    text = render_kueue(
        "job ns/train", "lq", pod_sets, verdict, ClusterView.build([], []),
        state=workload_state(WAITING), position=Position(3, 7), predicted=False,
    )  # fmt: skip
    assert "  position: 3 in its LocalQueue, 7 in its ClusterQueue (0 is next)" in text
    assert "  quota   ok    Kueue would assign h100 for nvidia.com/gpu" in text
    assert not verdict.schedules, "no node judged: not said to schedule"
