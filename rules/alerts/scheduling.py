"""Scheduling alerts (group kube-gpu-exporter.scheduling), first part: GPU pods that wait.

Read from the cluster view (`kube-gpu-exporter cluster`, selected by `selectors.cluster_view`),
which classifies every pending GPU pod by the first reason that holds: the reason is a label,
so an alert says *why* the pods wait, not only that they do. A pod only Kueue's gates hold
carries its Workload's reason instead, Kueue's own word while it queues (an open set:
`Pending`, `WaitingForQuota`, …): the pod alert selects the view's own words alone, so a queue
wait is left to KubeGpuWorkloadPendingTooLong (queues.py). The second part
(scheduling_disruptions.py) covers pods refused by quota and pods preempted.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

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
from kube_gpu_exporter.rules.settings.values import (
    Duration,
    PositiveDuration,
    duration_seconds,
    one_of,
)
from kube_gpu_exporter.rules.spec import AlertSpec

NS = "namespace"
PRODUCT_LABELS = ("resource", "gpu_product")
H100 = "NVIDIA-H100-80GB-HBM3"
GPU = "nvidia.com/gpu"
# Reasons Kueue gives a queued Workload (0.17's, then 0.19+'s), as a pod only its gates hold
# carries them: the cases check that none of them pages as a stuck pod.
KUEUE_REASONS = ("Pending", "WaitingForQuota", "ExceedsMaxQuota")


PendingReason = Annotated[str, AfterValidator(one_of(tuple(k.PENDING_REASONS)))]


def explain_hint() -> str:
    """How the on-call engineer sees one pod's evidence."""
    return sh(
        "kubectl get pods -n <namespace> --field-selector status.phase=Pending",
        "kube-gpu-exporter explain -n <namespace> <pod>",
    )


# --- GPUPodPendingTooLong ------------------------------------------------------------------------


class PendingTooLongAlert(AlertSettings):
    """`threshold`: the age of the namespace's oldest waiting GPU pod that is too long.
    `ignore_reasons`: reasons that are a pod's normal state, not a fault: a gated pod waits
    for whoever set the gate (a Kueue-gated one, for its queue to admit it), by design."""

    for_: Duration = Field(default="5m", alias="for")
    threshold: PositiveDuration = "30m"
    ignore_reasons: tuple[PendingReason, ...] = (k.Reason.GATED.value,)

    @model_validator(mode="after")
    def _some_reason_left(self) -> PendingTooLongAlert:
        # The rule selects the reasons left: none left would select every reason, Kueue's too.
        if not alerting_reasons(self):
            raise ValueError(
                "ignore_reasons: leaves no reason to alert on; set `enabled: false` instead "
                f"(got {list(self.ignore_reasons)!r})"
            )
        return self


def alerting_reasons(a: PendingTooLongAlert) -> tuple[str, ...]:
    """The view's own reasons the alert pages for: a fixed list, so that Kueue's reason words
    (an open set, which the view gives a pod only Kueue holds while its Workload queues) are
    never matched, and a queue wait pages once, as KubeGpuWorkloadPendingTooLong."""
    return tuple(r.value for r in k.PENDING_REASONS if r.value not in a.ignore_reasons)


def _oldest(q: Query, a: PendingTooLongAlert) -> str:
    ours = f'reason=~"{"|".join(alerting_reasons(a))}"'
    return agg("max", (*q.cluster, NS, "reason"), q.view(k.PENDING_SECONDS, ours))


def _pending_rule(a: PendingTooLongAlert, q: Query) -> AlertText:
    return AlertText(
        f"{_oldest(q, a)} > {duration_seconds(a.threshold):g}",
        f"A GPU pod of namespace {label(NS)}{in_cluster(q)} has waited for the scheduler for "
        f"{{{{ $value | humanizeDuration }}}} (more than {a.threshold}), because: "
        f"{label('reason')}. `kube-gpu-exporter explain -n {label(NS)} <pod>` shows the "
        "evidence.",
    )


def _pending_case(a: PendingTooLongAlert, w: World) -> Case:
    """The ages are steady so that each sits on its side of the threshold for the whole case:
    1 % past it fires, exactly at it does not, and an ignored reason never does, nor Kueue's
    reason for a pod only its gates hold, however old."""
    limit = duration_seconds(a.threshold)
    n = minutes(a.for_) + 10
    over = just_over(limit)

    ages: list[tuple[str, str, float]] = [  # namespace, reason, age of its oldest pod
        ("ml", k.Reason.FRAGMENTED.value, over),
        ("ml", k.Reason.INSUFFICIENT_GPUS.value, limit),  # exactly at it
        ("lab", k.Reason.TAINT_NOT_TOLERATED.value, limit / 2),
    ]
    ages += [("queued", reason, limit * 10) for reason in a.ignore_reasons]
    # pods only Kueue holds, under their Workload's reason: Kueue's words are the queue alert's
    ages += [("queued", reason, limit * 10) for reason in KUEUE_REASONS]
    series = tuple(
        s(k.PENDING_SECONDS, w.view(namespace=ns, reason=reason), steady(seconds, n))
        for ns, reason, seconds in ages
    )
    firing = (Firing(w.view_out(namespace="ml", reason=k.Reason.FRAGMENTED.value), over),)
    return Case(series, edges(a.for_, firing))


def _pending_runbook(a: PendingTooLongAlert, q: Query) -> Runbook:
    ignored = ", ".join(a.ignore_reasons) or "none"
    return Runbook(
        meaning=(
            f"A GPU pod of the namespace has waited for the scheduler for more than "
            f"{a.threshold}. The cluster view re-evaluates the scheduler's filters for every "
            "pending GPU pod and labels it with the first reason that holds: `gated` "
            "(scheduling gates, e.g. Kueue), `awaiting_preemption` (nominated to a node whose "
            "victims are still terminating), `not_advertised` (the device plugin advertises "
            "no such resource anywhere), `fragmented` (enough free in total, not on one "
            "node), `taint_not_tolerated`, `gpu_type_unavailable` (its GPU-type selector "
            "matches no node with room), `affinity_unmatched`, `insufficient_gpus`, or "
            "`other` (it fits a node on GPUs, CPU and memory; something the view does not "
            f"model holds it: DRA claims, inter-pod affinity, volumes). Ignored: {ignored}. "
            "A pod only Kueue's gates hold carries its Workload's reason: Kueue's own while "
            "the Workload waits for quota (`Pending`, `WaitingForQuota`, …), which this alert "
            "leaves to KubeGpuWorkloadPendingTooLong; one of the reasons above when no node "
            "could ever run it, or its admitted pods cannot be placed."
        ),
        impact=(
            "The workload has not started: a training job misses its slot, an inference "
            "replica is not serving. For `insufficient_gpus` and `fragmented` the cluster "
            "is short of GPUs; for the others the pod or the nodes are misconfigured and "
            "waiting longer will not help."
        ),
        diagnosis="\n\n".join(
            (
                "Which pods wait, why, and what could run now:",
                promql(
                    q.view(k.PENDING_PODS, 'namespace="<namespace>"'),
                    q.view(k.LARGEST_REQUEST),
                ),
                "One pod's evidence — each check, which nodes have how many free GPUs, which "
                "taint or label excluded them, what the quota leaves:",
                explain_hint(),
            )
        ),
        mitigation=(
            "By reason: `insufficient_gpus` — add capacity or lower the request; "
            "`fragmented` — see GPUFragmentation; `taint_not_tolerated` — add the "
            "toleration the GPU nodes' taint needs (often `nvidia.com/gpu:NoSchedule`); "
            "`gpu_type_unavailable` / `affinity_unmatched` — relax the node selector or "
            "affinity, or add nodes of that type; `not_advertised` — the device plugin is "
            "down (GPUNotAdvertised); `awaiting_preemption` — victims are terminating, check "
            "their grace periods; `other` — `kubectl describe pod` shows the scheduler's own "
            "message."
        ),
    )


GPU_POD_PENDING_TOO_LONG = AlertSpec(
    name="GPUPodPendingTooLong",
    summary="GPU pods have waited too long for the scheduler.",
    settings=PendingTooLongAlert,
    rule=_pending_rule,
    cases=_pending_case,
    runbook=_pending_runbook,
)

# --- GPUFragmentation ----------------------------------------------------------------------------


class FragmentationAlert(AlertSettings):
    """Fragmentation often resolves as pods end, so the default `for` is long."""

    for_: Duration = Field(default="30m", alias="for")


def _fragmented(q: Query) -> str:
    fragmented = q.view(k.PENDING_PODS, f'reason="{k.Reason.FRAGMENTED.value}"')
    return agg("sum", (*q.cluster, *PRODUCT_LABELS), fragmented)


def _fragmentation_rule(a: FragmentationAlert, q: Query) -> AlertText:
    product = "{{ with $labels.gpu_product }} ({{ . }}){{ end }}"
    return AlertText(
        f"{_fragmented(q)} > 0",
        f"{{{{ $value | humanize }}}} GPU pods{in_cluster(q)} have waited for {a.for_} for "
        f"more {label('resource')}{product} than any one node has free, while enough is free "
        "across the nodes: the free devices are scattered.",
    )


def _fragmentation_case(a: FragmentationAlert, w: World) -> Case:
    n = minutes(a.for_) + 10

    fragmented, short = k.Reason.FRAGMENTED.value, k.Reason.INSUFFICIENT_GPUS.value
    rows = (  # namespace, GPU product, reason, pods
        ("ml", H100, fragmented, 1),
        ("lab", H100, fragmented, 2),  # two namespaces, one alert per product
        ("ml", "NVIDIA-A100-SXM4-80GB", fragmented, 0),  # none (>= would fire)
        ("ml", "NVIDIA-L4", short, 4),  # short of GPUs, not scattered
    )
    series = tuple(
        s(
            k.PENDING_PODS,
            w.view(namespace=ns, resource=GPU, gpu_product=product, reason=reason),
            steady(count, n),
        )
        for ns, product, reason, count in rows
    )
    firing = (Firing(w.view_out(resource=GPU, gpu_product=H100), 3),)
    return Case(series, edges(a.for_, firing))


def _fragmentation_runbook(a: FragmentationAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"For {a.for_}, GPU pods have waited for more devices than any one eligible node "
            "has free, while the eligible nodes together have enough free: an 8-GPU job "
            "cannot start beside eight nodes with one free GPU each. The cluster view counts "
            "a node eligible when it is Ready, schedulable, its taints are tolerated by the "
            "standard GPU tolerations, and CPU and memory fit."
        ),
        impact=(
            "Paid-for GPUs sit free while large jobs wait: the cluster looks under-used and "
            "over-subscribed at once. It worsens as small pods keep landing on the free "
            "devices of different nodes."
        ),
        diagnosis="\n\n".join(
            (
                "The largest request that could schedule now, how scattered the free "
                "devices are (1 − largest free block / total free), and where they are:",
                promql(
                    q.view(k.LARGEST_REQUEST),
                    q.view(k.FRAGMENTATION),
                    f"sort_desc({q.view(k.NODE_FREE)} > 0)",
                ),
                explain_hint(),
            )
        ),
        mitigation=(
            "Pack small GPU pods onto fewer nodes: a scheduler profile scoring "
            "`MostAllocated` for GPU resources (NodeResourcesFit's scoringStrategy) does it "
            "for new pods; for running ones, drain the node with the fewest GPU pods once "
            "they can be restarted, or let the descheduler do it. Dedicate some nodes to "
            "whole-node jobs (a taint they tolerate) so small pods do not spread over them."
        ),
    )


GPU_FRAGMENTATION = AlertSpec(
    name="GPUFragmentation",
    summary="GPU pods wait while enough GPUs are free, scattered over nodes.",
    settings=FragmentationAlert,
    rule=_fragmentation_rule,
    cases=_fragmentation_case,
    runbook=_fragmentation_runbook,
)

SPECS = (GPU_POD_PENDING_TOO_LONG, GPU_FRAGMENTATION)
