"""Workload alerts, first part of group kube-gpu-exporter.workloads: GPUs a workload holds and
leaves idle.

Idle is judged per hold on the recorded activity (rules/recording.py: the pod's own
utilization, a MIG slice's GPM activity, or where neither exists the share of time its device
ran a process) averaged over a window long enough that a bursty notebook's mean shows, and one
alert is raised per workload — a Deployment's replicas or an 8-GPU job page once, listing the
GPUs — with `keep_firing_for` so a short burst of work does not resolve it and page again.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, label, query_list, row
from kube_gpu_exporter.rules.promql import Query, agg, fmt_number, fmt_percent
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
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, PositiveDuration, Ratio
from kube_gpu_exporter.rules.spec import AlertSpec

WORKLOAD = ("namespace", "owner_kind", "workload")


class IdleAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")
    # Firing on after the mean rises over the threshold: a workload that flickers around it
    # resolves once, not once per burst.
    keep_firing_for: Duration = "15m"
    threshold: Ratio = 0.1  # mean activity over `window` under which a hold is idle
    window: PositiveDuration = "1h"  # long enough for a bursty workload's mean to show

    def keep_firing(self) -> str:
        return self.keep_firing_for


def _idle_rule(a: IdleAlert, q: Query) -> AlertText:
    idle = names(q)["allocation_idle"]
    keys = (*q.cluster, *WORKLOAD)
    gpus = query_list(
        q.recorded(idle, *(f"{k}=%q" for k in keys)),
        keys,
        "uuid",
        f" [GPU {row('gpu')} {row('uuid')} on {row(q.node_label)}]",
        ":{}.",
    )
    return AlertText(
        # The recorded series exist only for idle holds: their sum is the alert, no comparison.
        agg("sum", keys, q.recorded(idle)),
        f"{label('namespace')}/{label('workload')}"
        "{{ with $labels.owner_kind }} ({{ . }}){{ end }}"
        f'{in_cluster(q)} has left {{{{ $value | printf "%.3g" }}}} of its GPUs idle, using '
        f"under {fmt_percent(a.threshold)} of them on average over the last {a.window}{gpus} "
        "They stay allocated and cannot be scheduled to anyone else.",
    )


def _hold(w: World, gpu: int, namespace: str, pod: str, **extra: str) -> dict[str, str]:
    return w.pod("a", gpu, namespace, pod) | extra


def _idle_case(a: IdleAlert, w: World) -> Case:
    t = a.threshold
    idle, busy, past = t / 2, (1 + t) / 2, t - t / 100
    n = minutes(a.window) + minutes(a.for_) + 10
    # A notebook busy `burst` minutes at the end of every window: its 5-minute averages cross
    # the threshold, its mean over the window does not.
    period = max(10, minutes(a.window))
    burst = max(1, int(t * period * 0.6))
    bursty = " ".join(f"0+0x{period - burst - 1} 1+0x{burst - 1}" for _ in range(n // period + 1))
    deploy = {"owner_kind": "Deployment", "owner_name": "train"}
    mig7 = {"uuid": "MIG-a-7-1", "parent_uuid": "GPU-a-0007"}
    mig8 = {"uuid": "MIG-a-8-1", "parent_uuid": "GPU-a-0008"}
    mig8b = {"uuid": "MIG-a-8-2", "parent_uuid": "GPU-a-0008"}
    # (hold labels, utilization series or None for a MIG slice without one)
    holds: list[tuple[dict[str, str], str | None]] = [
        (_hold(w, 0, "team-a", "notebook-0"), bursty),
        (_hold(w, 1, "team-a", "busy-0"), steady(busy, n)),
        (_hold(w, 2, "team-b", "shared-idle"), steady(idle, n)),  # a time-sliced GPU
        (_hold(w, 2, "team-b", "shared-busy"), steady(busy, n)),
        (_hold(w, 3, "team-c", "train-x", **deploy), steady(0, n)),  # one workload, 2 GPUs
        (_hold(w, 4, "team-c", "train-y", **deploy), steady(0, n)),
        (_hold(w, 5, "team-d", "at-threshold"), steady(t, n)),  # exactly at: not idle
        (_hold(w, 6, "team-d", "past-threshold"), steady(past, n)),
        (_hold(w, 7, "team-e", "hopper-mig") | mig7, steady(0, n)),  # GPM activity
        (_hold(w, 8, "team-f", "ampere-idle") | mig8, None),  # no process on its slice
        (_hold(w, 8, "team-f", "ampere-busy") | mig8b, None),  # a process on its slice
        (_hold(w, 9, "team-g", "lost-0"), steady(0, n)),  # its GPU is lost: GPULost's
    ]
    series: list[Series] = [
        s(c.HOST_PID_NAMESPACE, w.node("a"), steady(1, n)),
        s(c.COMPUTE_PROCESSES, w.dev("a", 8) | mig8, steady(0, n)),
        s(c.COMPUTE_PROCESSES, w.dev("a", 8) | mig8b, steady(1, n)),
        s(c.GPU_UP, w.dev("a", 9), steady(0, n)),
        # Node b runs without hostPID: no process listed proves nothing there.
        s(c.HOST_PID_NAMESPACE, w.node("b"), steady(0, n)),
        s(c.COMPUTE_PROCESSES, w.dev("b", 0) | {"uuid": "MIG-b-0-1"}, steady(0, n)),
        Series(
            c.ALLOCATION_INFO.name,
            w.pod("b", 0, "team-h", "blind") | {"uuid": "MIG-b-0-1"},
            steady(1, n),
        ),
    ]
    for labels, utilization in holds:
        series.append(Series(c.ALLOCATION_INFO.name, labels, steady(1, n)))
        if utilization is not None:
            series.append(s(c.POD_UTILIZATION, labels, utilization))
    node = w.q.node_label

    def fired(namespace: str, workload: str, value: float, *pods: str, **owner: str) -> Firing:
        rows = tuple(
            {k: labels[k] for k in ("gpu", "uuid", node)}
            for labels, _ in holds
            if labels["pod"] in pods
        )
        out = {**w.scope, "namespace": namespace, "workload": workload, **owner}
        return Firing(out, value, rows)

    firing = (
        fired("team-a", "notebook-0", 1, "notebook-0"),
        fired("team-b", "shared-idle", 0.5, "shared-idle"),
        fired("team-c", "train", 2, "train-x", "train-y", owner_kind="Deployment"),
        fired("team-d", "past-threshold", 1, "past-threshold"),
        fired("team-e", "hopper-mig", 1, "hopper-mig"),
        fired("team-f", "ampere-idle", 1, "ampere-idle"),
    )
    return Case(tuple(series), edges(a.for_, firing))


def _idle_runbook(a: IdleAlert, q: Query) -> Runbook:
    n = names(q)
    cost = q.config.cost
    return Runbook(
        meaning=(
            "A workload (a Deployment, Job, StatefulSet… where the exporter watches pods; "
            "else a pod) has held GPUs for which its mean activity over the last "
            f"{a.window} stayed under {fmt_percent(a.threshold)}, for at least {a.for_}. One "
            "alert per workload: its value is the idle GPUs it holds (a time-sliced share "
            "counts 1/k, a MIG slice its share of the GPU) and its description lists them. "
            "Activity is the pod's own: on a shared GPU its processes, not the device, so one "
            "busy neighbour does not hide an idle pod; on a Hopper MIG slice the slice's GPM "
            "engine activity; on an Ampere MIG slice (no activity counter without DCGM) the "
            "share of the window in which any process ran on the slice, or its process "
            "count was unknown — which needs the exporter in the host PID namespace. "
            "Averaging over the window catches a notebook busy a few minutes an hour, and "
            "`keep_firing_for` "
            f"({a.keep_firing_for}) keeps one burst of work from resolving and re-paging."
        ),
        impact=(
            "The GPUs are reserved and unschedulable for everyone else. At "
            f"{fmt_number(cost.gpu_hour)} {cost.currency} per GPU-hour, idle "
            f"allocated GPUs cost what `{n['cluster_idle_cost']}` shows per hour. Common "
            "causes: a notebook left open, a job waiting on data or a lock, a crashed worker "
            "whose pod stays Running, a pod that requests a GPU it does not use."
        ),
        diagnosis="\n\n".join(
            (
                "Each GPU of the workload, its activity over the window, and its pods:",
                promql(
                    q.recorded(
                        n["allocation_idle"], 'namespace="<namespace>"', 'workload="<workload>"'
                    ),
                    q.recorded(n["allocation_activity"], 'namespace="<namespace>"'),
                    q.sel(c.POD_UTILIZATION, 'namespace="<namespace>"', 'pod="<pod>"'),
                ),
                sh(
                    "kubectl -n <namespace> describe pod <pod>",
                    "kubectl -n <namespace> logs <pod> --tail=50",
                    "kubectl -n <namespace> exec <pod> -- nvidia-smi",
                ),
            )
        ),
        mitigation=(
            "Ask the owner whether the workload still needs the GPUs; delete or scale down "
            "idle notebooks and finished jobs. For recurring cases set an idle-culling policy "
            "(notebook culler, `activeDeadlineSeconds` on Jobs), or move light workloads to "
            "time-sliced or MIG resources. If the workload is legitimately bursty, raise "
            "`alerts.GPUAllocatedIdle.window` or lower the threshold in the thresholds file, "
            "or silence the alert for that namespace or workload."
        ),
    )


GPU_ALLOCATED_IDLE = AlertSpec(
    name="GPUAllocatedIdle",
    summary="A workload holds GPUs it does not use.",
    settings=IdleAlert,
    rule=_idle_rule,
    cases=_idle_case,
    runbook=_idle_runbook,
)

SPECS = (GPU_ALLOCATED_IDLE,)
