"""Cluster observatory: is the fleet used, what does waste cost, who waits for GPUs, what is
breaking. The platform team's first screen."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.grafana import queries as qq
from kube_gpu_exporter.grafana.dashboards.queue_row import queues_row
from kube_gpu_exporter.grafana.model import Dashboard, Row, Target
from kube_gpu_exporter.grafana.panels import (
    GREEN,
    LINK_TAG,
    ORANGE,
    RED,
    bargauge,
    cluster_variable,
    currency_unit,
    dashboard_tags,
    datasource_variable,
    line_at,
    ratio_series,
    renamed,
    scoped,
    simulated_marker,
    stat,
    table,
    timeseries,
)
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import fmt_number, fmt_percent

UID = "kube-gpu-cluster"


def build(cfg: Config) -> Dashboard:
    q = scoped(cfg)
    node = q.node_label
    target = cfg.dashboards.efficiency_target
    idle = fmt_number(cfg.alerts.GPUAllocatedIdle.threshold)
    idle_pct = fmt_percent(cfg.alerts.GPUAllocatedIdle.threshold)
    window = cfg.alerts.GPUAllocatedIdle.window
    money = currency_unit(cfg)
    fleet = Row(
        "Fleet",
        (
            simulated_marker(q),
            stat("GPUs", "none", Target(qq.gpus(q)), width=2),
            stat(
                "Lost GPUs",
                "none",
                Target(qq.lost_gpus(q)),
                steps=((None, GREEN), (1, RED)),
                width=2,
                description="Whole GPUs whose nvidia_gpu_up is 0 (fallen off the bus).",
            ),
            stat(
                "Utilization",
                "percentunit",
                Target(qq.utilization(q)),
                steps=((None, ORANGE), (target, GREEN)),
                width=2,
                description=f"Average over whole GPUs; green from the {fmt_percent(target)} "
                "efficiency target.",
            ),
            stat("Framebuffer in use", "percentunit", Target(qq.memory_ratio(q))),
            stat("Allocated GPUs", "none", Target(qq.cluster_sum(q, "cluster_allocated"))),
            stat(
                "Idle allocated GPUs",
                "none",
                Target(qq.cluster_sum(q, "cluster_idle")),
                steps=((None, GREEN), (1, ORANGE)),
                description=f"GPUs held by pods that used under {idle_pct} on average over "
                f"{window}; a shared GPU counts 1/k, a MIG slice its share of the GPU.",
            ),
            stat(
                "Idle cost, last hour",
                money,
                Target(qq.cluster_sum(q, "cluster_idle_cost")),
                description=f"Idle GPU-hours of the last hour at "
                f"{fmt_number(cfg.cost.gpu_hour)} {cfg.cost.currency} per GPU-hour.",
            ),
            stat("Free whole GPUs", "none", Target(qq.total_free_gpus(q))),
        ),
    )
    utilization = Row(
        "Utilization",
        (
            ratio_series(
                "GPU utilization against the efficiency target",
                Target(qq.utilization(q), "fleet"),
                description=f"The dashed line is the {fmt_percent(target)} efficiency target "
                "(dashboards.efficiency_target).",
                **line_at(target, GREEN),
            ),
            ratio_series(
                "Utilization per node",
                Target(qq.utilization(q, (node,)), f"{{{{{node}}}}}"),
            ),
            ratio_series(
                "Framebuffer in use per node",
                Target(qq.memory_ratio(q, (node,)), f"{{{{{node}}}}}"),
                **line_at(cfg.alerts.GPUMemoryNearFull.threshold),
            ),
            timeseries("Power per node", "watt", Target(qq.power(q, (node,)), f"{{{{{node}}}}}")),
        ),
    )
    waste = Row(
        "Allocation and waste",
        (
            timeseries(
                "Allocated and idle GPUs",
                "none",
                Target(qq.cluster_sum(q, "cluster_allocated"), "allocated"),
                Target(qq.cluster_sum(q, "cluster_idle"), f"idle (under {idle_pct})"),
                min=0,
            ),
            bargauge(
                "Idle GPU cost per namespace, last hour",
                money,
                Target(
                    f"sort_desc({qq.namespace_sum(q, 'namespace_idle_cost')})",
                    "{{namespace}}",
                    instant=True,
                ),
            ),
            bargauge(
                "Idle GPUs per workload",
                "none",
                Target(
                    f"sort_desc({qq.workload_sum(q, 'allocation_idle')})",
                    "{{namespace}}/{{workload}}",
                    instant=True,
                ),
                description="What GPUAllocatedIdle pages for: a workload (a Job, a "
                "Deployment, else the pod) counted once with all its idle GPUs.",
            ),
            table(
                f"Idle allocations (activity under {idle_pct} over {window})",
                "percentunit",
                Target(qq.idle_allocations(q, idle), table=True),
                width=24,
                hidden_columns=("Time", "__name__"),
            ),
        ),
    )
    capacity = Row(
        "Namespaces, quota and pending pods",
        (
            table(
                "GPUs held per namespace against its quota",
                "none",
                Target(qq.namespace_sum(q, "namespace_allocated"), table=True),
                Target(qq.quota(q), table=True),
                Target(qq.quota_used(q), table=True),
                Target(qq.namespace_sum(q, "namespace_idle"), table=True),
                description="GPUs held counts a shared GPU 1/k and a MIG slice its share; "
                "the quota columns are the namespace's ResourceQuotas on "
                "requests.nvidia.com/gpu as the cluster view reads them.",
                **renamed(
                    {
                        "Value #A": "GPUs held",
                        "Value #B": "GPU quota",
                        "Value #C": "quota used",
                        "Value #D": "idle GPUs",
                    }
                ),
            ),
            table(
                "Pending GPU pods",
                "none",
                Target(qq.pending_gpu_pods(q), table=True),
                description="Pods in phase Pending that request GPUs (kube-state-metrics).",
                **renamed({"Value": "GPUs requested"}),
            ),
            bargauge(
                "Free whole GPUs per node",
                "none",
                Target(qq.free_gpus(q), f"{{{{{node}}}}}", instant=True),
                width=24,
                description="Whole GPUs with nothing allocated on them: where a pod asking "
                "for a full GPU can still land.",
            ),
        ),
    )
    scheduling = Row(
        "Scheduling: why GPU pods wait",
        (
            timeseries(
                "Pending GPU pods by reason",
                "none",
                Target(qq.pending_by_reason(q), "{{reason}}"),
                min=0,
                stack=True,
                description="Each pending GPU pod under the first reason that holds for it "
                "(`kube-gpu-exporter explain -n NS POD` shows one pod's evidence); a pod only "
                "Kueue's gates hold, under its Workload's reason: Kueue's own word, such as "
                "`Pending`, while it queues for quota.",
            ),
            bargauge(
                "Largest request that could schedule now",
                "none",
                Target(qq.largest_schedulable(q), "{{gpu_product}} {{resource}}", instant=True),
                description="Per GPU type, the most devices one pod could get on a Ready, "
                "schedulable node whose taints the standard GPU tolerations allow.",
            ),
            timeseries(
                "Fragmentation of free GPUs",
                "percentunit",
                Target(qq.fragmentation(q), "{{gpu_product}} {{resource}}"),
                min=0,
                max=1,
                description="1 − largest free block / total free: 0 when the free devices "
                "sit on one node, near 1 when they are scattered one per node.",
            ),
            timeseries(
                "Scheduling wait, last hour",
                "s",
                Target(qq.scheduling_wait(q, 0.5), "p50"),
                Target(qq.scheduling_wait(q, 0.95), "p95"),
                min=0,
                description="From a GPU pod's creation to its PodScheduled condition.",
            ),
            timeseries(
                "GPU pods disrupted per hour",
                "none",
                Target(qq.disruptions_per_hour(q), "{{reason}}"),
                min=0,
                description="Preempted, evicted, deleted by the taint manager, lost with "
                "their node, or stopped by the kubelet.",
            ),
        ),
    )
    health = Row(
        "Health",
        (
            timeseries(
                "GPUs slowed, by clock-event reason",
                "none",
                Target(qq.slowdowns_by_reason(q), "{{reason}}"),
                min=0,
            ),
            timeseries(
                "Xid errors",
                "none",
                Target(qq.xid_events(q, (node, "xid")), f"{{{{{node}}}}} Xid {{{{xid}}}}"),
                bars=True,
            ),
            timeseries(
                "Hottest GPU per node",
                "celsius",
                Target(qq.hottest(q, (node,)), f"{{{{{node}}}}}"),
                **line_at(cfg.alerts.GPUTemperatureHigh.threshold),
            ),
            timeseries(
                "Uncorrectable ECC errors",
                "none",
                Target(qq.ecc_errors(q, c.ECC_UNCORRECTED, (node,)), f"{{{{{node}}}}}"),
                bars=True,
            ),
            table(
                "Driver versions",
                "none",
                Target(qq.driver_versions(q), table=True),
                width=24,
                height=6,
                **renamed({"Value": "GPUs"}),
            ),
        ),
    )
    return Dashboard(
        uid=UID,
        title="GPU / Cluster observatory",
        description="Fleet utilization, idle allocated GPUs and their cost, quota, why GPU "
        "pods wait, Kueue's queues, throttling and Xid errors (kube-gpu-exporter).",
        tags=dashboard_tags(cfg),
        variables=(datasource_variable(), cluster_variable(cfg)),
        rows=(fleet, utilization, waste, capacity, scheduling, queues_row(cfg, q), health),
        refresh=cfg.dashboards.refresh,
        links_tag=LINK_TAG,
    )
