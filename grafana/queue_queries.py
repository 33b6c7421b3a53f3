"""The dashboards' PromQL for Kueue's queues, read from the cluster view: what waits in each
ClusterQueue and why, for how long, its GPU quota per flavor, and how often it admits and
preempts. The weekly report asks the same expressions over its period.

Kueue suspends a queued Job, so a workload waiting in a queue has no pod: these series, not
the pending-pod ones, show it. Every query keeps `cluster_queue`, the unit a platform team
gives quota to.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.exporter.catalog.metric import Metric
from kube_gpu_exporter.grafana.queries import RATE
from kube_gpu_exporter.rules.promql import Query, agg

CQ = "cluster_queue"
QUOTA_KEYS = (CQ, "flavor", "resource")
QUOTAS = {"nominal": k.QUEUE_NOMINAL, "borrowing": k.QUEUE_BORROWING_LIMIT, "used": k.QUEUE_USED}
EVENTS = {"admitted": k.QUEUE_ADMISSIONS, "preempted": k.QUEUE_PREEMPTIONS}


def pending_workloads(q: Query, *matchers: str) -> str:
    """Waiting GPU Workloads per queue and reason (Kueue's, or a node-fit reason)."""
    return agg("sum", (CQ, "reason"), q.view(k.PENDING_WORKLOADS, *matchers))


def pending_gpus(q: Query, *matchers: str) -> str:
    """The GPUs those waiting Workloads ask for, per queue and reason."""
    return agg("sum", (CQ, "reason"), q.view(k.PENDING_WORKLOAD_GPUS, *matchers))


def queue_pending_gpus(q: Query, *matchers: str) -> str:
    """The GPUs waiting per queue, every reason together."""
    return agg("sum", (CQ,), q.view(k.PENDING_WORKLOAD_GPUS, *matchers))


def oldest_wait(q: Query, *matchers: str) -> str:
    """Per queue, how long its oldest waiting GPU Workload has waited."""
    return agg("max", (CQ,), q.view(k.PENDING_WORKLOAD_SECONDS, *matchers))


def quota(q: Query, metric: Metric) -> str:
    """A queue's nominal quota, borrowing limit or use, per flavor and GPU resource."""
    return agg("max", QUOTA_KEYS, q.view(metric))


def events_per_hour(q: Query, metric: Metric) -> str:
    """GPU Workloads admitted (or preempted) per hour, per queue."""
    return agg("sum", (CQ,), f"rate({q.view(metric)}[{RATE}]) * 3600")
