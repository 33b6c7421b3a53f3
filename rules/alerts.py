"""The alerting rules, one function per alert, grouped as they are deployed.

Each function turns the config into one `AlertRule`; the expression, the `for`, the severity
and the threshold repeated in the description all come from the same config entry, so the
rule, its promtool test and its runbook cannot disagree. Disabled alerts are left out.

Joins follow two conventions (see `Query`): device series are matched on (cluster, node,
uuid), and alerts about a device name the pods allocated to it where that matters
(`Query.pods_on`), one alert per pod, while a device no pod holds still alerts.
"""

from __future__ import annotations

from collections.abc import Callable

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.config import Config, duration_seconds
from kube_gpu_exporter.rules.model import AlertRule, RuleGroup
from kube_gpu_exporter.rules.promql import Query, agg, fmt_bytes, fmt_number, fmt_percent

AlertBuilder = Callable[[Config, Query], AlertRule]


def label(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def where(q: Query) -> str:
    """`on <node>` (and `in cluster <cluster>` when multi-cluster), as alert text."""
    text = f"on {label(q.node_label)}"
    return text + (f" in cluster {label(q.cluster[0])}" if q.cluster else "")


def device(q: Query) -> str:
    return f"GPU {label('gpu')} ({label('uuid')}) {where(q)}"


def _alert(cfg: Config, name: str, expr: str, summary: str, description: str) -> AlertRule:
    settings = cfg.alert(name)
    return AlertRule(name, expr, settings.for_, settings.severity, summary, description)


# --- workloads: what pods do with their GPUs ----------------------------------------------------


def gpu_allocated_idle(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUAllocatedIdle
    usage = agg("sum", q.allocation, f"avg_over_time({q.sel(c.POD_UTILIZATION)}[5m])")
    return _alert(
        cfg,
        "GPUAllocatedIdle",
        f"{usage} < {fmt_number(s.threshold)}",
        "A pod holds a GPU it does not use.",
        f"{label('namespace')}/{label('pod')} holds {device(q)} but used "
        f"{{{{ $value | humanizePercentage }}}} of it over the last 5 minutes, under the "
        f"{fmt_percent(s.threshold)} idle threshold, for at least {s.for_}. The GPU is "
        "allocated and cannot be scheduled to anyone else.",
    )


def _memory_ratio(q: Query) -> str:
    used, total = q.sel(c.MEMORY_USED), q.sel(c.MEMORY_TOTAL)
    return f"{used} / {total}"


def gpu_memory_near_full(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUMemoryNearFull
    near_full = (
        f"{_memory_ratio(q)} > {fmt_number(s.threshold)}\n"
        f"  unless {q.on(q.device)} {q.mig_parents()}"
    )
    return _alert(
        cfg,
        "GPUMemoryNearFull",
        q.pods_on(near_full),
        "A GPU's framebuffer is nearly full: CUDA out of memory is close.",
        f"{device(q)}{{{{ with $labels.pod }}}}, used by {label('namespace')}/{{{{ . }}}},"
        f"{{{{ end }}}} has {{{{ $value | humanizePercentage }}}} of its framebuffer in use, "
        f"over the {fmt_percent(s.threshold)} threshold, for {s.for_}. The next allocation "
        "on it may fail with CUDA out of memory.",
    )


def gpu_memory_leaked(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUMemoryLeaked
    used = agg("max", q.device_display, q.sel(c.MEMORY_USED))
    expr = (
        f"{used} > {s.threshold}\n"
        f"unless {q.on(q.device)} {q.sel(c.ALLOCATION_INFO)}\n"
        f"unless {q.on(q.device)} {q.mig_parents()}\n"
        f"and {q.on(q.device)} {q.sel(c.COMPUTE_PROCESSES)} == 0\n"
        f"and {q.on(q.node)} {q.sel(c.POD_RESOURCES_UP)} == 1"
    )
    return _alert(
        cfg,
        "GPUMemoryLeaked",
        expr,
        "Framebuffer is held on a GPU that no pod holds and no process uses.",
        f"{device(q)} has {{{{ $value | humanize1024 }}}}B of framebuffer in use, over the "
        f"{fmt_bytes(s.threshold)} threshold, for {s.for_}, although no pod is allocated "
        "to it and NVML lists no compute process on it. The memory is lost to every pod "
        "scheduled there until the GPU is reset.",
    )


def _xids(xids: tuple[int, ...]) -> str:
    return "|".join(str(x) for x in xids)


def _xid_events(q: Query, xids: tuple[int, ...], window: str) -> str:
    """Xid counters that rose within `window`, including a counter that first appeared in it.

    The exporter creates an Xid's counter at the first event, at 1: `increase()` over a
    series' first sample is 0, so a lone first event would never alert on its own. The
    `unless … offset` arm catches a series that did not exist `window` ago.
    """
    counter = q.sel(c.XID_ERRORS, f'xid=~"{_xids(xids)}"')
    events = (
        f"  increase({counter}[{window}]) > 0\nor\n  ({counter} unless {counter} offset {window})"
    )
    return agg("max", (*q.device_display, "xid"), f"\n{events}\n")


def gpu_xid_application_errors(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUXidApplicationErrors
    return _alert(
        cfg,
        "GPUXidApplicationErrors",
        _xid_events(q, s.xids, s.window),
        "A program on a GPU hit an Xid error of its own making.",
        f"{device(q)} reported Xid {label('xid')} in the last {s.window} (application "
        f"Xids: {', '.join(map(str, s.xids))}). These are usually a fault of the program "
        "on the GPU (illegal memory access, MMU fault, stopped context); see which pod holds it.",
    )


GROUP_WORKLOADS: tuple[AlertBuilder, ...] = (
    gpu_allocated_idle,
    gpu_memory_near_full,
    gpu_memory_leaked,
    gpu_xid_application_errors,
)


# --- devices: the health of the hardware --------------------------------------------------------


def gpu_temperature_high(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUTemperatureHigh
    return _alert(
        cfg,
        "GPUTemperatureHigh",
        f"{q.sel(c.TEMPERATURE)} > {fmt_number(s.threshold)}",
        "A GPU is running hot.",
        f"{device(q)} is at {{{{ $value | humanize }}}} °C, over the "
        f"{fmt_number(s.threshold)} °C threshold, for {s.for_}. Clocks will be slowed "
        "for heat next.",
    )


def _clock_event(q: Query, reasons: str) -> str:
    op = "=~" if "|" in reasons else "="
    active = q.sel(c.CLOCK_EVENT_ACTIVE, f'reason{op}"{reasons}"')
    return agg("max", q.device_display, active)


def gpu_thermal_throttling(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUThermalThrottling
    return _alert(
        cfg,
        "GPUThermalThrottling",
        f"{_clock_event(q, 'sw_thermal_slowdown|hw_thermal_slowdown')} == 1",
        "A GPU slows its clocks because it is too hot.",
        f"{device(q)} has had a thermal clock-event reason (sw_thermal_slowdown or "
        f"hw_thermal_slowdown) active for {s.for_}: it runs below its clocks to cool down.",
    )


def gpu_hardware_slowdown(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUHardwareSlowdown
    specific = _clock_event(q, "hw_thermal_slowdown|hw_power_brake_slowdown")
    return _alert(
        cfg,
        "GPUHardwareSlowdown",
        f"{_clock_event(q, 'hw_slowdown')} == 1\nunless {q.on(q.device)}\n{specific} == 1",
        "A GPU's hardware slows its clocks for a reason the driver does not name.",
        f"{device(q)} has had hw_slowdown active for {s.for_} without a more specific "
        "thermal or power-brake reason: a board sensor, the power supply or fast-trigger "
        "power protection is halving its clocks.",
    )


def gpu_power_brake(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUPowerBrake
    return _alert(
        cfg,
        "GPUPowerBrake",
        f"{_clock_event(q, 'hw_power_brake_slowdown')} == 1",
        "A GPU is slowed by an external power brake.",
        f"{device(q)} has had hw_power_brake_slowdown active for {s.for_}: the system "
        "(power supply or baseboard) asserted the power brake and clocks are cut hard.",
    )


def gpu_xid_errors(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUXidErrors
    return _alert(
        cfg,
        "GPUXidErrors",
        _xid_events(q, s.xids, s.window),
        "A GPU reported a hardware Xid error.",
        f"{device(q)} reported Xid {label('xid')} in the last {s.window} (hardware Xids: "
        f"{', '.join(map(str, s.xids))}). The GPU likely needs a reset, a node drain or an "
        "RMA.",
    )


def gpu_ecc_uncorrectable(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUEccUncorrectable
    errors = agg("max", q.device_display, f"increase({q.sel(c.ECC_UNCORRECTED)}[{s.window}])")
    return _alert(
        cfg,
        "GPUEccUncorrectable",
        f"{errors} > 0",
        "A GPU reported uncorrectable ECC memory errors.",
        f"{device(q)} counted uncorrectable (double-bit) ECC errors in the last {s.window}, "
        "over the threshold of 0. Data in its framebuffer was corrupted; the process that "
        "touched it was killed.",
    )


def gpu_lost(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPULost
    whole_gpus = q.sel(c.GPU_UP, 'parent_uuid=""')  # a lost GPU's MIG instances go with it
    return _alert(
        cfg,
        "GPULost",
        f"{whole_gpus} == 0",
        "A GPU stopped answering the driver.",
        f"{device(q)} has not answered NVML for {s.for_} (nvidia_gpu_up is 0): it has "
        "fallen off the bus or needs a reset. Pods on it are failing.",
    )


GROUP_DEVICES: tuple[AlertBuilder, ...] = (
    gpu_temperature_high,
    gpu_thermal_throttling,
    gpu_hardware_slowdown,
    gpu_power_brake,
    gpu_xid_errors,
    gpu_ecc_uncorrectable,
    gpu_lost,
)


# --- nodes: what the kubelet offers versus what the driver sees -----------------------------------


def _advertised_guard(q: Query) -> str:
    """Only while pod-resources answers: otherwise KubeGpuExporterPodResourcesDown says it."""
    return f"and {q.on(q.node)} {q.sel(c.POD_RESOURCES_UP)} == 1"


def gpu_not_advertised(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUNotAdvertised
    driver = agg("max", q.node, q.sel(c.NODE_DRIVER_GPUS))
    advertised = agg("sum", q.node, q.sel(c.NODE_ADVERTISED))
    return _alert(
        cfg,
        "GPUNotAdvertised",
        f"{driver} > 0\nunless {q.on(q.node)}\n{advertised} > 0\n{_advertised_guard(q)}",
        "The driver sees GPUs that the kubelet does not advertise.",
        f"The NVIDIA driver {where(q)} sees {{{{ $value | humanize }}}} GPUs but the kubelet "
        f"has advertised no GPU device (nvidia.com/gpu, MIG or DRA resources) for {s.for_}: "
        "the device plugin is down, so no GPU pod can be scheduled on the node.",
    )


def gpu_partially_advertised(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUPartiallyAdvertised
    driver = agg("max", q.node, q.sel(c.NODE_DRIVER_GPUS))
    advertised = agg("sum", q.node, q.sel(c.NODE_ADVERTISED))
    return _alert(
        cfg,
        "GPUPartiallyAdvertised",
        f"{driver}\n  > {q.on(q.node)}\n({advertised} > 0)\n{_advertised_guard(q)}",
        "The kubelet advertises fewer GPU devices than the driver sees GPUs.",
        f"The NVIDIA driver {where(q)} sees {{{{ $value | humanize }}}} GPUs but the kubelet "
        f"has advertised fewer devices than that, over all GPU resources, for {s.for_}. "
        "Every GPU backs at least one device (a whole GPU, a MIG instance or a replica), so "
        "at least one GPU is not schedulable: marked unhealthy or left out of the device "
        "plugin's configuration.",
    )


def gpu_driver_version_mismatch(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.GPUDriverVersionMismatch
    versions = agg("count", (*q.cluster, "driver_version"), q.sel(c.GPU_INFO, 'parent_uuid=""'))
    scope = f" in cluster {label(q.cluster[0])}" if q.cluster else ""
    return _alert(
        cfg,
        "GPUDriverVersionMismatch",
        f"{agg('count', q.cluster, versions)} > 1",
        "GPU nodes run different NVIDIA driver versions.",
        f"{{{{ $value | humanize }}}} NVIDIA driver versions have been running on the GPU "
        f"nodes{scope} for {s.for_}, more than the 1 expected. Multi-node jobs (NCCL) and "
        "images built for one driver misbehave across versions.",
    )


GROUP_NODES: tuple[AlertBuilder, ...] = (
    gpu_not_advertised,
    gpu_partially_advertised,
    gpu_driver_version_mismatch,
)


# --- the exporter's own health --------------------------------------------------------------------


def exporter_down(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.KubeGpuExporterDown
    return _alert(
        cfg,
        "KubeGpuExporterDown",
        f"{q.up()} == 0",
        "Prometheus cannot scrape a kube-gpu-exporter.",
        f"Prometheus has failed to scrape kube-gpu-exporter {where(q)} for {s.for_}: the "
        "node's GPUs are not monitored and none of its GPU alerts can fire.",
    )


def exporter_absent(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.KubeGpuExporterAbsent
    return _alert(
        cfg,
        "KubeGpuExporterAbsent",
        f"absent({q.up()})",
        "Prometheus has no kube-gpu-exporter target at all.",
        f"Prometheus has discovered no target matching {{{cfg.selectors.exporter}}}"
        f"{{{{ with $labels.job }}}} (job {{{{ . }}}}){{{{ end }}}} for {s.for_}: no GPU in "
        "the cluster is monitored.",
    )


def exporter_stale(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.KubeGpuExporterStale
    age = f"time() - {q.sel(c.LAST_SUCCESS)}"
    return _alert(
        cfg,
        "KubeGpuExporterStale",
        f"{age} > {fmt_number(duration_seconds(s.threshold))}\n"
        f"unless {q.on(q.node)} {q.sel(c.NVML_UP)} == 0",
        "A kube-gpu-exporter serves old data.",
        f"kube-gpu-exporter {where(q)} last completed a collection "
        f"{{{{ $value | humanizeDuration }}}} ago, over the {s.threshold} threshold, for "
        f"{s.for_}: an NVML call is hanging, and the values it serves are frozen.",
    )


def exporter_nvml_down(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.KubeGpuExporterNvmlDown
    return _alert(
        cfg,
        "KubeGpuExporterNvmlDown",
        f"{q.sel(c.NVML_UP)} == 0",
        "A kube-gpu-exporter cannot talk to the NVIDIA driver.",
        f"kube-gpu-exporter {where(q)} has had NVML unavailable for {s.for_} "
        "(kube_gpu_exporter_nvml_up is 0): the driver is not loaded or not mounted into "
        "the exporter's pod.",
    )


def exporter_pod_resources_down(cfg: Config, q: Query) -> AlertRule:
    s = cfg.alerts.KubeGpuExporterPodResourcesDown
    return _alert(
        cfg,
        "KubeGpuExporterPodResourcesDown",
        f"{q.sel(c.POD_RESOURCES_UP)} == 0",
        "A kube-gpu-exporter cannot reach the kubelet's pod-resources API.",
        f"kube-gpu-exporter {where(q)} has failed to list pod resources from the kubelet "
        f"for {s.for_}: GPUs are not attributed to pods there, and the per-pod alerts "
        "(idle, memory) are blind on that node.",
    )


GROUP_EXPORTER: tuple[AlertBuilder, ...] = (
    exporter_down,
    exporter_absent,
    exporter_stale,
    exporter_nvml_down,
    exporter_pod_resources_down,
)

ALERT_GROUPS: tuple[tuple[str, tuple[AlertBuilder, ...]], ...] = (
    ("kube-gpu-exporter.workloads", GROUP_WORKLOADS),
    ("kube-gpu-exporter.devices", GROUP_DEVICES),
    ("kube-gpu-exporter.nodes", GROUP_NODES),
    ("kube-gpu-exporter.exporter", GROUP_EXPORTER),
)


def all_alerts(cfg: Config) -> tuple[AlertRule, ...]:
    """Every alert the project defines, enabled or not (for runbooks and lint tests)."""
    q = Query(cfg)
    return tuple(build(cfg, q) for _, builders in ALERT_GROUPS for build in builders)


def alert_groups(cfg: Config) -> tuple[RuleGroup, ...]:
    """The enabled alerts, in their deployment groups; a group left empty is dropped."""
    q = Query(cfg)
    groups = []
    for name, builders in ALERT_GROUPS:
        rules = tuple(r for r in (b(cfg, q) for b in builders) if cfg.alert(r.name).enabled)
        if rules:
            groups.append(RuleGroup(name, rules))
    return tuple(groups)
