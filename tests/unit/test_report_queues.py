"""The report's Kueue section from query answers: absent without Kueue data, asked only with
it; GPU-hours waited and the longest wait per queue, a queue that never waited at a known 0
with no longest wait; quota per flavor with its use, a missing borrowing limit or use left
empty, never 0."""

from __future__ import annotations

from kube_gpu_exporter.exporter.report.collect import Results, asks
from kube_gpu_exporter.exporter.report.period import parse_since
from kube_gpu_exporter.exporter.report.prometheus_api import Sample
from kube_gpu_exporter.exporter.report.queries import ReportQueries
from kube_gpu_exporter.exporter.report.queues import seen, tables
from kube_gpu_exporter.exporter.report.tables import all_tables
from kube_gpu_exporter.rules.config import Config

RQ = ReportQueries(Config(), parse_since("7d", now=1_000_000_000))
GPU = "nvidia.com/gpu"


def _cq(values: dict[str, float]) -> list[Sample]:
    return [Sample({"cluster_queue": q}, v) for q, v in values.items()]


def _quota(values: dict[tuple[str, str], float]) -> list[Sample]:
    return [
        Sample({"cluster_queue": q, "flavor": f, "resource": GPU}, v)
        for (q, f), v in values.items()
    ]


ANSWERS = {
    "queue_waited": _cq({"ml-cq": 16.0}),
    "queue_waiting_peak": _cq({"ml-cq": 8.0}),
    "queue_longest": _cq({"ml-cq": 7200.0}),
    "queue_nominal": _quota({("ml-cq", "h100"): 8, ("lab-cq", "a100"): 2}),
    "queue_borrowing": _quota({("ml-cq", "h100"): 4}),  # lab-cq sets no limit
    "queue_used_mean": _quota({("ml-cq", "h100"): 6.0}),  # lab-cq: never counted
    "queue_used_peak": _quota({("ml-cq", "h100"): 12.0}),
}


def test_no_kueue_data_no_section_and_no_queries() -> None:
    keys = {a.key for a in asks(RQ, scheduling=True)}
    assert not any(key.startswith("queue_") for key in keys)
    assert tables(ANSWERS, kueue=False) == ()
    assert not [t for t in all_tables(RQ, _results(kueue=False)) if t.key.startswith("queue")]


def test_with_kueue_data_the_queries_are_asked() -> None:
    keys = {a.key for a in asks(RQ, scheduling=True, kueue=True)}
    assert set(ANSWERS) <= keys
    assert "kube_gpu_queue_nominal_quota" in seen(RQ)


def test_gpu_hours_waited_and_the_longest_wait_per_queue() -> None:
    waits, _ = tables(ANSWERS, kueue=True)
    assert waits.records() == [
        {
            "cluster_queue": "ml-cq",
            "waited_gpu_hours": 16.0,
            "peak_gpus_waiting": 8.0,
            "longest_wait_hours": 2.0,
        },
        {  # quota, nothing ever waited: 0 GPU-hours, no longest wait
            "cluster_queue": "lab-cq",
            "waited_gpu_hours": 0.0,
            "peak_gpus_waiting": 0.0,
            "longest_wait_hours": None,
        },
    ]


def test_quota_and_its_use_per_flavor() -> None:
    _, quota = tables(ANSWERS, kueue=True)
    assert quota.records() == [
        {
            "cluster_queue": "lab-cq",
            "flavor": "a100",
            "resource": GPU,
            "nominal": 2.0,
            "borrowing_limit": None,
            "used_mean": None,
            "used_peak": None,
            "used_percent": None,
        },
        {
            "cluster_queue": "ml-cq",
            "flavor": "h100",
            "resource": GPU,
            "nominal": 8.0,
            "borrowing_limit": 4.0,
            "used_mean": 6.0,
            "used_peak": 12.0,
            "used_percent": 75.0,
        },
    ]


def _results(kueue: bool) -> Results:
    empty = ("namespace_allocated", "namespace_idle", "mean_utilization", "workload_devices")
    instant: dict[str, list[Sample]] = {key: [] for key in empty}
    instant |= {"workload_idle": [], "holds": [], "hold_allocated": [], "hold_idle": []}
    instant |= {"slowed": [], "hottest": [], "xids": []}
    return Results(instant=instant | ANSWERS, kueue=kueue)
