"""The dashboards' PromQL, apart from their layout (as the mixins keep it).

Each function takes a `Query` already scoped to the dashboard's variables. Expensive joins
(allocation shares, idle GPUs, cost) are read from the recording rules rather than repeated.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.promql import (
    KSM_CONTAINER_RESOURCE_REQUESTS,
    KSM_POD_STATUS_PHASE,
    Query,
    agg,
)
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.xid_query import xid_events as xid_events_within

RATE = "$__rate_interval"
RATE_SECONDS = "$__rate_interval_ms / 1000"  # the same window as a number, beside time()
WHOLE = 'parent_uuid=""'  # whole GPUs: a MIG-enabled GPU's memory covers its instances
SLOWDOWNS = (
    "sw_power_cap|sw_thermal_slowdown|hw_thermal_slowdown|hw_slowdown|hw_power_brake_slowdown"
)
QUOTA = 'resource="nvidia.com/gpu"'  # a quota's `requests.nvidia.com/gpu`, as the view names it
PRODUCT = ("gpu_product", "resource")
SIMULATED = 'simulated="true"'  # build_info of an exporter serving a scenario, not NVML
GPU_REQUESTS = 'resource=~"nvidia_com_gpu.*|nvidia_com_mig_.*"'


def recorded(q: Query, role: str, *matchers: str) -> str:
    return q.recorded(names(q)[role], *matchers)


def gpus(q: Query) -> str:
    return f"count({q.sel(c.GPU_INFO, WHOLE)})"


def lost_gpus(q: Query) -> str:
    return f"count({q.sel(c.GPU_UP, WHOLE)} == 0) or vector(0)"


def utilization(q: Query, by: tuple[str, ...] = ()) -> str:
    return agg("avg", by, q.sel(c.UTILIZATION))


def memory_ratio(q: Query, by: tuple[str, ...] = ()) -> str:
    used = agg("sum", by, q.sel(c.MEMORY_USED, WHOLE))
    total = agg("sum", by, q.sel(c.MEMORY_TOTAL, WHOLE))
    return f"{used} / {total}"


def power(q: Query, by: tuple[str, ...]) -> str:
    return agg("sum", by, q.sel(c.POWER))


def slowdowns_by_reason(q: Query) -> str:
    return agg("sum", ("reason",), q.sel(c.CLOCK_EVENT_ACTIVE, f'reason=~"{SLOWDOWNS}"'))


def xid_events(q: Query, by: tuple[str, ...]) -> str:
    """Xid events per rate interval, first events included (rules/xid_query.py: a counter
    appears at its first event, at 1, which `increase()` alone does not count)."""
    return agg("sum", by, xid_events_within(q, RATE, RATE_SECONDS))


def ecc_errors(q: Query, metric: c.Metric, by: tuple[str, ...]) -> str:
    return agg("sum", by, f"increase({q.sel(metric)}[{RATE}])")


def throttled_share(q: Query, by: tuple[str, ...]) -> str:
    """The share of time the clocks were held down, per reason: a rate of seconds per second."""
    return agg("sum", (*by, "reason"), f"rate({q.sel(c.CLOCK_EVENT_DURATION)}[{RATE}])")


def hottest(q: Query, by: tuple[str, ...]) -> str:
    return agg("max", by, q.sel(c.TEMPERATURE))


def driver_versions(q: Query) -> str:
    return agg("count", ("driver_version", "model"), q.sel(c.GPU_INFO, WHOLE))


def free_gpus(q: Query) -> str:
    return f"sort_desc({q.sel(c.NODE_FREE_GPUS)})"


def total_free_gpus(q: Query) -> str:
    return f"sum({q.sel(c.NODE_FREE_GPUS)})"


def cluster_sum(q: Query, role: str, *matchers: str) -> str:
    return f"sum({recorded(q, role, *matchers)})"


def namespace_sum(q: Query, role: str, *matchers: str) -> str:
    return agg("sum", ("namespace",), recorded(q, role, *matchers))


def idle_allocations(q: Query, threshold: str, *matchers: str) -> str:
    return f"{recorded(q, 'allocation_activity', *matchers)} < {threshold}"


def quota(q: Query, *matchers: str) -> str:
    """Per namespace, its quotas' limits on whole GPUs (the cluster view's)."""
    return agg("sum", ("namespace",), q.view(k.QUOTA_HARD, QUOTA, *matchers))


def pending_gpu_pods(q: Query, *matchers: str) -> str:
    """GPUs requested by each Pending pod (kube-state-metrics)."""
    keys = (*q.cluster, "namespace", "pod")
    requests = agg("sum", keys, q.ksm(KSM_CONTAINER_RESOURCE_REQUESTS, GPU_REQUESTS, *matchers))
    pending = agg("max", keys, q.ksm(KSM_POD_STATUS_PHASE, 'phase="Pending"', *matchers))
    return f"{requests}\n  * {q.on(keys)} group_left ()\n({pending} == 1)"


def exporter_value(q: Query, metric: c.Metric) -> str:
    return f"max({q.sel(metric)})"


def simulated_nodes(q: Query) -> str:
    """Nodes whose exporter said `simulated="true"` (`serve --simulate`) at any time in the
    dashboard's range; 0 when none did (real nodes say "false", or nothing before the label)."""
    said = f"max_over_time({q.sel(c.BUILD_INFO, SIMULATED)}[$__range])"
    return f"count({agg('group', q.node, said)}) or vector(0)"


def data_age(q: Query) -> str:
    return f"max(time() - {q.sel(c.LAST_SUCCESS)})"


def collection_errors(q: Query) -> str:
    return agg("sum", ("kind",), f"increase({q.sel(c.COLLECTION_ERRORS)}[{RATE}])")


def with_profile(q: Query, expr: str) -> str:
    """`expr` per device with the MIG profile of the device joined on, for legends."""
    info = agg("max", (*q.device, "mig_profile"), q.sel(c.GPU_INFO))
    return f"{expr}\n  * {q.on(q.device)} group_left (mig_profile)\n{info}"


def device_memory_ratio(q: Query) -> str:
    return with_profile(q, f"({q.sel(c.MEMORY_USED)} / {q.sel(c.MEMORY_TOTAL)})")


def allocations(q: Query) -> str:
    labels = (*q.allocation, "container", "resource", "sharing")
    return agg("max", labels, q.sel(c.ALLOCATION_INFO))


def pod_on_device(device: Query, pods: Query, device_expr: str) -> str:
    """A device value once per pod allocated to the device, labelled with the pod."""
    held = agg("max", device.allocation, pods.sel(c.ALLOCATION_INFO))
    return f"({device_expr})\n  * {device.on(device.device)} group_right ()\n{held}"


def headroom_ratio(device: Query, pods: Query) -> str:
    used, total = device.sel(c.MEMORY_USED), device.sel(c.MEMORY_TOTAL)
    return pod_on_device(device, pods, f"1 - {used} / {total}")


def headroom_bytes(device: Query, pods: Query) -> str:
    used, total = device.sel(c.MEMORY_USED), device.sel(c.MEMORY_TOTAL)
    return pod_on_device(device, pods, f"{total} - {used}")


def pod_metric(q: Query, metric: c.Metric) -> str:
    return agg("sum", (*q.node, "namespace", "pod", "gpu"), q.sel(metric))


def pod_xid_events(device: Query, pods: Query) -> str:
    """Xid events on the devices each pod holds (summed over Xid codes, so one per device)."""
    events = agg("sum", device.device_display, xid_events_within(device, RATE, RATE_SECONDS))
    return pod_on_device(device, pods, events)


def workload_sum(q: Query, role: str, *matchers: str) -> str:
    """A per-hold recorded series summed per workload (the owner, else the pod): an 8-GPU job
    is one row, as GPUAllocatedIdle pages for it once."""
    return agg("sum", ("namespace", "workload"), recorded(q, role, *matchers))


# --- the cluster view (`kube-gpu-exporter cluster`): why GPU pods wait -------------------------


def pending_by_reason(q: Query) -> str:
    """Pending GPU pods by the first reason that holds for each."""
    return agg("sum", ("reason",), q.view(k.PENDING_PODS))


def largest_schedulable(q: Query) -> str:
    """Per GPU type, the most devices one standard pod could get now."""
    return agg("max", PRODUCT, q.view(k.LARGEST_REQUEST))


def fragmentation(q: Query) -> str:
    """Per GPU type, 1 − largest free block / total free on the eligible nodes."""
    return agg("max", PRODUCT, q.view(k.FRAGMENTATION))


def scheduling_wait(q: Query, quantile: float) -> str:
    """The cluster's scheduling-wait quantile of the last hour (recorded)."""
    return agg("max", (), recorded(q, "cluster_wait_quantile", f'quantile="{quantile:g}"'))


def disruptions_per_hour(q: Query) -> str:
    """GPU pods disrupted, as a rate per hour, by reason (evicted, preempted, …)."""
    return agg("sum", ("reason",), f"rate({q.view(k.DISRUPTIONS)}[{RATE}]) * 3600")


def quota_used(q: Query) -> str:
    """Per namespace, what its pods request of the quotas on whole GPUs."""
    return agg("sum", ("namespace",), q.view(k.QUOTA_USED, QUOTA))
