"""The cluster dashboard's "Queues (Kueue)" row: GPU workloads that wait in Kueue's queues,
why and for how long, each queue's quota per flavor, and its admissions and preemptions.

A row of its own because it reads only Kueue's series: where the cluster has no Kueue its
panels are empty, and the row says so in its descriptions rather than showing zeros.
"""

from __future__ import annotations

from kube_gpu_exporter.grafana import queue_queries as qk
from kube_gpu_exporter.grafana.model import Row, Target
from kube_gpu_exporter.grafana.panels import line_at, renamed, table, timeseries
from kube_gpu_exporter.rules.alerts.queues import KUBE_GPU_WORKLOAD_PENDING_TOO_LONG
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.settings.values import duration_seconds

NO_KUEUE = " Empty where the cluster has no Kueue."


def queues_row(cfg: Config, q: Query) -> Row:
    pending = KUBE_GPU_WORKLOAD_PENDING_TOO_LONG.of(cfg)
    by_reason = "{{cluster_queue}} {{reason}}"
    return Row(
        "Queues (Kueue)",
        (
            timeseries(
                "Pending GPU workloads by queue and reason",
                "none",
                Target(qk.pending_workloads(q), by_reason),
                min=0,
                stack=True,
                description="Kueue Workloads asking for GPUs that Kueue has not admitted: "
                "their Jobs are suspended and have no pods, so the pending-pod panels do "
                "not show them. The reason is Kueue's, or the cluster view's node-fit "
                "reason where no node of the queue's flavors could run them." + NO_KUEUE,
            ),
            timeseries(
                "GPUs asked by pending workloads",
                "none",
                Target(qk.pending_gpus(q), by_reason),
                min=0,
                stack=True,
                description="Pod sets' counts times each pod's GPU requests." + NO_KUEUE,
            ),
            timeseries(
                "Oldest pending workload per queue",
                "s",
                Target(qk.oldest_wait(q), "{{cluster_queue}}"),
                min=0,
                description="The age of each queue's oldest waiting GPU Workload; the line is "
                f"KubeGpuWorkloadPendingTooLong's threshold ({pending.threshold})." + NO_KUEUE,
                **line_at(duration_seconds(pending.threshold)),
            ),
            timeseries(
                "Workloads admitted and preempted per hour",
                "none",
                *(
                    Target(qk.events_per_hour(q, metric), f"{{{{cluster_queue}}}} {what}")
                    for what, metric in qk.EVENTS.items()
                ),
                min=0,
                description="GPU Workloads the cluster view saw Kueue admit, and evict by "
                "preemption, per queue (counted since the view started)." + NO_KUEUE,
            ),
            table(
                "GPU quota per queue and flavor",
                "none",
                *(Target(qk.quota(q, metric), table=True) for metric in qk.QUOTAS.values()),
                width=24,
                description="Each ClusterQueue's GPU quota per ResourceFlavor: nominal, how "
                "much more it may borrow from its cohort (empty: no limit) and what its "
                "admitted Workloads use, borrowed included." + NO_KUEUE,
                **renamed(
                    {
                        "Value #A": "nominal",
                        "Value #B": "borrowing limit",
                        "Value #C": "used",
                    }
                ),
            ),
        ),
    )
