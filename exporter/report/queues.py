"""The report's Kueue section: per ClusterQueue, the GPU-hours its workloads spent waiting to be
admitted and the longest wait; per queue and flavor, its GPU quota and how much of it was used.

The queries are the dashboard's "Queues (Kueue)" row (grafana/queue_queries.py) over the
period. The section exists only where the period holds Kueue data — a ClusterQueue's GPU
quota or a waiting GPU Workload, as the cluster view served them — so a cluster without
Kueue gets no section rather than a table of zeros. Where it has Kueue, a queue with quota
whose workloads never waited did wait 0 GPU-hours (the view was watching), but it has no
longest wait, and a quota Kueue never counted has no use.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.exporter.report.model import Column, Table
from kube_gpu_exporter.exporter.report.prometheus_api import Sample
from kube_gpu_exporter.exporter.report.queries import ReportQueries
from kube_gpu_exporter.grafana import queue_queries as qk

CQ = "cluster_queue"
HOURS = 2  # decimals of GPU-hours and hours


def seen(rq: ReportQueries) -> str:
    """Whether the period holds Kueue data: a queue's quota or a waiting GPU Workload."""
    found = (
        f"count(last_over_time({rq.q.view(metric, *ns)}[{rq.period.range}]))"
        for metric, ns in ((k.QUEUE_NOMINAL, ()), (k.PENDING_WORKLOAD_GPUS, rq.ns))
    )
    return "\nor\n".join(found)


def asks(rq: ReportQueries) -> tuple[tuple[str, str], ...]:
    """(key, expression) of every query of the section, instant at the period's end."""
    q, period = rq.q, rq.period
    waiting = qk.queue_pending_gpus(q, *rq.ns)
    longest = qk.oldest_wait(q, *rq.ns)
    quota = {role: qk.quota(q, metric) for role, metric in qk.QUOTAS.items()}
    return (
        ("queue_waited", period.gpu_hours(waiting)),
        ("queue_waiting_peak", f"max_over_time({period.grid(waiting)})"),
        ("queue_longest", f"max_over_time({period.grid(longest)})"),
        ("queue_nominal", f"max_over_time({period.grid(quota['nominal'])})"),
        ("queue_borrowing", f"max_over_time({period.grid(quota['borrowing'])})"),
        ("queue_used_mean", f"avg_over_time({period.grid(quota['used'])})"),
        ("queue_used_peak", f"max_over_time({period.grid(quota['used'])})"),
    )


def _by(samples: list[Sample], labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.get(name, "") for name in labels): s.value for s in samples}


def waits(answers: dict[str, list[Sample]]) -> Table:
    waited = _by(answers["queue_waited"], (CQ,))
    peak = _by(answers["queue_waiting_peak"], (CQ,))
    longest = _by(answers["queue_longest"], (CQ,))
    queues = sorted({*waited, *(key[:1] for key in _by(answers["queue_nominal"], qk.QUOTA_KEYS))})
    rows = [
        (name, waited.get((name,), 0.0), peak.get((name,), 0.0), _hours(longest.get((name,))))
        for (name,) in queues
    ]
    rows.sort(key=lambda row: (-row[1], row[0]))
    columns = (
        Column(CQ, "ClusterQueue"),
        Column("waited_gpu_hours", "GPU-hours waited", HOURS),
        Column("peak_gpus_waiting", "Most GPUs waiting", 0),
        Column("longest_wait_hours", "Longest wait (hours)", HOURS),
    )
    return Table.of(
        "queues",
        "Kueue queues: GPU workloads waiting to be admitted",
        columns,
        rows,
        note="GPU-hours waited: the GPUs Kueue Workloads asked for while Kueue had not "
        "admitted them (their Jobs suspended, no pods), integrated over the period. A queue "
        "whose workloads never waited has no longest wait.",
    )


def quotas(answers: dict[str, list[Sample]]) -> Table:
    nominal = _by(answers["queue_nominal"], qk.QUOTA_KEYS)
    borrowing = _by(answers["queue_borrowing"], qk.QUOTA_KEYS)
    mean = _by(answers["queue_used_mean"], qk.QUOTA_KEYS)
    peak = _by(answers["queue_used_peak"], qk.QUOTA_KEYS)
    rows = []
    for key, quota in sorted(nominal.items()):
        used = mean.get(key)
        share = used / quota * 100 if used is not None and quota > 0 else None
        rows.append((*key, quota, borrowing.get(key), used, peak.get(key), share))
    columns = (
        Column(CQ, "ClusterQueue"),
        Column("flavor", "Flavor"),
        Column("resource", "Resource"),
        Column("nominal", "Nominal quota", 0),
        Column("borrowing_limit", "Borrowing limit", 0),
        Column("used_mean", "Used on average", 2),
        Column("used_peak", "Most used", 0),
        Column("used_percent", "Used % of nominal", 1),
    )
    return Table.of(
        "queue_quota",
        "Kueue queues: GPU quota and its use",
        columns,
        rows,
        note="Per ClusterQueue and ResourceFlavor, the largest nominal quota and borrowing "
        "limit of the period (— : no limit) and what admitted Workloads used, borrowed "
        "included, as Kueue counts it. Over 100 % of nominal is borrowed from the cohort.",
    )


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600


def tables(answers: dict[str, list[Sample]], kueue: bool) -> tuple[Table, ...]:
    """The section's tables; none where the period holds no Kueue data."""
    return (waits(answers), quotas(answers)) if kueue else ()
