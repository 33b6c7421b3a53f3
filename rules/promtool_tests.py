"""promtool unit tests for every enabled alert, generated from the same config as the rules.

Each alert gets one test group, from the case its spec writes (rules/alerts/; the case model is
rules/promtool_cases.py), with every expected alert's annotations rendered as Prometheus
renders them. The recording rules get one group checking allocated, idle, idle GPU-hours and
cost on an exclusive and a shared GPU.

promtool 2.42 quirk: every group sets `interval: 1m` (without it all samples load at t=0).
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.cluster import SCHEDULING_WAIT
from kube_gpu_exporter.rules.alerts import BY_NAME
from kube_gpu_exporter.rules.alerts.workloads import GPU_ALLOCATED_IDLE
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.model import AlertRule, RuleGroup
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Series,
    World,
    later,
    minutes,
    s,
    steady,
    uuid,
)
from kube_gpu_exporter.rules.record_names import names
from kube_gpu_exporter.rules.render import HEADER, dump_yaml, runbook_url
from kube_gpu_exporter.rules.templates import render


def recording_case(cfg: Config, w: World) -> dict[str, Any]:
    """One exclusive idle GPU (team-a) and one GPU shared by an idle team-a pod and a busy
    team-b pod: team-a holds 1.5 GPUs and wastes 1.5, team-b holds 0.5 and wastes none."""
    threshold = GPU_ALLOCATED_IDLE.of(cfg).threshold
    idle, busy = threshold / 2, (1 + threshold) / 2
    n = 100
    pods = [(0, "team-a", "a-0", "exclusive", idle), (1, "team-a", "a-1", "shared", idle)]
    pods.append((1, "team-b", "b-0", "shared", busy))
    series: list[Series] = []
    for g, ns, pod, sharing, u in pods:
        series.append(w.alloc("a", g, ns, pod, sharing))
        series.append(s(c.POD_UTILIZATION, w.pod("a", g, ns, pod), steady(u, n)))
        series.append(s(c.SHARE, w.dev("a", g), steady(1, n)))
    # Three quarter-GPU MIG slices (an A30's 1g.6gb) of GPU 2, one busy pod of team-c each:
    # together three quarters of one GPU, not three GPUs.
    for k in range(3):
        mig = {"uuid": f"MIG-a-2-{k}", "parent_uuid": uuid("a", 2), "gpu_instance_id": str(k)}
        held = w.alloc("a", 2, "team-c", f"c-{k}", "exclusive")
        series.append(Series(held.metric, {**held.labels, **mig}, held.values))
        series.append(
            s(c.POD_UTILIZATION, w.pod("a", 2, "team-c", f"c-{k}") | mig, steady(busy, n))
        )
        series.append(s(c.SHARE, w.dev("a", 2) | mig, steady(0.25, n)))
    rec = names(w.q)
    price = cfg.cost.gpu_hour

    def per_ns(
        name: str, team_a: float, team_b: float, team_c: float | None = None
    ) -> list[dict[str, Any]]:
        return [
            {"labels": Series(name, {**w.scope, "namespace": ns}, "").notation(), "value": v}
            for ns, v in (("team-a", team_a), ("team-b", team_b), ("team-c", team_c))
            if v is not None
        ]

    def total(name: str, value: float) -> list[dict[str, Any]]:
        return [{"labels": Series(name, w.scope, "").notation(), "value": value}]

    expected = {
        rec["namespace_allocated"]: per_ns(rec["namespace_allocated"], 1.5, 0.5, 0.75),
        rec["cluster_allocated"]: total(rec["cluster_allocated"], 2.75),
        rec["namespace_idle"]: per_ns(rec["namespace_idle"], 1.5, 0, 0),
        rec["cluster_idle"]: total(rec["cluster_idle"], 1.5),
        rec["namespace_idle_hours"]: per_ns(rec["namespace_idle_hours"], 1.5, 0, 0),
        rec["cluster_idle_cost"]: total(rec["cluster_idle_cost"], 1.5 * price),
    }
    return _expr_group(series, expected)


def scheduling_case(w: World) -> dict[str, Any]:
    """Namespace ml: 10 pods an hour waited 30-60 s; lab: 10 an hour waited 1-30 s. Within a
    bucket histogram_quantile interpolates linearly, so ml's p50 is 45 s and p95 58.5 s; the
    cluster's p50 is the edge between the two (30 s). `idle` scheduled nobody and has none."""
    n = 100
    per_minute = 10 / 60  # cumulative bucket counts rise by this much a minute

    def buckets(namespace: str, counts: dict[str, float]) -> list[Series]:
        return [
            s(
                SCHEDULING_WAIT,
                w.view(namespace=namespace, resource="nvidia.com/gpu", le=le),
                f"0+{rise!r}x{n}",
            )
            for le, rise in counts.items()
        ]

    series = [
        *buckets("ml", {"1": 0, "30": 0, "60": per_minute, "+Inf": per_minute}),
        *buckets("lab", {"1": 0, "30": per_minute, "60": per_minute, "+Inf": per_minute}),
        *buckets("idle", {"1": 0, "30": 0, "60": 0, "+Inf": 0}),
    ]
    series = [Series(x.metric + "_bucket", x.labels, x.values) for x in series]
    rec = names(w.q)

    def sample(name: str, quantile: str, value: float, **labels: str) -> dict[str, Any]:
        notation = Series(name, {**w.scope, **labels, "quantile": quantile}, "").notation()
        return {"labels": notation, "value": value}

    ns, cluster = rec["namespace_wait_quantile"], rec["cluster_wait_quantile"]
    expected = {
        f'{ns}{{namespace="ml"}}': [
            sample(ns, "0.5", 45, namespace="ml"),
            sample(ns, "0.95", 58.5, namespace="ml"),
        ],
        f'{ns}{{namespace="idle"}}': [],
        f'{cluster}{{quantile="0.5"}}': [sample(cluster, "0.5", 30)],
    }
    return _expr_group(series, expected)


def unknown_activity_case(cfg: Config, w: World) -> dict[str, Any]:
    """Two pods on MIG slices of a node in the host PID namespace, neither with a utilization
    series of its own. zeros-0's slice ran no process for the window: idle. unknown-0's slice
    is up, but its process count was served only for the window's last minutes (before, NVML's
    process list did not account for its activity): an unknown minute counts as busy, so
    zeros at the end of a window mostly unknown are not idle."""
    idle = GPU_ALLOCATED_IDLE.of(cfg)
    span = minutes(idle.window)
    counted = max(1, int(span * (1 - idle.threshold) / 2))  # leaves activity over threshold
    end = span + 10
    series = [s(c.HOST_PID_NAMESPACE, w.node("a"), steady(1, end))]
    for gpu, pod, processes in ((0, "zeros-0", steady(0, end)), (1, "unknown-0", None)):
        mig = {"uuid": f"MIG-a-{gpu}-1", "parent_uuid": uuid("a", gpu)}
        if processes is None:
            processes = later(end - counted + 1, steady(0, counted - 1))
        series += [
            s(c.GPU_UP, w.dev("a", gpu) | mig, steady(1, end)),
            s(c.COMPUTE_PROCESSES, w.dev("a", gpu) | mig, processes),
            Series(c.ALLOCATION_INFO.name, w.pod("a", gpu, "team-u", pod) | mig, steady(1, end)),
        ]
    idle_pods = f'sum by (pod) ({names(w.q)["allocation_idle"]}{{namespace="team-u"}})'
    return _expr_group(series, {idle_pods: [{"labels": '{pod="zeros-0"}', "value": 1}]}, end)


def _expr_group(
    series: list[Series], expected: dict[str, list[dict[str, Any]]], minute: int = 90
) -> dict[str, Any]:
    """A test group of recorded series: each expression's samples at `minute`."""
    return {
        "interval": "1m",
        "input_series": _input_series(series),
        "promql_expr_test": [
            {"expr": expr, "eval_time": f"{minute}m", "exp_samples": samples}
            for expr, samples in expected.items()
        ],
    }


def _input_series(series: list[Series] | tuple[Series, ...]) -> list[dict[str, str]]:
    return [{"series": x.notation(), "values": x.values} for x in series]


def _group(cfg: Config, alert: AlertRule, case: Case) -> dict[str, Any]:
    tests = []
    for check in case.checks:
        alerts = [
            {
                "exp_labels": {**f.labels, "severity": alert.severity, **alert.labels},
                "exp_annotations": {
                    "summary": alert.summary,
                    "description": render(alert.description, f.labels, f.value, f.rows),
                    "runbook_url": runbook_url(cfg, alert),
                },
            }
            for f in check.firing
        ]
        tests.append(
            {"eval_time": f"{check.minute}m", "alertname": alert.name, "exp_alerts": alerts}
        )
    return {"interval": "1m", "input_series": _input_series(case.series), "alert_rule_test": tests}


def tests_file(cfg: Config, rule_groups: tuple[RuleGroup, ...], rules_file: str) -> str:
    """The promtool test file for the alerts of `rule_groups` (the enabled ones), next to
    `rules_file`.

    The groups are evaluated in file order (`group_eval_order`): promtool otherwise
    evaluates them in Go's random map order, so an alert reading a recorded series would see
    it one evaluation late in some runs and not in others."""
    w = World(cfg)
    alerts = tuple(a for g in rule_groups for a in g.alerts)
    groups = [_group(cfg, a, BY_NAME[a.name].case(w)) for a in alerts]
    groups.append(recording_case(cfg, w))
    groups.append(unknown_activity_case(cfg, w))
    groups.append(scheduling_case(w))
    doc = {
        "rule_files": [rules_file],
        "evaluation_interval": "1m",
        "group_eval_order": [g.name for g in rule_groups],
        "tests": groups,
    }
    return HEADER + dump_yaml(doc)
