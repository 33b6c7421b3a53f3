"""The recorded series' names by role, following `level:metric:operations`.

One table for everyone who reads a recorded series: the recording rules that write them, the
idle alert's runbook, the promtool test of the recording rules, and the dashboards, which read
these series instead of repeating the joins. The node level takes the config's node label.
"""

from __future__ import annotations

from kube_gpu_exporter.rules.promql import Query


def names(q: Query) -> dict[str, str]:
    """Recorded series' names by role. The activity window is the idle alert's (`avg1h`)."""
    alloc = f"{q.node_label}_uuid_namespace_pod"
    window = q.config.alerts.GPUAllocatedIdle.window
    return {
        "node_utilization": f"{q.node_label}:nvidia_gpu_utilization_ratio:avg",
        "cluster_utilization": "cluster:nvidia_gpu_utilization_ratio:avg",
        "cluster_memory_used": "cluster:nvidia_gpu_memory_used_bytes:sum",
        "cluster_memory_total": "cluster:nvidia_gpu_memory_total_bytes:sum",
        "cluster_gpus": "cluster:nvidia_gpu_gpus:count",
        "namespace_utilization": "namespace:nvidia_gpu_pod_utilization_ratio:avg",
        "namespace_memory_used": "namespace:nvidia_gpu_pod_memory_used_bytes:sum",
        "allocation_share": f"{alloc}:nvidia_gpu_allocated_gpus:share",
        "allocation_activity": f"{alloc}:nvidia_gpu_pod_activity_ratio:avg{window}",
        "allocation_idle": f"{alloc}:nvidia_gpu_idle_gpus:share",
        "namespace_allocated": "namespace:nvidia_gpu_allocated_gpus:sum",
        "namespace_idle": "namespace:nvidia_gpu_idle_gpus:sum",
        "cluster_allocated": "cluster:nvidia_gpu_allocated_gpus:sum",
        "cluster_idle": "cluster:nvidia_gpu_idle_gpus:sum",
        "namespace_idle_hours": "namespace:nvidia_gpu_idle_gpu_hours:sum1h",
        "cluster_idle_hours": "cluster:nvidia_gpu_idle_gpu_hours:sum1h",
        "namespace_idle_cost": "namespace:nvidia_gpu_idle_cost:sum1h",
        "cluster_idle_cost": "cluster:nvidia_gpu_idle_cost:sum1h",
        # Scheduling waits of the last hour (SCHEDULING_WINDOW), one series per `quantile`.
        "namespace_wait_quantile": "namespace_quantile:kube_gpu_scheduling_wait_seconds:"
        "histogram_quantile",
        "cluster_wait_quantile": "cluster_quantile:kube_gpu_scheduling_wait_seconds:"
        "histogram_quantile",
    }
