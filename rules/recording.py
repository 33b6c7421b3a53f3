"""Recording rules: utilization by namespace and cluster, allocated versus idle GPUs, and what
idle GPUs cost.

Names follow `level:metric:operations`. The allocation group defines "idle" once, with the
threshold and window of GPUAllocatedIdle, which alerts on these series; the dashboards and the
cost read them too instead of repeating the joins:

- a pod's hold on a device is worth `s / k` GPUs when `k` pods share the device (time-slicing
  or MPS) and `s` is the device's share of its physical GPU (`nvidia_gpu_share_ratio`: 1 for a
  whole GPU, 1/7 for an A100's 1g.10gb), so neither shared GPUs nor MIG slices are counted as
  whole GPUs. Each hold also carries `workload` (the pod's owner, or the pod itself) and
  `owner_kind`, so that idle GPUs add up per workload;
- a hold's activity is the pod's own utilization averaged over the idle window: the device's
  for a pod alone on a whole GPU, its processes' on a shared one, its instance's GPM activity
  on a Hopper MIG slice. Where a hold has no utilization series (an Ampere MIG slice, a
  shared GPU whose processes cannot be tied to pods) its activity is the share of the window
  in which the device had any compute process — but only on nodes where the exporter sees
  every process (hostPID): a slice with no process for the window is surely idle, one with a
  process counts as busy, and so does a minute the device was up without a process count
  (the exporter serves one only where NVML's process list accounts for the device's
  activity): unknown is never idle;
- the hold is idle when that activity is under the threshold and its device is not lost;
- idle GPU-hours over the last hour integrate the idle-GPU count with a 15-second subquery, so
  the result does not depend on the rule evaluation interval.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alerts.workloads import GPU_ALLOCATED_IDLE
from kube_gpu_exporter.rules.model import RecordingRule, RuleGroup
from kube_gpu_exporter.rules.promql import Query, agg, fmt_number, with_workload
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.settings.view import ConfigView

NS = "namespace"
# Pods are scheduled a few at a time, so a short rate window would leave most quantiles
# undefined; an hour is what the dashboards' "scheduling wait" panel means by "lately".
SCHEDULING_WINDOW = "1h"
WAIT_QUANTILES = (0.5, 0.95)


def utilization_group(q: Query) -> RuleGroup:
    n = names(q)
    whole = 'parent_uuid=""'  # a MIG-enabled GPU's memory already covers its instances
    rules = (
        RecordingRule(n["node_utilization"], agg("avg", q.node, q.sel(c.UTILIZATION))),
        RecordingRule(n["cluster_utilization"], agg("avg", q.cluster, q.sel(c.UTILIZATION))),
        RecordingRule(n["cluster_memory_used"], agg("sum", q.cluster, q.sel(c.MEMORY_USED, whole))),
        RecordingRule(
            n["cluster_memory_total"], agg("sum", q.cluster, q.sel(c.MEMORY_TOTAL, whole))
        ),
        RecordingRule(n["cluster_gpus"], agg("count", q.cluster, q.sel(c.GPU_INFO, whole))),
        RecordingRule(
            n["namespace_utilization"], agg("avg", (*q.cluster, NS), q.sel(c.POD_UTILIZATION))
        ),
        RecordingRule(
            n["namespace_memory_used"], agg("sum", (*q.cluster, NS), q.sel(c.POD_MEMORY_USED))
        ),
    )
    return RuleGroup("kube-gpu-exporter.utilization.rules", rules)


def holds(q: Query) -> str:
    """One series per pod's hold on a device, with its workload: `workload` is the owner's
    name where the exporter watches pods (a Deployment, not its ReplicaSet), else the pod's."""
    return with_workload(
        agg("max", (*q.allocation, "owner_kind", "owner_name"), q.sel(c.ALLOCATION_INFO))
    )


def activity(q: Query, window: str) -> str:
    """Each hold's activity over `window`: the pod's own utilization, else the share of the
    window its device ran any process or had no count of them (where the exporter sees every
    process)."""
    own = agg("sum", q.allocation, f"avg_over_time({q.sel(c.POD_UTILIZATION)}[{window}])")
    # Each minute 1 with a process, 0 without, 1 where the device is up but its count is
    # unknown: averaged over the minutes present alone, they called it idle on a few zeros.
    counted = agg("max", q.device, f"clamp_max({q.sel(c.COMPUTE_PROCESSES)}, 1)")
    unknown = agg("max", q.device, f"clamp_min({q.sel(c.GPU_UP)}, 1)")
    busy = f"avg_over_time(({counted}\n  or {unknown})[{window}:1m])"
    sees_all = (
        f"{q.on(q.node)} group_left () ({agg('max', q.node, q.sel(c.HOST_PID_NAMESPACE))} == 1)"
    )
    proxy = (
        f"{agg('max', q.allocation, q.sel(c.ALLOCATION_INFO))}\n"
        f"  * {q.on(q.device)} group_left ()\n({busy}\n  * {sees_all})"
    )
    return f"{own}\nor {q.on(q.device)}\n{proxy}"


def allocation_group(cfg: ConfigView, q: Query) -> RuleGroup:
    n = names(q)
    idle = GPU_ALLOCATED_IDLE.of(cfg)
    pods_per_device = agg(
        "count", q.device, agg("max", (*q.device, *("namespace", "pod")), q.sel(c.ALLOCATION_INFO))
    )
    # A device's share of its physical GPU (a MIG slice: its slices over the GPU's); 1 where
    # an exporter predating the share series serves none.
    share = agg("max", q.device, q.sel(c.SHARE))
    share_or_whole = f"({share}\n  or {q.on(q.device)} 0 * {pods_per_device} + 1)"
    lost = f"{agg('max', q.device, q.sel(c.GPU_UP))} == 0"
    price = fmt_number(cfg.cost.gpu_hour)
    rules = (
        RecordingRule(
            n["allocation_share"],
            f"{holds(q)}\n  / {q.on(q.device)} group_left ()\n{pods_per_device}"
            f"\n  * {q.on(q.device)} group_left ()\n{share_or_whole}",
        ),
        RecordingRule(n["allocation_activity"], activity(q, idle.window)),
        RecordingRule(
            n["allocation_idle"],
            f"{n['allocation_share']}\n"
            f"  and {q.on(q.allocation)}\n"
            f"{n['allocation_activity']} < {fmt_number(idle.threshold)}\n"
            f"  unless {q.on(q.device)}\n{lost}",
        ),
        RecordingRule(
            n["namespace_allocated"], agg("sum", (*q.cluster, NS), n["allocation_share"])
        ),
        # Zero rather than absent for a namespace that holds GPUs and wastes none, so that
        # the hourly integral and the dashboards see the zeros.
        RecordingRule(
            n["namespace_idle"],
            f"{agg('sum', (*q.cluster, NS), n['allocation_idle'])}\n"
            f"or 0 * {n['namespace_allocated']}",
        ),
        RecordingRule(n["cluster_allocated"], agg("sum", q.cluster, n["namespace_allocated"])),
        RecordingRule(n["cluster_idle"], agg("sum", q.cluster, n["namespace_idle"])),
        # Mean idle GPUs over the last hour (absent minutes count as 0) = idle GPU-hours.
        # Dividing by the subquery's own step count keeps it right whether the range is
        # closed (Prometheus 2) or left-open (Prometheus 3).
        RecordingRule(
            n["namespace_idle_hours"],
            f"sum_over_time({n['namespace_idle']}[1h:15s])\n"
            "  / scalar(count_over_time(vector(1)[1h:15s]))",
        ),
        RecordingRule(n["cluster_idle_hours"], agg("sum", q.cluster, n["namespace_idle_hours"])),
        RecordingRule(n["namespace_idle_cost"], f"{n['namespace_idle_hours']} * {price}"),
        RecordingRule(n["cluster_idle_cost"], f"{n['cluster_idle_hours']} * {price}"),
    )
    return RuleGroup("kube-gpu-exporter.allocation.rules", rules)


def wait_quantile(q: Query, quantile: float, by: tuple[str, ...]) -> str:
    """The `quantile` of GPU pods' scheduling waits over SCHEDULING_WINDOW, per `by`; a group
    with no pod scheduled in the window has none (not NaN: `>= 0` drops it)."""
    rate = f"rate({q.view(k.SCHEDULING_WAIT, suffix='_bucket')}[{SCHEDULING_WINDOW}])"
    buckets = agg("sum", (*by, "le"), rate)
    return f"histogram_quantile({quantile:g}, {buckets}) >= 0"


def scheduling_group(q: Query) -> RuleGroup:
    """Scheduling-wait percentiles per namespace and per cluster, from the cluster view."""
    n = names(q)
    rules = tuple(
        RecordingRule(n[role], wait_quantile(q, quantile, by), {"quantile": f"{quantile:g}"})
        for role, by in (
            ("namespace_wait_quantile", (*q.cluster, NS)),
            ("cluster_wait_quantile", q.cluster),
        )
        for quantile in WAIT_QUANTILES
    )
    return RuleGroup("kube-gpu-exporter.scheduling.rules", rules)


def recording_groups(cfg: ConfigView) -> tuple[RuleGroup, ...]:
    q = Query(cfg)
    return (utilization_group(q), allocation_group(cfg, q), scheduling_group(q))
