"""promtool unit tests for every enabled alert, generated from the same config as the rules.

Each alert gets one test group: input series for devices (or nodes) that must fire and for
ones that must not, checked once while the condition has not yet held for the alert's `for`
(nothing fires) and once after (exactly the expected alerts fire, with their annotations
rendered as Prometheus renders them). Values derive from the thresholds — half of an idle
threshold, midway between a memory threshold and full — so a changed thresholds file still
produces tests that pass against the rules it produces. The recording rules get one group
checking allocated, idle, idle GPU-hours and cost on an exclusive and a shared GPU.

promtool 2.42 quirk: every group sets `interval: 1m` (without it all samples load at t=0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.config import Config, duration_seconds, parse_matchers, selector_labels
from kube_gpu_exporter.rules.model import AlertRule
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.recording import names
from kube_gpu_exporter.rules.render import HEADER, dump_yaml, runbook_url
from kube_gpu_exporter.rules.templates import render

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Series:
    metric: str
    labels: Labels
    values: str

    def notation(self) -> str:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return f"{self.metric}{{{inner}}}"


@dataclass(frozen=True, slots=True)
class Firing:
    labels: Labels  # the alert's labels besides alertname and severity
    value: float  # $value, for the description


@dataclass(frozen=True, slots=True)
class Check:
    minute: int
    firing: tuple[Firing, ...]


@dataclass(frozen=True, slots=True)
class Case:
    series: tuple[Series, ...]
    checks: tuple[Check, ...]


def minutes(duration: str) -> int:
    return math.ceil(duration_seconds(duration) / 60)


def steady(value: float, samples: int) -> str:
    """`value` at every minute for `samples` + 1 samples."""
    return f"{value!r}+0x{samples}"


def later(first_minute: int, value_series: str) -> str:
    """Nothing before `first_minute`, then `value_series`."""
    return f"_x{first_minute} {value_series}" if first_minute else value_series


class World:
    """Label sets of the test fleet: nodes `node-a`…, GPUs by index, pods by name."""

    def __init__(self, cfg: Config) -> None:
        self.q = Query(cfg)
        self.base = selector_labels(cfg.selectors.exporter)
        self.scope = {cfg.labels.cluster: "test-cluster"} if cfg.labels.cluster else {}

    def node(self, name: str) -> dict[str, str]:
        """Series labels of an exporter target."""
        return {**self.base, **self.scope, self.q.node_label: f"node-{name}:19400"}

    def node_out(self, name: str) -> dict[str, str]:
        """Labels of an alert aggregated per node."""
        return {**self.scope, self.q.node_label: f"node-{name}:19400"}

    def dev(self, node: str, gpu: int, **extra: str) -> dict[str, str]:
        return {**self.node(node), "gpu": str(gpu), "uuid": uuid(node, gpu), **extra}

    def dev_out(self, node: str, gpu: int, **extra: str) -> dict[str, str]:
        return {**self.node_out(node), "gpu": str(gpu), "uuid": uuid(node, gpu), **extra}

    def pod(self, node: str, gpu: int, namespace: str, pod: str) -> dict[str, str]:
        return self.dev(node, gpu, namespace=namespace, pod=pod, container="main")

    def alloc(self, node: str, gpu: int, namespace: str, pod: str, sharing: str) -> Series:
        labels = self.pod(node, gpu, namespace, pod) | {
            "resource": "nvidia.com/gpu",
            "sharing": sharing,
        }
        return Series(c.ALLOCATION_INFO.name, labels, "1+0x200")


def uuid(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu:04d}"


def s(metric: c.Metric, labels: Labels, values: str) -> Series:
    return Series(metric.name, labels, values)


def timeline(for_: str, firing: tuple[Firing, ...], start: int = 0) -> tuple[Check, ...]:
    """Checks for a condition true from minute `start`: pending just before `for` has
    elapsed (when there is a `for`), firing after."""
    held = minutes(for_)
    checks = [Check(start + held + 2, firing)]
    if held:
        checks.insert(0, Check(start + held - 1, ()))
    return tuple(checks)


# --- one case per alert --------------------------------------------------------------------------


def allocated_idle(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUAllocatedIdle
    idle, busy = a.threshold / 2, (1 + a.threshold) / 2
    n = minutes(a.for_) + 10
    pods = [  # (gpu, namespace, pod, utilization): exclusive and shared, idle and busy
        (0, "team-a", "idle-0", idle),
        (1, "team-a", "busy-0", busy),
        (2, "team-b", "shared-idle", idle),
        (2, "team-b", "shared-busy", busy),
    ]
    series = tuple(s(c.POD_UTILIZATION, w.pod("a", g, ns, p), steady(u, n)) for g, ns, p, u in pods)
    firing = tuple(
        Firing(w.dev_out("a", g, namespace=ns, pod=p), u) for g, ns, p, u in pods if u == idle
    )
    return Case(series, timeline(a.for_, firing))


def memory_near_full(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUMemoryNearFull
    total = 80 << 30
    full, fine = round(total * (1 + a.threshold) / 2), round(total * a.threshold / 2)
    n = minutes(a.for_) + 10
    used = {0: full, 1: full, 2: fine, 3: full}  # 3: a MIG-enabled parent (left out)
    series = [s(c.MEMORY_USED, w.dev("a", g), steady(v, n)) for g, v in used.items()]
    series += [s(c.MEMORY_TOTAL, w.dev("a", g), steady(total, n)) for g in used]
    mig = w.dev("a", 3) | {"uuid": "MIG-a-3-1", "parent_uuid": uuid("a", 3)}
    series += [
        s(c.MEMORY_USED, mig, steady(fine, n)),
        s(c.MEMORY_TOTAL, mig, steady(total, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
        w.alloc("a", 0, "team-a", "train-0", "shared"),
        w.alloc("a", 0, "team-a", "train-1", "shared"),
        w.alloc("a", 2, "team-b", "infer-0", "exclusive"),
    ]
    ratio = full / total
    firing = (
        Firing(w.dev_out("a", 0, namespace="team-a", pod="train-0"), ratio),
        Firing(w.dev_out("a", 0, namespace="team-a", pod="train-1"), ratio),
        Firing(w.dev_out("a", 1), ratio),  # no pod holds it: still alerts
    )
    return Case(tuple(series), timeline(a.for_, firing))


def memory_leaked(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUMemoryLeaked
    held = max(2 * a.threshold, 1 << 30)
    n = minutes(a.for_) + 10
    # node a: (gpu, allocated, processes); node b: the same leak, but pod-resources is down
    devices = [(0, False, 0), (1, True, 0), (2, False, 1)]
    series = [s(c.POD_RESOURCES_UP, w.node("a"), steady(1, n))]
    series += [s(c.POD_RESOURCES_UP, w.node("b"), steady(0, n))]
    for node in ("a", "b"):
        for g, allocated, processes in devices:
            series.append(s(c.MEMORY_USED, w.dev(node, g), steady(held, n)))
            series.append(s(c.COMPUTE_PROCESSES, w.dev(node, g), steady(processes, n)))
            if allocated:
                series.append(w.alloc(node, g, "team-a", "job-0", "exclusive"))
    # A MIG-enabled parent: its memory is its instances', one of which a pod holds.
    mig = w.dev("a", 3) | {"uuid": "MIG-a-3-1", "parent_uuid": uuid("a", 3)}
    series += [
        s(c.MEMORY_USED, w.dev("a", 3), steady(held, n)),
        s(c.COMPUTE_PROCESSES, w.dev("a", 3), steady(0, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
        s(c.MEMORY_USED, mig, steady(held, n)),
        Series(c.ALLOCATION_INFO.name, mig | {"namespace": "team-a", "pod": "mig-0"}, "1+0x200"),
    ]
    return Case(tuple(series), timeline(a.for_, (Firing(w.dev_out("a", 0), held),)))


def _xid_case(w: World, for_: str, window: str, xid: int, other_xid: int) -> Case:
    """Keeps failing (a counter rising every minute), newly failing (a counter that appears
    at 1 and stays: only the `unless … offset` arm sees it), an old event (flat since long
    before the window) and a rising Xid of the other list."""
    held, span = minutes(for_), minutes(window)
    start = span + 10
    at = start + held + 2
    n = at + 10
    x = {"xid": str(xid)}
    series = [
        s(c.XID_ERRORS, w.dev("a", 0, **x), later(start, f"1+1x{n}")),
        s(c.XID_ERRORS, w.dev("a", 2, **x), steady(1, at + n)),
        s(c.XID_ERRORS, w.dev("a", 3, xid=str(other_xid)), later(start, f"1+1x{n}")),
    ]
    firing = [Firing(w.dev_out("a", 0, **x), 0)]
    if held + 1 < span:
        series.append(s(c.XID_ERRORS, w.dev("a", 1, **x), later(at - held - 1, steady(1, n))))
        firing.append(Firing(w.dev_out("a", 1, **x), 0))
    checks = [Check(start - 1, ()), Check(at, tuple(firing))]
    return Case(tuple(series), tuple(checks))


def _other_xid(cfg: Config, xids: tuple[int, ...]) -> int:
    """An Xid not in `xids` (one of the other list's if it has one)."""
    others = (*cfg.alerts.GPUXidErrors.xids, *cfg.alerts.GPUXidApplicationErrors.xids, 999)
    return next(x for x in others if x not in xids)


def xid_application_errors(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUXidApplicationErrors
    return _xid_case(w, a.for_, a.window, a.xids[0], _other_xid(cfg, a.xids))


def xid_errors(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUXidErrors
    return _xid_case(w, a.for_, a.window, a.xids[0], _other_xid(cfg, a.xids))


def temperature_high(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUTemperatureHigh
    hot, cool = a.threshold + 3, a.threshold / 2
    n = minutes(a.for_) + 10
    series = (
        s(c.TEMPERATURE, w.dev("a", 0), steady(hot, n)),
        s(c.TEMPERATURE, w.dev("a", 1), steady(cool, n)),
    )
    return Case(series, timeline(a.for_, (Firing(w.dev("a", 0), hot),)))


def _clock_events(w: World, n: int, active: Mapping[int, tuple[str, ...]]) -> tuple[Series, ...]:
    """Every reason's series for each GPU in `active`, 1 for the reasons listed."""
    return tuple(
        s(c.CLOCK_EVENT_ACTIVE, w.dev("a", g, reason=r), steady(int(r in reasons), n))
        for g, reasons in active.items()
        for r in c.CLOCK_EVENT_REASONS
    )


def thermal_throttling(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUThermalThrottling
    n = minutes(a.for_) + 10
    active = {
        0: ("sw_thermal_slowdown",),
        1: ("gpu_idle", "sw_power_cap"),
        2: ("hw_thermal_slowdown",),
    }
    firing = (Firing(w.dev_out("a", 0), 1), Firing(w.dev_out("a", 2), 1))
    return Case(_clock_events(w, n, active), timeline(a.for_, firing))


def hardware_slowdown(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUHardwareSlowdown
    n = minutes(a.for_) + 10
    active = {0: ("hw_slowdown",), 1: ("hw_slowdown", "hw_thermal_slowdown"), 2: ()}
    return Case(_clock_events(w, n, active), timeline(a.for_, (Firing(w.dev_out("a", 0), 1),)))


def power_brake(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUPowerBrake
    n = minutes(a.for_) + 10
    active = {0: ("hw_power_brake_slowdown", "hw_slowdown"), 1: ("sw_power_cap",)}
    return Case(_clock_events(w, n, active), timeline(a.for_, (Firing(w.dev_out("a", 0), 1),)))


def ecc_uncorrectable(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUEccUncorrectable
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10
    n = start + held + 10
    series = (
        s(c.ECC_UNCORRECTED, w.dev("a", 0), f"0+0x{start - 1} 1+1x{n}"),  # rising from `start`
        s(c.ECC_UNCORRECTED, w.dev("a", 1), steady(3, start + n)),  # old errors, flat
    )
    checks = (Check(start - 1, ()), Check(start + held + 2, (Firing(w.dev_out("a", 0), 0),)))
    return Case(series, checks)


def lost(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPULost
    n = minutes(a.for_) + 10
    mig = w.dev("a", 0) | {"uuid": "MIG-a-0-1", "parent_uuid": uuid("a", 0)}
    series = (
        s(c.GPU_UP, w.dev("a", 0), steady(0, n)),
        s(c.GPU_UP, mig, steady(0, n)),  # goes with its parent: no alert of its own
        s(c.GPU_UP, w.dev("a", 1), steady(1, n)),
    )
    return Case(series, timeline(a.for_, (Firing(w.dev("a", 0), 0),)))


def _node_series(
    w: World, n: int, nodes: Mapping[str, tuple[int, Mapping[str, int], int]]
) -> tuple[Series, ...]:
    """Per node: (driver GPUs, advertised devices by resource, pod-resources up)."""
    out: list[Series] = []
    for node, (gpus, advertised, up) in nodes.items():
        out.append(s(c.NODE_DRIVER_GPUS, w.node(node), steady(gpus, n)))
        out.append(s(c.POD_RESOURCES_UP, w.node(node), steady(up, n)))
        for resource, count in advertised.items():
            labels = w.node(node) | {"resource": resource}
            out.append(s(c.NODE_ADVERTISED, labels, steady(count, n)))
    return tuple(out)


def not_advertised(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUNotAdvertised
    n = minutes(a.for_) + 10
    nodes = {
        "a": (8, {"nvidia.com/gpu": 0}, 1),  # device plugin gone
        "b": (2, {"nvidia.com/mig-1g.10gb": 14}, 1),  # MIG: more devices than GPUs
        "c": (4, {}, 0),  # pod-resources down: that alert speaks instead
        "d": (8, {}, 1),  # nothing advertised at all
    }
    firing = (Firing(w.node_out("a"), 8), Firing(w.node_out("d"), 8))
    return Case(_node_series(w, n, nodes), timeline(a.for_, firing))


def partially_advertised(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUPartiallyAdvertised
    n = minutes(a.for_) + 10
    nodes = {
        "a": (8, {"nvidia.com/gpu": 7}, 1),  # one GPU unhealthy
        "b": (2, {"nvidia.com/mig-1g.10gb": 14}, 1),
        "c": (8, {"nvidia.com/gpu": 0}, 1),  # GPUNotAdvertised's case
        "d": (4, {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 4}, 1),  # mixed, all used
    }
    return Case(_node_series(w, n, nodes), timeline(a.for_, (Firing(w.node_out("a"), 8),)))


def driver_version_mismatch(cfg: Config, w: World) -> Case:
    a = cfg.alerts.GPUDriverVersionMismatch
    switch = 10  # node b moves from the common driver to another one at minute 10
    n = switch + minutes(a.for_) + 20
    info = {"model": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0", "mig_profile": ""}
    old, new = {"driver_version": "550.54.15"}, {"driver_version": "535.161.08"}
    series = (
        s(c.GPU_INFO, w.dev("a", 0, **info, **old), steady(1, n)),
        s(c.GPU_INFO, w.dev("b", 0, **info, **old), steady(1, switch - 1)),
        s(c.GPU_INFO, w.dev("b", 0, **info, **new), later(switch, steady(1, n))),
    )
    # A vanished series stays visible for the 5-minute lookback: two versions from `switch`.
    checks = (Check(switch - 2, ()), *timeline(a.for_, (Firing(w.scope, 2),), start=switch))
    return Case(series, checks)


def exporter_down(cfg: Config, w: World) -> Case:
    a = cfg.alerts.KubeGpuExporterDown
    n = minutes(a.for_) + 10
    series = (Series("up", w.node("a"), steady(0, n)), Series("up", w.node("b"), steady(1, n)))
    return Case(series, timeline(a.for_, (Firing(w.node("a"), 0),)))


def exporter_absent(cfg: Config, w: World) -> Case:
    a = cfg.alerts.KubeGpuExporterAbsent
    appear = minutes(a.for_) + 10
    other = w.node("a") | {"job": "something-else"}
    series = (
        Series("up", other, steady(1, appear + 20)),
        Series("up", w.node("a"), later(appear, steady(1, 20))),
    )
    # absent() carries the selector's equality matchers as labels.
    labels = {k: v for k, op, v in parse_matchers(cfg.selectors.exporter) if op == "="}
    checks = (*timeline(a.for_, (Firing(labels, 1),)), Check(appear + 5, ()))
    return Case(series, checks)


def exporter_stale(cfg: Config, w: World) -> Case:
    a = cfg.alerts.KubeGpuExporterStale
    limit = duration_seconds(a.threshold)
    stuck_at = 60.0  # node a's last success, and node c's (whose NVML is down)
    start = math.floor((stuck_at + limit) / 60) + 1  # first minute the age is over the limit
    at = start + minutes(a.for_) + 2
    n = at + 10
    series = (
        s(c.LAST_SUCCESS, w.node("a"), f"0 {stuck_at!r}+0x{n}"),
        s(c.LAST_SUCCESS, w.node("b"), f"0+60x{n}"),
        s(c.LAST_SUCCESS, w.node("c"), f"0 {stuck_at!r}+0x{n}"),
        s(c.NVML_UP, w.node("a"), steady(1, n)),
        s(c.NVML_UP, w.node("b"), steady(1, n)),
        s(c.NVML_UP, w.node("c"), steady(0, n)),
    )
    firing = (Firing(w.node("a"), at * 60 - stuck_at),)
    pending = minutes(a.for_)
    checks = (Check(start - 1, ()), *((Check(start + pending - 1, ()),) if pending else ()))
    return Case(series, (*checks, Check(at, firing)))


def _exporter_gauge(metric: c.Metric, for_: str, w: World) -> Case:
    n = minutes(for_) + 10
    series = (s(metric, w.node("a"), steady(0, n)), s(metric, w.node("b"), steady(1, n)))
    return Case(series, timeline(for_, (Firing(w.node("a"), 0),)))


def exporter_nvml_down(cfg: Config, w: World) -> Case:
    return _exporter_gauge(c.NVML_UP, cfg.alerts.KubeGpuExporterNvmlDown.for_, w)


def exporter_pod_resources_down(cfg: Config, w: World) -> Case:
    return _exporter_gauge(c.POD_RESOURCES_UP, cfg.alerts.KubeGpuExporterPodResourcesDown.for_, w)


CASES: dict[str, Callable[[Config, World], Case]] = {
    "GPUAllocatedIdle": allocated_idle,
    "GPUMemoryNearFull": memory_near_full,
    "GPUMemoryLeaked": memory_leaked,
    "GPUXidApplicationErrors": xid_application_errors,
    "GPUTemperatureHigh": temperature_high,
    "GPUThermalThrottling": thermal_throttling,
    "GPUHardwareSlowdown": hardware_slowdown,
    "GPUPowerBrake": power_brake,
    "GPUXidErrors": xid_errors,
    "GPUEccUncorrectable": ecc_uncorrectable,
    "GPULost": lost,
    "GPUNotAdvertised": not_advertised,
    "GPUPartiallyAdvertised": partially_advertised,
    "GPUDriverVersionMismatch": driver_version_mismatch,
    "KubeGpuExporterDown": exporter_down,
    "KubeGpuExporterAbsent": exporter_absent,
    "KubeGpuExporterStale": exporter_stale,
    "KubeGpuExporterNvmlDown": exporter_nvml_down,
    "KubeGpuExporterPodResourcesDown": exporter_pod_resources_down,
}


# --- the recording rules ------------------------------------------------------------------------


def recording_case(cfg: Config, w: World) -> dict[str, Any]:
    """One exclusive idle GPU (team-a) and one GPU shared by an idle team-a pod and a busy
    team-b pod: team-a holds 1.5 GPUs and wastes 1.5, team-b holds 0.5 and wastes none."""
    idle = cfg.alerts.GPUAllocatedIdle.threshold / 2
    busy = (1 + cfg.alerts.GPUAllocatedIdle.threshold) / 2
    n = 100
    pods = [(0, "team-a", "a-0", "exclusive", idle), (1, "team-a", "a-1", "shared", idle)]
    pods.append((1, "team-b", "b-0", "shared", busy))
    series: list[Series] = []
    for g, ns, pod, sharing, u in pods:
        series.append(w.alloc("a", g, ns, pod, sharing))
        series.append(s(c.POD_UTILIZATION, w.pod("a", g, ns, pod), steady(u, n)))
    rec = names(w.q)
    price = cfg.cost.gpu_hour

    def per_ns(name: str, team_a: float, team_b: float) -> list[dict[str, Any]]:
        return [
            {"labels": Series(name, {**w.scope, "namespace": ns}, "").notation(), "value": v}
            for ns, v in (("team-a", team_a), ("team-b", team_b))
        ]

    def total(name: str, value: float) -> list[dict[str, Any]]:
        return [{"labels": Series(name, w.scope, "").notation(), "value": value}]

    expected = {
        rec["namespace_allocated"]: per_ns(rec["namespace_allocated"], 1.5, 0.5),
        rec["namespace_idle"]: per_ns(rec["namespace_idle"], 1.5, 0),
        rec["cluster_idle"]: total(rec["cluster_idle"], 1.5),
        rec["namespace_idle_hours"]: per_ns(rec["namespace_idle_hours"], 1.5, 0),
        rec["cluster_idle_cost"]: total(rec["cluster_idle_cost"], 1.5 * price),
    }
    return {
        "interval": "1m",
        "input_series": [{"series": x.notation(), "values": x.values} for x in series],
        "promql_expr_test": [
            {"expr": expr, "eval_time": "90m", "exp_samples": samples}
            for expr, samples in expected.items()
        ],
    }


# --- the file ------------------------------------------------------------------------------------


def _group(cfg: Config, alert: AlertRule, case: Case) -> dict[str, Any]:
    tests = []
    for check in case.checks:
        alerts = [
            {
                "exp_labels": {**f.labels, "severity": alert.severity},
                "exp_annotations": {
                    "summary": alert.summary,
                    "description": render(alert.description, f.labels, f.value),
                    "runbook_url": runbook_url(cfg, alert),
                },
            }
            for f in check.firing
        ]
        tests.append(
            {"eval_time": f"{check.minute}m", "alertname": alert.name, "exp_alerts": alerts}
        )
    return {
        "interval": "1m",
        "input_series": [{"series": x.notation(), "values": x.values} for x in case.series],
        "alert_rule_test": tests,
    }


def tests_file(cfg: Config, alerts: tuple[AlertRule, ...], rules_file: str) -> str:
    """The promtool test file for `alerts` (the enabled ones), next to `rules_file`."""
    w = World(cfg)
    groups = [_group(cfg, a, CASES[a.name](cfg, w)) for a in alerts]
    groups.append(recording_case(cfg, w))
    doc = {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": groups}
    return HEADER + dump_yaml(doc)
