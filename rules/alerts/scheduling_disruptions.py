"""Scheduling alerts, second part of group kube-gpu-exporter.scheduling: GPU pods that never
got to wait (refused by a namespace's quota) and GPU pods taken off their GPUs (preempted).

Both read counters of the cluster view over a window. They route to the namespace whose pods
suffer, not to the platform team: a quota that is used up is the team's to raise or wait on,
and repeated preemption means the team's priority class is too low for what it runs.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, label
from kube_gpu_exporter.rules.promql import Query, agg, counted_over, fmt_number
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    bursts,
    edges_from,
    just_over,
    last_burst,
    minutes,
    s,
    window_ends,
)
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, one_of
from kube_gpu_exporter.rules.spec import AlertSpec

NS = "namespace"
QUOTA_LABELS = (NS, "quota", "resource")
GPU = "nvidia.com/gpu"


DisruptionReason = Annotated[str, AfterValidator(one_of(tuple(k.DISRUPTION_REASONS)))]


# --- GPUQuotaExhausted ---------------------------------------------------------------------------


class QuotaExhaustedAlert(AlertSettings):
    """Fires on refusals, not on a quota that is fully used: a team using all of its quota is
    the goal; a Job whose pods cannot even be created is the problem."""

    for_: Duration = Field(default="5m", alias="for")
    window: Duration = "15m"
    threshold: int = Field(default=0, ge=0)  # pods refused per window


def _refused(q: Query, a: QuotaExhaustedAlert) -> str:
    def total(rise: str) -> str:
        return agg("sum", (*q.cluster, *QUOTA_LABELS), rise)

    return counted_over(total, q.view(k.QUOTA_REJECTIONS), a.window, str(a.threshold))


def _quota_rule(a: QuotaExhaustedAlert, q: Query) -> AlertText:
    return AlertText(
        _refused(q, a),
        f"Controllers in namespace {label(NS)}{in_cluster(q)} could not create "
        f"{{{{ $value | humanize }}}} pods in the last {a.window}: ResourceQuota "
        f"{label('quota')} has no {label('resource')} left for them. The pods never exist, "
        "so nothing shows them as Pending.",
    )


def _quota_case(a: QuotaExhaustedAlert, w: World) -> Case:
    """Refusals 1 past the threshold in a window fire; exactly the threshold does not. The
    refusals stop once `for` has held: the alert fires to the last minute of the window after
    the last of them, and not a minute longer, on both Prometheus generations."""
    span, held = minutes(a.window), minutes(a.for_)
    start = span + 5  # a full window of flat counters first: old refusals do not fire
    last = last_burst(start, span, held)
    n = last + span + 5
    t = a.threshold

    def refused(namespace: str, quota: str, per_window: int) -> Series:
        labels = w.view(namespace=namespace, quota=quota, resource=GPU)
        return s(k.QUOTA_REJECTIONS, labels, bursts(per_window, start, span, n, last))

    series = (
        refused("ml", "gpu-quota", t + 1),
        refused("lab", "gpu-quota", t),  # exactly at the threshold
    )
    firing = (Firing(w.view_out(namespace="ml", quota="gpu-quota", resource=GPU), t + 1),)
    return Case(series, (*edges_from(a.for_, firing, start), *window_ends(last, a.window, firing)))


def _quota_runbook(a: QuotaExhaustedAlert, q: Query) -> Runbook:
    ns = 'namespace="<namespace>"'
    return Runbook(
        meaning=(
            f"Within {a.window}, a controller (a Job, ReplicaSet or StatefulSet) of the "
            f"namespace failed to create more than {a.threshold} pods because a ResourceQuota "
            "on a GPU resource had too little left for their requests. Such pods are never "
            "created: they are not Pending, the scheduler never sees them, and only the "
            "controller's `FailedCreate` events tell — which the cluster view counts."
        ),
        impact=(
            "The workload runs with fewer replicas than asked, or a Job does not start at "
            "all, until the quota frees up. The controller retries with backoff, so it "
            "starts late even after the quota is raised."
        ),
        diagnosis="\n\n".join(
            (
                "What the quota allows and what is used:",
                promql(q.view(k.QUOTA_HARD, ns), q.view(k.QUOTA_USED, ns)),
                sh(
                    "kubectl describe resourcequota -n <namespace> <quota>",
                    "kubectl get events -n <namespace> --field-selector reason=FailedCreate",
                ),
            )
        ),
        mitigation=(
            "Either the team uses what it has (lower the replicas or the per-pod GPU request, "
            "or end idle holders: GPUAllocatedIdle names them), or the platform team raises "
            "the quota. `kube-gpu-exporter explain -f <pod manifest>` checks a pod against "
            "the quota before it is submitted."
        ),
    )


GPU_QUOTA_EXHAUSTED = AlertSpec(
    name="GPUQuotaExhausted",
    summary="Pods cannot be created: a namespace's GPU quota is used up.",
    settings=QuotaExhaustedAlert,
    rule=_quota_rule,
    cases=_quota_case,
    runbook=_quota_runbook,
)

# --- GPUPreemptionRate ---------------------------------------------------------------------------


class PreemptionRateAlert(AlertSettings):
    """`reasons`: which disruptions count (kube_gpu_pod_disruptions_total's `reason`)."""

    for_: Duration = Field(default="0m", alias="for")
    window: Duration = "1h"
    threshold: float = Field(default=3, ge=0)  # GPU pods disrupted per window
    reasons: tuple[DisruptionReason, ...] = (k.PREEMPTED,)


def _disrupted(q: Query, a: PreemptionRateAlert) -> str:
    def total(rise: str) -> str:
        return agg("sum", (*q.cluster, NS), rise)

    reasons = f'reason=~"{"|".join(a.reasons)}"'
    counter = q.view(k.DISRUPTIONS, reasons)
    return counted_over(total, counter, a.window, fmt_number(a.threshold))


def _preemption_rule(a: PreemptionRateAlert, q: Query) -> AlertText:
    return AlertText(
        _disrupted(q, a),
        f"{{{{ $value | humanize }}}} GPU pods of namespace {label(NS)}{in_cluster(q)} were "
        f"taken off their GPUs ({', '.join(a.reasons)}) in the last {a.window}, more than "
        f"{fmt_number(a.threshold)}: their work since the last checkpoint is lost each time.",
    )


def _preemption_case(a: PreemptionRateAlert, w: World) -> Case:
    """Disruptions past the threshold fire, exactly at it do not; like the quota's case, they
    stop once `for` has held and fire to the window's last minute after the last of them."""
    span, held = minutes(a.window), minutes(a.for_)
    start = span + 5
    last = last_burst(start, span, held)
    n = last + span + 5
    t, over = a.threshold, just_over(a.threshold)
    other = next((r for r in k.DISRUPTION_REASONS if r not in a.reasons), None)

    def disrupted(namespace: str, reason: str, per_window: float) -> Series:
        labels = w.view(namespace=namespace, resource=GPU, reason=reason)
        return s(k.DISRUPTIONS, labels, bursts(per_window, start, span, n, last))

    # Past the threshold, split over the counted reasons; exactly at it; and many
    # disruptions of a reason that is not counted.
    series = [disrupted("ml", reason, over / len(a.reasons)) for reason in a.reasons]
    series.append(disrupted("lab", a.reasons[0], t))
    if other is not None:
        series.append(disrupted("web", other, (t + 1) * 10))
    firing = (Firing(w.view_out(namespace="ml"), over),)
    ends = window_ends(last, a.window, firing)
    return Case(tuple(series), (*edges_from(a.for_, firing, start), *ends))


def _preemption_runbook(a: PreemptionRateAlert, q: Query) -> Runbook:
    counted = ", ".join(a.reasons)
    return Runbook(
        meaning=(
            f"More than {fmt_number(a.threshold)} GPU pods of the namespace were disrupted "
            f"({counted}) within {a.window}. The cluster view counts each GPU pod once, from "
            "its DisruptionTarget condition: `preempted` (the scheduler made room for a "
            "higher-priority pod), `evicted` (the Eviction API: drains, the descheduler, "
            "autoscalers), `taint_manager` (a NoExecute taint), `node_lost`, `kubelet` "
            "(node pressure or shutdown)."
        ),
        impact=(
            "Each disruption throws away the pod's work since its last checkpoint and its "
            "start-up time (loading a model, warming caches): a job preempted every few "
            "minutes may never finish."
        ),
        diagnosis="\n\n".join(
            (
                "Disruptions by namespace and reason:",
                promql(f"sum by (namespace, reason) (increase({q.view(k.DISRUPTIONS)}[1h]))"),
                "Who preempts whom — priority classes of the victims and the pods that "
                "replaced them:",
                sh(
                    "kubectl get events -A --field-selector reason=Preempted",
                    "kubectl get pods -n <namespace> -o custom-columns="
                    "NAME:.metadata.name,PRIORITY:.spec.priorityClassName",
                    "kubectl get priorityclasses",
                ),
            )
        ),
        mitigation=(
            "Give the workload a priority class that matches its importance, or make it "
            "preemption-tolerant (frequent checkpoints, `preemptionPolicy: Never` for the "
            "pods that must not push others out). With Kueue, check the ClusterQueue's "
            "`preemption` settings and borrowing. If `evicted` dominates, look at drains and "
            "the descheduler's policies; a PodDisruptionBudget limits voluntary evictions."
        ),
    )


GPU_PREEMPTION_RATE = AlertSpec(
    name="GPUPreemptionRate",
    summary="GPU pods are preempted too often.",
    settings=PreemptionRateAlert,
    rule=_preemption_rule,
    cases=_preemption_case,
    runbook=_preemption_runbook,
)

SPECS = (GPU_QUOTA_EXHAUSTED, GPU_PREEMPTION_RATE)
