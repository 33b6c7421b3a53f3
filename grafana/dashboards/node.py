"""Node and GPU detail: every device and MIG instance of the selected nodes — utilization,
memory, GPM activity and traffic, temperature, power, clocks, clock events and throttled time,
errors — plus the exporter's own health and the pods holding the devices."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.grafana import queries as qq
from kube_gpu_exporter.grafana.model import Dashboard, Panel, Row, Target
from kube_gpu_exporter.grafana.panels import (
    GREEN,
    LINK_TAG,
    RED,
    cluster_variable,
    dashboard_tags,
    datasource_variable,
    label_variable,
    line_at,
    panel,
    ratio_series,
    scoped,
    simulated_marker,
    stat,
    table,
    timeseries,
)
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query, agg

UID = "kube-gpu-node"
GPU_LEGEND = "GPU {{gpu}} {{mig_profile}}"
UP_MAPPING = (("0", "down", RED), ("1", "up", GREEN))


def build(cfg: Config) -> Dashboard:
    base = scoped(cfg)
    node = base.node_label
    on_node = base.where(f'{node}=~"$node"')  # exporter-level series: no gpu label
    q = on_node.where('gpu=~"$gpu"')
    devices = Row(
        "Devices",
        (
            table(
                "GPUs and MIG instances",
                "none",
                Target(f"{q.sel(c.GPU_INFO)}", table=True),
                width=24,
                height=7,
                hidden_columns=("Time", "__name__", "job", "Value"),
            ),
            simulated_marker(on_node),
            stat(
                "Lost GPUs",
                "none",
                Target(qq.lost_gpus(q)),
                steps=((None, GREEN), (1, RED)),
                width=3,
            ),
            stat(
                "NVML",
                "none",
                Target(qq.exporter_value(on_node, c.NVML_UP)),
                mappings=UP_MAPPING,
                width=3,
            ),
            stat(
                "Pod resources",
                "none",
                Target(qq.exporter_value(on_node, c.POD_RESOURCES_UP)),
                mappings=UP_MAPPING,
                width=3,
            ),
            stat(
                "Data age",
                "s",
                Target(qq.data_age(on_node)),
                width=4,
                description="Time since the last successful collection.",
            ),
            stat(
                "Collection time",
                "s",
                Target(qq.exporter_value(on_node, c.COLLECTION_DURATION)),
                width=4,
            ),
            stat(
                "Compute processes",
                "none",
                Target(f"sum({q.sel(c.COMPUTE_PROCESSES)})"),
                width=4,
            ),
        ),
    )
    usage = Row(
        "Utilization and memory",
        (
            ratio_series(
                "Utilization",
                Target(q.sel(c.UTILIZATION), "GPU {{gpu}}"),
                description="NVML gives no utilization for MIG-enabled GPUs and MIG instances.",
            ),
            ratio_series(
                "Memory bandwidth utilization",
                Target(q.sel(c.MEMORY_BANDWIDTH_UTILIZATION), "GPU {{gpu}}"),
            ),
            timeseries(
                "Framebuffer used",
                "bytes",
                Target(qq.with_profile(q, q.sel(c.MEMORY_USED)), GPU_LEGEND),
                min=0,
            ),
            ratio_series(
                "Framebuffer used, share of the device",
                Target(qq.device_memory_ratio(q), GPU_LEGEND),
                **line_at(cfg.alerts.GPUMemoryNearFull.threshold),
            ),
        ),
    )
    gpm = "GPM profiling (Hopper and newer), per GPU and per MIG instance; absent before Hopper."
    profiling = Row(
        "Activity and traffic (GPM)",
        (
            ratio_series(
                "SM active",
                Target(qq.with_profile(q, q.sel(c.SM_ACTIVE)), GPU_LEGEND),
                description=f"Share of time the SMs had work: what waste is judged by. {gpm}",
            ),
            ratio_series(
                "Tensor active",
                Target(qq.with_profile(q, q.sel(c.TENSOR_ACTIVE)), GPU_LEGEND),
                description=f"Share of time any tensor pipe was busy. {gpm}",
            ),
            ratio_series(
                "DRAM bandwidth used",
                Target(qq.with_profile(q, q.sel(c.DRAM_ACTIVE)), GPU_LEGEND),
                description=gpm,
            ),
            timeseries(
                "PCIe traffic",
                "binBps",
                Target(q.sel(c.PCIE_TRANSMIT_RATE), "GPU {{gpu}} out"),
                Target(q.sel(c.PCIE_RECEIVE_RATE), "GPU {{gpu}} in"),
                min=0,
                description=gpm,
            ),
        ),
    )
    thermals = Row(
        "Temperature, power and clocks",
        (
            timeseries(
                "Temperature",
                "celsius",
                Target(q.sel(c.TEMPERATURE), "GPU {{gpu}}"),
                **line_at(cfg.alerts.GPUTemperatureHigh.threshold),
            ),
            timeseries(
                "Power",
                "watt",
                Target(q.sel(c.POWER), "GPU {{gpu}}"),
                Target(q.sel(c.POWER_LIMIT), "GPU {{gpu}} limit"),
                min=0,
            ),
            timeseries("SM clock", "hertz", Target(q.sel(c.SM_CLOCK), "GPU {{gpu}}")),
            panel_clock_events(q),
            ratio_series(
                "Time throttled",
                Target(qq.throttled_share(q, ("gpu",)), "GPU {{gpu}} {{reason}}"),
                description="Share of time the clocks were held down, from the driver's "
                "clock-event duration counters (a 0/1 sample cannot show half the time).",
            ),
        ),
    )
    errors = Row(
        "Errors",
        (
            timeseries(
                "Xid errors",
                "none",
                Target(qq.xid_events(q, ("gpu", "xid")), "GPU {{gpu}} Xid {{xid}}"),
                bars=True,
                width=8,
            ),
            timeseries(
                "ECC errors",
                "none",
                Target(qq.ecc_errors(q, c.ECC_CORRECTED, ("gpu",)), "GPU {{gpu}} corrected"),
                Target(qq.ecc_errors(q, c.ECC_UNCORRECTED, ("gpu",)), "GPU {{gpu}} uncorrected"),
                bars=True,
                width=8,
            ),
            timeseries(
                "Exporter collection errors",
                "none",
                Target(qq.collection_errors(on_node), "{{kind}}"),
                bars=True,
                width=8,
            ),
        ),
    )
    pods = Row(
        "Pods on these GPUs",
        (
            table(
                "Allocations",
                "none",
                Target(qq.allocations(q), table=True),
                hidden_columns=("Time", "Value"),
            ),
            ratio_series(
                "Utilization per pod",
                Target(qq.pod_metric(q, c.POD_UTILIZATION), "{{namespace}}/{{pod}} GPU {{gpu}}"),
            ),
        ),
    )
    return Dashboard(
        uid=UID,
        title="GPU / Node and GPU detail",
        description="Every GPU and MIG instance of the selected nodes (kube-gpu-exporter).",
        tags=dashboard_tags(cfg),
        variables=(
            datasource_variable(),
            cluster_variable(cfg),
            label_variable(base, "node", node, c.GPU_INFO, "Node"),
            label_variable(on_node, "gpu", "gpu", c.GPU_INFO, "GPU"),
        ),
        rows=(devices, usage, profiling, thermals, errors, pods),
        refresh=cfg.dashboards.refresh,
        links_tag=LINK_TAG,
    )


def panel_clock_events(q: Query) -> Panel:
    """Which slowdown reasons hold, per GPU, as a state timeline (0 blank, 1 coloured)."""
    active = q.sel(c.CLOCK_EVENT_ACTIVE, f'reason=~"{qq.SLOWDOWNS}"')
    return panel(
        "state-timeline",
        "Clock events (slowdown reasons)",
        "none",
        Target(agg("max", ("gpu", "reason"), active), "GPU {{gpu}} {{reason}}"),
        mappings=(("0", "off", "transparent"), ("1", "active", RED)),
        description="sw_power_cap: at the power limit; *_thermal_slowdown: too hot; "
        "hw_slowdown: the board cuts clocks; hw_power_brake_slowdown: external power brake.",
    )
