"""Namespace and workload: what the selected namespaces hold, use and waste, and per pod its
utilization, memory and OOM headroom. The view a team lead or the pod's owner opens."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.grafana import queries as qq
from kube_gpu_exporter.grafana.model import Dashboard, Row, Target
from kube_gpu_exporter.grafana.panels import (
    GREEN,
    LINK_TAG,
    ORANGE,
    cluster_variable,
    currency_unit,
    dashboard_tags,
    datasource_variable,
    label_variable,
    line_at,
    ratio_series,
    scoped,
    simulated_marker,
    stat,
    table,
    timeseries,
)
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import fmt_number, fmt_percent

UID = "kube-gpu-workload"
POD_LEGEND = "{{namespace}}/{{pod}} GPU {{gpu}}"


def build(cfg: Config) -> Dashboard:
    device = scoped(cfg)
    in_ns = 'namespace=~"$namespace"'
    pods = device.where(in_ns, 'pod=~"$pod"')
    idle_threshold = cfg.alerts.GPUAllocatedIdle.threshold
    memory_threshold = cfg.alerts.GPUMemoryNearFull.threshold
    namespace = Row(
        "Namespaces",
        (
            simulated_marker(device),
            stat("GPUs held", "none", Target(qq.cluster_sum(device, "namespace_allocated", in_ns))),
            stat(
                "Idle GPUs",
                "none",
                Target(qq.cluster_sum(device, "namespace_idle", in_ns)),
                steps=((None, GREEN), (1, ORANGE)),
                description=f"Held by pods using under {fmt_percent(idle_threshold)}.",
            ),
            stat(
                "Average utilization",
                "percentunit",
                Target(f"avg({qq.recorded(device, 'namespace_utilization', in_ns)})"),
            ),
            stat(
                "Idle cost, last hour",
                currency_unit(cfg),
                Target(qq.cluster_sum(device, "namespace_idle_cost", in_ns)),
                description=f"At {fmt_number(cfg.cost.gpu_hour)} {cfg.cost.currency} per GPU-hour.",
            ),
            stat(
                "GPU quota",
                "none",
                Target(f"sum({qq.quota(device, in_ns)})"),
                description="The namespace's ResourceQuota limits on requests.nvidia.com/gpu "
                "(the cluster view, kube-gpu-exporter cluster).",
            ),
            stat(
                "GPUs requested by pending pods",
                "none",
                Target(f"sum({qq.pending_gpu_pods(device, in_ns)}) or vector(0)"),
                description="kube-state-metrics.",
            ),
            stat(
                "Framebuffer used",
                "bytes",
                Target(f"sum({qq.recorded(device, 'namespace_memory_used', in_ns)})"),
            ),
        ),
    )
    per_pod = Row(
        "Pods",
        (
            ratio_series(
                "Utilization per pod",
                Target(qq.pod_metric(pods, c.POD_UTILIZATION), POD_LEGEND),
                description=f"The dashed line is the {fmt_percent(idle_threshold)} idle "
                "threshold. On a shared GPU, the pod's own processes.",
                **line_at(idle_threshold, "orange"),
            ),
            timeseries(
                "Framebuffer used per pod",
                "bytes",
                Target(qq.pod_metric(pods, c.POD_MEMORY_USED), POD_LEGEND),
                min=0,
            ),
            ratio_series(
                "OOM headroom (free framebuffer on the pod's device)",
                Target(qq.headroom_ratio(device, pods), POD_LEGEND),
                description=f"GPUMemoryNearFull fires under {fmt_percent(1 - memory_threshold)}"
                " free. On a shared GPU every pod on it shares this headroom.",
                steps=((None, "red"), (round(1 - memory_threshold, 6), GREEN)),
                threshold_line=True,
            ),
            timeseries(
                "OOM headroom in bytes",
                "bytes",
                Target(qq.headroom_bytes(device, pods), POD_LEGEND),
                min=0,
            ),
            timeseries(
                "Xid errors on the pods' GPUs",
                "none",
                Target(qq.pod_xid_events(device, pods), POD_LEGEND),
                bars=True,
                width=24,
                description="Hardware or application Xid errors on the devices the pods hold; "
                "see the node dashboard for the codes.",
            ),
            table(
                "Allocations",
                "none",
                Target(qq.allocations(pods), table=True),
                width=24,
                hidden_columns=("Time", "Value"),
            ),
        ),
    )
    return Dashboard(
        uid=UID,
        title="GPU / Namespace and workload",
        description="GPUs held, used and wasted per namespace, and per pod utilization, "
        "memory and OOM headroom (kube-gpu-exporter).",
        tags=dashboard_tags(cfg),
        variables=(
            datasource_variable(),
            cluster_variable(cfg),
            label_variable(device, "namespace", "namespace", c.ALLOCATION_INFO, "Namespace"),
            label_variable(device.where(in_ns), "pod", "pod", c.ALLOCATION_INFO, "Pod"),
        ),
        rows=(namespace, per_pod),
        refresh=cfg.dashboards.refresh,
        links_tag=LINK_TAG,
    )
