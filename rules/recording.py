"""Recording rules: utilization by namespace and cluster, allocated versus idle GPUs, and what
idle GPUs cost.

Names follow `level:metric:operations`. The allocation group defines "idle" once, with the
same threshold as GPUAllocatedIdle, and the dashboards read these series instead of repeating
the joins:

- a pod's hold on a device is worth `s / k` GPUs when `k` pods share the device (time-slicing
  or MPS) and `s` is the device's share of its physical GPU (`nvidia_gpu_share_ratio`: 1 for a
  whole GPU, 1/7 for an A100's 1g.10gb), so neither shared GPUs nor MIG slices are counted as
  whole GPUs;
- the hold is idle when the pod's 5-minute average utilization of the device is under the
  threshold;
- idle GPU-hours over the last hour integrate the idle-GPU count with a 15-second subquery, so
  the result does not depend on the rule evaluation interval.

A pod on a MIG instance is judged by its instance's GPM activity (Hopper and newer); on Ampere
MIG it has no utilization series and is never counted idle here.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alerts.workloads import GPU_ALLOCATED_IDLE
from kube_gpu_exporter.rules.model import RecordingRule, RuleGroup
from kube_gpu_exporter.rules.promql import Query, agg, fmt_number
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.settings.view import ConfigView

NS = "namespace"


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


def allocation_group(cfg: ConfigView, q: Query) -> RuleGroup:
    n = names(q)
    holds = agg("max", q.allocation, q.sel(c.ALLOCATION_INFO))
    pods_per_device = agg(
        "count", q.device, agg("max", (*q.device, *("namespace", "pod")), q.sel(c.ALLOCATION_INFO))
    )
    # A device's share of its physical GPU (a MIG slice: its slices over the GPU's); 1 where
    # an exporter predating the share series serves none.
    share = agg("max", q.device, q.sel(c.SHARE))
    share_or_whole = f"({share}\n  or {q.on(q.device)} 0 * {pods_per_device} + 1)"
    threshold = fmt_number(GPU_ALLOCATED_IDLE.of(cfg).threshold)
    price = fmt_number(cfg.cost.gpu_hour)
    rules = (
        RecordingRule(
            n["allocation_share"],
            f"{holds}\n  / {q.on(q.device)} group_left ()\n{pods_per_device}"
            f"\n  * {q.on(q.device)} group_left ()\n{share_or_whole}",
        ),
        RecordingRule(
            n["allocation_utilization"],
            agg("sum", q.allocation, f"avg_over_time({q.sel(c.POD_UTILIZATION)}[5m])"),
        ),
        RecordingRule(
            n["allocation_idle"],
            f"{n['allocation_share']}\n"
            f"  and {q.on(q.allocation)}\n"
            f"{n['allocation_utilization']} < {threshold}",
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


def recording_groups(cfg: ConfigView) -> tuple[RuleGroup, ...]:
    q = Query(cfg)
    return (utilization_group(q), allocation_group(cfg, q))
