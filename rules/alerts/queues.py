"""Kueue alerts, first part (of group kube-gpu-exporter.scheduling): GPU workloads that wait in
Kueue's queues.

A Job queued by Kueue is suspended until Kueue admits it: it has no pods, so the pod alerts
(GPUPodPendingTooLong) cannot see it wait. The cluster view counts the waiting Workloads per
ClusterQueue with Kueue's reason. The other parts are flavors whose quota no node can serve
(queue_flavors.py) and the quota a queue has used up while its pods leave GPUs idle
(queue_quota.py).
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, label
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    World,
    edges,
    just_over,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, PositiveDuration, duration_seconds
from kube_gpu_exporter.rules.spec import AlertSpec

CQ = "cluster_queue"
GPU = "nvidia.com/gpu"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/<cluster_queue>"


def queue_hints() -> str:
    """What the on-call engineer runs to see a queue's waiting workloads and one Job's case."""
    return sh(
        "kubectl get workloads -A -o wide",
        "kubectl describe clusterqueue <cluster_queue>",
        f"kubectl get --raw {VISIBILITY}/pendingworkloads",
        "kube-gpu-exporter explain job/<name> -n <namespace>",
    )


# --- KubeGpuWorkloadPendingTooLong ---------------------------------------------------------------


class WorkloadPendingTooLongAlert(AlertSettings):
    """`threshold`: the age of a ClusterQueue's oldest waiting GPU Workload that is too long.
    Queueing is what Kueue is for, so the default is longer than a pod's."""

    for_: Duration = Field(default="5m", alias="for")
    threshold: PositiveDuration = "1h"


def _by(q: Query) -> tuple[str, ...]:
    return (*q.cluster, CQ, "reason")


def _pending_rule(a: WorkloadPendingTooLongAlert, q: Query) -> AlertText:
    oldest = agg("max", _by(q), q.view(k.PENDING_WORKLOAD_SECONDS))
    gpus = agg("sum", _by(q), q.view(k.PENDING_WORKLOAD_GPUS))
    return AlertText(
        # The value is the GPUs waiting for that reason; the oldest wait only decides.
        f"{gpus}\n  and {q.on(_by(q))}\n{oldest} > {duration_seconds(a.threshold):g}",
        f"A GPU workload of ClusterQueue {label(CQ)}{in_cluster(q)} has waited for Kueue to "
        f"admit it for more than {a.threshold}"
        "{{ with $labels.reason }} (reason: {{ . }}){{ end }}; "
        "{{ $value | humanize }} GPUs wait in the queue for that reason. "
        f"`kubectl get --raw {VISIBILITY.replace('<cluster_queue>', label(CQ))}/pendingworkloads` "
        "lists them in admission order.",
    )


def _pending_case(a: WorkloadPendingTooLongAlert, w: World) -> Case:
    """Steady ages, each on its side of the threshold for the whole case: 1 % past it fires
    (with the GPUs of every workload waiting for that reason, the younger included), exactly
    at it does not, a reason Kueue has not given yet fires without one, and GPUs without an
    age (no creation time) never do."""
    limit = duration_seconds(a.threshold)
    n = minutes(a.for_) + 10
    over = just_over(limit)
    rows: list[tuple[str, str, str, str, float | None, int]] = [
        # cluster queue, namespace, local queue, reason, oldest age (None: absent), GPUs
        ("gpu-cq", "ml", "team-a", "Pending", over, 8),
        ("gpu-cq", "lab", "team-b", "Pending", limit / 2, 4),
        ("gpu-cq", "ml", "team-a", "ExceedsMaxQuota", limit, 16),  # exactly at it
        ("new-cq", "ml", "new", "", over, 2),  # not yet evaluated by Kueue
        ("spot-cq", "lab", "spot", "Pending", limit / 2, 1),
        ("big-cq", "lab", "big", "Pending", None, 64),  # no age: unknown, never fires
    ]
    series = []
    for cq, ns, lq, reason, age, gpus in rows:
        labels = w.view(cluster_queue=cq, namespace=ns, local_queue=lq, reason=reason)
        series.append(s(k.PENDING_WORKLOAD_GPUS, labels, steady(gpus, n)))
        series.append(s(k.PENDING_WORKLOADS, labels, steady(1, n)))
        if age is not None:
            series.append(s(k.PENDING_WORKLOAD_SECONDS, labels, steady(age, n)))
    firing = (
        Firing(w.view_out(cluster_queue="gpu-cq", reason="Pending"), 12),
        Firing(w.view_out(cluster_queue="new-cq"), 2),  # an empty label is no label
    )
    return Case(tuple(series), edges(a.for_, firing))


def _pending_runbook(a: WorkloadPendingTooLongAlert, q: Query) -> Runbook:
    cq = f'{CQ}="<cluster_queue>"'
    return Runbook(
        meaning=(
            "The oldest GPU workload waiting in the ClusterQueue under one reason has waited "
            f"for more than {a.threshold} for Kueue to admit it. Kueue suspends a queued Job "
            "until it admits it, so no pod exists and nothing is Pending: only its Workload "
            "waits. The reason is Kueue's own (its `QuotaReserved=False` condition: "
            "`Pending` or `WaitingForQuota` — no quota free now; `ExceedsMaxQuota` — more "
            "than the queue could ever get; `NoMatchingFlavor`, `Inadmissible`…), or a "
            "node-fit reason of the cluster view's (`fragmented`, `taint_not_tolerated`…) "
            "once no node of the queue's flavors could run it; absent while Kueue has not "
            "evaluated the workload. The alert's value is the GPUs the queue's workloads ask "
            "for under that reason."
        ),
        impact=(
            "The Job has not started: no pods, no progress, and its place in the queue may "
            "not move while larger or higher-priority workloads are ahead of it. Waiting "
            "helps for `Pending`/`WaitingForQuota` only; the other reasons need a change."
        ),
        diagnosis="\n\n".join(
            (
                "What waits in the queue, for how long, and what the queue has and uses:",
                promql(
                    q.view(k.PENDING_WORKLOAD_GPUS, cq),
                    q.view(k.PENDING_WORKLOAD_SECONDS, cq),
                    q.view(k.QUEUE_NOMINAL, cq),
                    q.view(k.QUEUE_USED, cq),
                ),
                "The workloads, Kueue's message for each (which flavor lacks how much), the "
                "queue's order (the visibility API, where Kueue serves it: its "
                "VisibilityOnDemand feature; `v1beta2` in place of `v1beta1` on the newest "
                "Kueue) and one Job's verdict — its quota per flavor and whether its pods "
                "would fit a node:",
                queue_hints(),
            )
        ),
        mitigation=(
            "By reason: `Pending` / `WaitingForQuota` — the quota is in use: free it (idle "
            "holders: KubeGpuQueueQuotaExhaustedWhileIdle, GPUAllocatedIdle), raise the "
            "queue's `nominalQuota`, or let it borrow (a cohort, a `borrowingLimit`); "
            "`ExceedsMaxQuota` — the workload asks more than the queue's nominal plus "
            "borrowing limit: shrink it or raise the quota; `NoMatchingFlavor` — no flavor "
            "of the queue offers the resource it asks for; a node-fit reason — see "
            "GPUPodPendingTooLong's runbook and KubeGpuFlavorCannotFit. A workload stuck "
            "behind others: its priority class, or the queue's `queueingStrategy` "
            "(`StrictFIFO` blocks on the head)."
        ),
    )


KUBE_GPU_WORKLOAD_PENDING_TOO_LONG = AlertSpec(
    name="KubeGpuWorkloadPendingTooLong",
    summary="GPU workloads have waited too long for Kueue to admit them.",
    settings=WorkloadPendingTooLongAlert,
    rule=_pending_rule,
    cases=_pending_case,
    runbook=_pending_runbook,
)

SPECS = (KUBE_GPU_WORKLOAD_PENDING_TOO_LONG,)
