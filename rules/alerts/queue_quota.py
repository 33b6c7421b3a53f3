"""Kueue alerts, third part (of group kube-gpu-exporter.scheduling): a ClusterQueue that has used
up its GPU quota while GPUs its pods hold sit idle.

Kueue admits against quota, not use: an admitted Job that stopped working keeps its quota,
and the queue's next workloads wait behind it. The quota side is the cluster view's
(nominal, borrowing limit, used per flavor); the idle side is the recording rules' idle holds
(the same definition as GPUAllocatedIdle), joined to the queue through the view's
`kube_gpu_queue_pod_info`, which names the queue of every GPU pod of an admitted workload.

Where a queue sets no borrowing limit in a flavor its limit counts as its nominal quota: what
it borrows beyond that is the cohort's unused quota, lent only while the lenders do not need
it, so a queue at its nominal quota is as full as it can count on. A flavor with no quota of
its own (nominal 0) is only ever exhausted by what it borrowed.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, label, query_list, row
from kube_gpu_exporter.rules.alerts import workloads
from kube_gpu_exporter.rules.alerts.queues import CQ, GPU, queue_hints
from kube_gpu_exporter.rules.promql import Query, agg, fmt_percent
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    edges,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration
from kube_gpu_exporter.rules.spec import AlertSpec

POD = ("namespace", "pod")


class QuotaExhaustedWhileIdleAlert(AlertSettings):
    """`idle_gpus`: how many idle GPUs of the queue's pods are tolerated while its quota is
    used up (whole GPUs; a shared GPU counts 1/k, a MIG slice its share). Idle itself is
    GPUAllocatedIdle's threshold and window."""

    for_: Duration = Field(default="15m", alias="for")
    idle_gpus: int = Field(default=0, ge=0)


def _in_queue(q: Query, held: str, keep: tuple[str, ...], *matchers: str) -> str:
    """`held` (per-hold recorded series) with the ClusterQueue of its pod, `keep` labels of
    the pod's info series copied onto it; holds of pods in no queue drop out."""
    pods = agg("max", (*q.cluster, *POD, CQ), q.view(k.QUEUE_POD_INFO, *matchers))
    return f"{held}\n  * {q.on((*q.cluster, *POD))} group_left ({', '.join(keep)})\n{pods}"


def _idle_gpus(q: Query) -> str:
    """Idle GPUs held by each queue's pods; 0 for a queue whose pods hold GPUs and idle none,
    so that a threshold is compared with a number, not with nothing."""
    n = names(q)
    by = (*q.cluster, CQ)
    idle = agg("sum", by, _in_queue(q, q.recorded(n["allocation_idle"]), (CQ,)))
    held = agg("sum", by, _in_queue(q, q.recorded(n["allocation_share"]), (CQ,)))
    return f"{idle}\nor\n0 * {held}"


def _exhausted(q: Query) -> str:
    """Queues whose used quota reached nominal + borrowing limit (nominal where none is set)
    in some flavor and GPU resource, used > 0."""
    nominal, used = q.view(k.QUEUE_NOMINAL), q.view(k.QUEUE_USED)
    limit = f"({nominal} + {q.view(k.QUEUE_BORROWING_LIMIT)}\n  or {nominal})"
    return agg("max", (*q.cluster, CQ), f"{used} >= {limit} > 0")


def _rule(a: QuotaExhaustedWhileIdleAlert, q: Query) -> AlertText:
    idle_gpus = workloads.GPU_ALLOCATED_IDLE.of(q.config)
    keys = (*q.cluster, CQ)
    idle = q.recorded(names(q)["allocation_idle"])
    pods = query_list(
        agg("max", POD, _in_queue(q, idle, (), *(f"{key}=%q" for key in keys))),
        keys,
        "pod",
        f" {row('namespace')}/{row('pod')}",
        " (idle:{})",
    )
    return AlertText(
        f"(\n{_idle_gpus(q)}\n) > {a.idle_gpus}\n  and {q.on(keys)}\n{_exhausted(q)}",
        f"ClusterQueue {label(CQ)}{in_cluster(q)} has used all of its GPU quota in a flavor "
        "(nominal plus borrowing limit; nominal where it sets none) for "
        f"{a.for_}, while its pods leave "
        '{{ $value | printf "%.3g" }} GPUs idle '
        f"(more than {a.idle_gpus}), using under "
        f"{fmt_percent(idle_gpus.threshold)} of them over {idle_gpus.window}{pods}. Its "
        "waiting workloads cannot be admitted until that quota is freed.",
    )


def _case(a: QuotaExhaustedWhileIdleAlert, w: World) -> Case:
    """Queues with used-up quota (at nominal + borrowing limit; at nominal without a limit),
    with room (over nominal, under nominal + limit), and with nothing of a flavor used; pods
    idle (utilization 0) or busy (1). `full-cq` idles one GPU more than tolerated and fires;
    `edge-cq` idles exactly as many and does not; the others have room, or no idle pod in a
    queue, or idle pods in no queue."""
    n = minutes(a.for_) + 10
    quotas = (  # cluster queue, flavor, nominal, borrowing limit (None: absent), used
        ("full-cq", "h100", 8, 4, 12),  # at nominal + limit
        ("nolimit-cq", "h100", 4, None, 4),  # no limit: at nominal
        ("edge-cq", "h100", 4, None, 4),
        ("roomy-cq", "h100", 8, 4, 9),  # borrowing, with room left
        ("zero-cq", "spot", 0, None, 0),  # a flavor it has no quota in, unused
        ("zero-cq", "h100", 8, None, 2),
    )
    series: list[Series] = []
    for cq, flavor, nominal, limit, used in quotas:
        labels = w.view(cluster_queue=cq, flavor=flavor, resource=GPU)
        series.append(s(k.QUEUE_NOMINAL, labels, steady(nominal, n)))
        series.append(s(k.QUEUE_USED, labels, steady(used, n)))
        if limit is not None:
            series.append(s(k.QUEUE_BORROWING_LIMIT, labels, steady(limit, n)))
    # (namespace, pod, its queue or None, idle?)
    pods: list[tuple[str, str, str | None, bool]] = [
        *(("team-a", f"train-{i}", "full-cq", True) for i in range(a.idle_gpus + 1)),
        ("team-a", "train-busy", "full-cq", False),
        ("team-c", "job-0", "nolimit-cq", True),
        *(("team-e", f"edge-{i}", "edge-cq", True) for i in range(a.idle_gpus)),
        ("team-e", "edge-busy", "edge-cq", False),
        ("team-b", "infer-0", "roomy-cq", True),
        *(("team-z", f"zero-{i}", "zero-cq", True) for i in range(a.idle_gpus + 1)),
        ("team-d", "loose-0", None, True),
    ]
    for gpu, (ns, pod, queue, idle) in enumerate(pods):
        held = w.pod("a", gpu, ns, pod)
        series.append(Series(c.ALLOCATION_INFO.name, held, steady(1, n)))
        series.append(s(c.POD_UTILIZATION, held, steady(0 if idle else 1, n)))
        if queue is not None:
            info = w.view(namespace=ns, pod=pod, cluster_queue=queue, local_queue=f"{ns}-queue")
            series.append(s(k.QUEUE_POD_INFO, info, steady(1, n)))

    def fired(cq: str) -> Firing:
        rows = tuple({"namespace": ns, "pod": p} for ns, p, q, idle in pods if q == cq and idle)
        return Firing(w.view_out(cluster_queue=cq), len(rows), rows)

    firing = (fired("full-cq"), *((fired("nolimit-cq"),) if a.idle_gpus == 0 else ()))
    return Case(tuple(series), edges(a.for_, firing))


def _runbook(a: QuotaExhaustedWhileIdleAlert, q: Query) -> Runbook:
    idle = workloads.GPU_ALLOCATED_IDLE.of(q.config)
    n = names(q)
    cq = f'{CQ}="<cluster_queue>"'
    return Runbook(
        meaning=(
            "The ClusterQueue's admitted workloads use all of its quota of a GPU resource in "
            "some flavor — its nominal quota plus its borrowing limit, or its nominal quota "
            "where it sets no borrowing limit (beyond that it borrows the cohort's unused "
            "quota, which the lenders reclaim when they need it, so a queue at its nominal "
            f"quota is as full as it can count on) — while more than {a.idle_gpus} GPUs its "
            f"pods hold have been idle (under {fmt_percent(idle.threshold)} on average over "
            f"{idle.window}, as GPUAllocatedIdle judges them), for {a.for_}. The alert's value "
            "is those idle GPUs; its description names the idle pods."
        ),
        impact=(
            "Kueue admits against quota, not use: the idle workloads keep the quota, and the "
            "queue's waiting workloads (KubeGpuWorkloadPendingTooLong) cannot be admitted "
            "while paid-for GPUs do nothing."
        ),
        diagnosis="\n\n".join(
            (
                "The queue's quota per flavor, what waits in it, and its idle pods:",
                promql(
                    q.view(k.QUEUE_NOMINAL, cq),
                    q.view(k.QUEUE_BORROWING_LIMIT, cq),
                    q.view(k.QUEUE_USED, cq),
                    q.view(k.PENDING_WORKLOAD_GPUS, cq),
                    _in_queue(q, q.recorded(n["allocation_idle"]), (CQ, "local_queue"), cq),
                ),
                queue_hints(),
            )
        ),
        mitigation=(
            "Ask the idle workloads' owners whether they still need the GPUs: a finished Job "
            "whose pods linger, a notebook left open, a job waiting on data. Deleting or "
            "suspending the Job (`kubectl patch job <name> -n <namespace> -p "
            '\'{"spec":{"suspend":true}}\'`) releases its quota to the queue at once. For '
            "recurring cases set `activeDeadlineSeconds` on the Jobs, Kueue's "
            "`waitForPodsReady`, or a lower priority for interactive work so that the queue's "
            "preemption (`withinClusterQueue: LowerPriority`) can reclaim it."
        ),
    )


KUBE_GPU_QUEUE_QUOTA_EXHAUSTED_WHILE_IDLE = AlertSpec(
    name="KubeGpuQueueQuotaExhaustedWhileIdle",
    summary="A Kueue ClusterQueue's GPU quota is used up while GPUs its pods hold are idle.",
    settings=QuotaExhaustedWhileIdleAlert,
    rule=_rule,
    cases=_case,
    runbook=_runbook,
)

SPECS = (KUBE_GPU_QUEUE_QUOTA_EXHAUSTED_WHILE_IDLE,)
