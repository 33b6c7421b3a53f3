"""The report's tables and chart series, built from the answers to its queries.

Per namespace: GPU-hours allocated, idle and busy (allocated − idle) and the idle cost (idle
GPU-hours × the config's price of a GPU-hour). There is no team label in the thresholds file,
so the namespace is the unit a platform lead sends numbers to. A MIG slice or a shared GPU
counts by its weight everywhere, because every number comes from the recording rules' weighted
holds (`allocation_share`, `allocation_idle`).
"""

from __future__ import annotations

from collections import defaultdict

from kube_gpu_exporter.exporter.catalog.xid import XID_NAMES
from kube_gpu_exporter.exporter.report import queues
from kube_gpu_exporter.exporter.report.collect import Results
from kube_gpu_exporter.exporter.report.model import Chart, Column, Line, Table
from kube_gpu_exporter.exporter.report.prometheus_api import Sample
from kube_gpu_exporter.exporter.report.queries import WORKLOAD, ReportQueries
from kube_gpu_exporter.grafana.queries import SLOWDOWNS
from kube_gpu_exporter.rules.promql import fmt_percent

TOP_WORKLOADS = 15
HOURS = 2  # decimals of GPU-hours and money
SHOWN = 0.005  # under this a GPU-hour or a share rounds to 0 and is not worth a row


def _key(sample: Sample, labels: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sample.labels.get(name, "") for name in labels)


def _by(samples: list[Sample], labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    return {_key(s, labels): s.value for s in samples}


def summary(rq: ReportQueries, r: Results) -> Table:
    allocated = sum(s.value for s in r.instant["namespace_allocated"])
    idle = sum(s.value for s in r.instant["namespace_idle"])
    mean = r.instant["mean_utilization"]
    cost = rq.cfg.cost
    columns = (
        Column("gpus", "GPUs (most at once)", 0),
        Column("utilization_percent", "Average utilization %", 1),
        Column("target_percent", "Efficiency target %", 1),
        Column("allocated_gpu_hours", "GPU-hours allocated", HOURS),
        Column("busy_gpu_hours", "GPU-hours busy", HOURS),
        Column("idle_gpu_hours", "GPU-hours idle", HOURS),
        Column("idle_cost", f"Idle cost ({cost.currency})", HOURS),
    )
    row = (
        r.gpus,
        mean[0].value * 100 if mean else None,
        rq.cfg.dashboards.efficiency_target * 100,
        allocated,
        allocated - idle,
        idle,
        idle * cost.gpu_hour,
    )
    return Table.of("summary", "Summary", columns, [row])


def namespaces(rq: ReportQueries, r: Results) -> Table:
    allocated = _by(r.instant["namespace_allocated"], ("namespace",))
    idle = _by(r.instant["namespace_idle"], ("namespace",))
    price = rq.cfg.cost.gpu_hour
    rows = []
    for (name,), held in allocated.items():
        wasted = idle.get((name,), 0.0)
        share = wasted / held * 100 if held > 0 else None
        rows.append((name, held, held - wasted, wasted, share, wasted * price))
    rows.sort(key=lambda row: (-row[5], row[0]))
    columns = (
        Column("namespace", "Namespace"),
        Column("allocated_gpu_hours", "GPU-hours allocated", HOURS),
        Column("busy_gpu_hours", "GPU-hours busy", HOURS),
        Column("idle_gpu_hours", "GPU-hours idle", HOURS),
        Column("idle_percent", "Idle %", 1),
        Column("idle_cost", f"Idle cost ({rq.cfg.cost.currency})", HOURS),
    )
    return Table.of(
        "namespaces",
        "GPU-hours per namespace",
        columns,
        rows,
        note=f"Idle: held while using under {fmt_percent(rq.cfg.alerts.GPUAllocatedIdle.threshold)}"
        f" over {rq.cfg.alerts.GPUAllocatedIdle.window}; a MIG slice or a shared GPU "
        f"counts by its weight. Cost at {rq.cfg.cost.gpu_hour:g} "
        f"{rq.cfg.cost.currency} per GPU-hour.",
    )


def idle_workloads(rq: ReportQueries, r: Results) -> Table:
    devices: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for s in sorted(r.instant["workload_devices"], key=lambda s: _key(s, rq.gpu)):
        gpu = f"{s.labels.get(rq.node, '')} GPU {s.labels.get('gpu', '')}"
        devices[_key(s, WORKLOAD)].append(gpu if s.value >= 1 else f"{gpu} ×{s.value:.3g}")
    price = rq.cfg.cost.gpu_hour
    worst = sorted(
        ((k, v) for k, v in _by(r.instant["workload_idle"], WORKLOAD).items() if v >= SHOWN),
        key=lambda kv: (-kv[1], kv[0]),
    )[:TOP_WORKLOADS]
    rows = [
        (ns, wl, hours, hours * price, "; ".join(devices.get((ns, wl), [])))
        for (ns, wl), hours in worst
    ]
    columns = (
        Column("namespace", "Namespace"),
        Column("workload", "Workload"),
        Column("idle_gpu_hours", "GPU-hours idle", HOURS),
        Column("idle_cost", f"Idle cost ({rq.cfg.cost.currency})", HOURS),
        Column("gpus", "GPUs (×weight)"),
    )
    return Table.of(
        "idle_workloads",
        f"Worst idle workloads (top {TOP_WORKLOADS})",
        columns,
        rows,
        note="A workload is the pod's owner (a Deployment, a Job), else the "
        "pod. A GPU held in part (MIG slice, shared GPU) shows its weight.",
    )


def fractional_holds(rq: ReportQueries, r: Results) -> Table:
    labels = rq.hold_labels()
    allocated = _by(r.instant["hold_allocated"], labels)
    idle = _by(r.instant["hold_idle"], labels)
    rows = []
    for s in sorted(r.instant["holds"], key=lambda s: _key(s, labels)):
        key = _key(s, labels)
        node, gpu, uuid, ns, pod, _ = key
        rows.append(
            (
                node,
                gpu,
                s.labels.get("mig_profile") or "shared",
                uuid,
                ns,
                pod,
                s.value,
                allocated.get(key),
                idle.get(key, 0.0),
            )
        )
    columns = (
        Column("node", "Node"),
        Column("gpu", "GPU"),
        Column("profile", "MIG profile"),
        Column("uuid", "Device"),
        Column("namespace", "Namespace"),
        Column("pod", "Pod"),
        Column("weight", "Weight (GPUs)", 3),
        Column("allocated_gpu_hours", "GPU-hours allocated", HOURS),
        Column("idle_gpu_hours", "GPU-hours idle", HOURS),
    )
    return Table.of(
        "fractional_holds",
        "MIG slices and shared GPUs",
        columns,
        rows,
        note="A hold's weight is its device's share of the physical GPU divided by "
        "the pods sharing it (the largest in the period).",
    )


def slowdowns(rq: ReportQueries, r: Results) -> Table:
    hottest = _by(r.instant["hottest"], rq.gpu)
    reasons = set(SLOWDOWNS.split("|"))
    seconds = rq.period.seconds
    rows = [
        (
            *_key(s, rq.gpu),
            s.labels.get("reason", ""),
            s.value * seconds / 3600,
            s.value * 100,
            hottest.get(_key(s, rq.gpu)),
        )
        for s in sorted(r.instant["slowed"], key=lambda s: _key(s, (*rq.gpu, "reason")))
        if s.labels.get("reason") in reasons and s.value * seconds >= 1
    ]
    columns = (
        Column("node", "Node"),
        Column("gpu", "GPU"),
        Column("uuid", "Device"),
        Column("reason", "Reason"),
        Column("slowed_hours", "Hours slowed", HOURS),
        Column("slowed_percent", "% of the period", 1),
        Column("hottest_celsius", "Hottest °C", 0),
    )
    return Table.of(
        "slowdowns",
        "Clock slowdowns (thermal, power) per GPU",
        columns,
        rows,
        note="Time the clocks were held down, from the driver's clock-event "
        "counters; all GPUs of the cluster.",
    )


def xids(rq: ReportQueries, r: Results) -> Table:
    labels = (*rq.gpu, "xid")
    rows = []
    for s in sorted(r.instant["xids"], key=lambda s: _key(s, labels)):
        if round(s.value) >= 1:
            code = s.labels.get("xid", "")
            name = XID_NAMES.get(int(code), "") if code.isdigit() else ""
            rows.append((*_key(s, labels), name, float(round(s.value))))
    columns = (
        Column("node", "Node"),
        Column("gpu", "GPU"),
        Column("uuid", "Device"),
        Column("xid", "Xid"),
        Column("name", "What it is"),
        Column("events", "Events", 0),
    )
    return Table.of("xids", "Xid errors per GPU", columns, rows, note="All GPUs of the cluster.")


def pending(rq: ReportQueries, r: Results) -> Table:
    columns = (
        Column("namespace", "Namespace"),
        Column("reason", "Reason"),
        Column("peak_pods", "Most pods waiting", 0),
        Column("mean_pods", "Pods waiting on average", 2),
        Column("longest_wait_hours", "Longest wait (hours)", HOURS),
    )
    title = "Pending GPU demand"
    if not r.scheduling:
        return Table.of(
            "pending",
            title,
            columns,
            [],
            empty="no scheduling data (the cluster "
            "view, kube-gpu-exporter cluster, is not scraped)",
        )
    keys = ("namespace", "reason")
    mean = _by(r.instant["pending_mean"], keys)
    longest = _by(r.instant["pending_longest"], ("namespace",))
    rows = [
        (*k, peak, mean.get(k), longest.get(k[:1], 0.0) / 3600)
        for k, peak in sorted(_by(r.instant["pending_peak"], keys).items())
        if peak > 0
    ]
    return Table.of("pending", title, columns, rows, empty="no GPU pod waited in the period")


def charts(rq: ReportQueries, r: Results) -> tuple[Chart, ...]:
    def lines(key: str, label: str | None = None) -> tuple[Line, ...]:
        return tuple(
            Line(label or s.labels.get("reason", key), s.times, s.values)
            for s in r.ranged.get(key, [])
        )

    found = [
        Chart(
            "utilization",
            "GPU utilization against the efficiency target",
            "ratio",
            lines("utilization", "fleet"),
            target=rq.cfg.dashboards.efficiency_target,
        ),
        Chart(
            "allocation",
            "Allocated and idle GPUs",
            "GPUs",
            lines("allocated", "allocated") + lines("idle", "idle"),
        ),
        Chart(
            "slowdowns",
            "GPUs slowed, by clock-event reason",
            "GPUs",
            lines("slowdowns"),
            empty="no clock slowdown in the period",
        ),
    ]
    if r.scheduling:
        found.append(Chart("pending", "Pending GPU pods, by reason", "pods", lines("pending")))
    return tuple(found)


def all_tables(rq: ReportQueries, r: Results) -> tuple[Table, ...]:
    builders = (summary, namespaces, idle_workloads, fractional_holds, slowdowns, xids, pending)
    return (*(build(rq, r) for build in builders), *queues.tables(r.instant, r.kueue))
