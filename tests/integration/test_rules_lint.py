"""Lint of the generated rules against the monitoring-mixin conventions, and the metric
catalog check: every metric a rule, panel or runbook query uses exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import BY_NAME
from kube_gpu_exporter.exporter.catalog.metric import MetricType
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.rules.alerts import alert_groups, all_alerts
from kube_gpu_exporter.rules.config import Config, parse_config
from kube_gpu_exporter.rules.promql import KSM_METRICS, PROMETHEUS_METRICS
from kube_gpu_exporter.rules.promql_names import metric_names
from kube_gpu_exporter.rules.templates import (
    humanize,
    humanize1024,
    humanize_duration,
    humanize_percentage,
    render,
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RUNBOOKS_MD = REPO / "docs" / "runbooks.md"
NAME = re.compile(r"^([A-Z]+[a-z0-9]+)+$")
RECORD = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


RULES = load("rules.yaml")
ALERTS = [r for g in RULES["groups"] for r in g["rules"] if "alert" in r]
RECORDS = [r for g in RULES["groups"] for r in g["rules"] if "record" in r]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    anchors = set()
    for line in markdown.splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


@pytest.mark.parametrize("alert", ALERTS, ids=[a["alert"] for a in ALERTS])
def test_alert_conventions(alert: dict[str, Any]) -> None:
    name = alert["alert"]
    assert NAME.match(name) and len(name) <= 40, name
    assert alert["labels"]["severity"] in ("critical", "warning", "info")
    annotations = alert["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    summary = annotations["summary"]
    assert summary.endswith(".") and "{{" not in summary, summary
    assert "{{" in annotations["description"], "the description must be templated"
    base, _, anchor = annotations["runbook_url"].partition("#")
    assert base == Config().runbook_url
    assert anchor in github_anchors(RUNBOOKS_MD.read_text()), f"no #{anchor} in runbooks.md"


def test_descriptions_repeat_the_thresholds() -> None:
    described = {a["alert"]: a["annotations"]["description"] for a in ALERTS}
    expected = {
        "GPUAllocatedIdle": "10%",
        "GPUMemoryNearFull": "95%",
        "GPUTemperatureHigh": "85 °C",
        "GPUMemoryLeaked": "1GiB",
        "KubeGpuExporterStale": "2m",
        "GPUXidErrors": "109",
        "GPUXidRebootRequired": "79",
        "GPUXidApplicationErrors": "13",
        "GPUEccUncorrectable": "10m",
    }
    for name, threshold in expected.items():
        assert threshold in described[name], (name, described[name])
    for name, text in described.items():
        assert re.search(r"\d", text), f"{name}: no threshold or duration in the description"


def test_changed_thresholds_reach_rules_and_descriptions() -> None:
    cfg = parse_config("alerts: {GPUMemoryNearFull: {threshold: 0.9, for: 2m}}")
    alert = next(a for a in all_alerts(cfg) if a.name == "GPUMemoryNearFull")
    assert "> 0.9\n" in alert.expr and "90%" in alert.description and alert.for_ == "2m"


def test_disabled_alerts_are_left_out() -> None:
    cfg = parse_config("alerts: {GPULost: {enabled: false}}")
    names = {a.name for g in alert_groups(cfg) for a in g.alerts}
    assert "GPULost" not in names and "GPUXidErrors" in names


def test_groups_are_small_and_uniquely_named() -> None:
    names = [g["name"] for g in RULES["groups"]]
    assert len(names) == len(set(names))
    for group in RULES["groups"]:
        assert 0 < len(group["rules"]) <= 20, group["name"]
        assert not set(group) & {"labels", "query_offset"}, "not parsed by promtool 2.42"


def test_recording_rule_names() -> None:
    """One rule per recorded series: a name twice only with different labels (a quantile)."""
    series = [(r["record"], tuple(sorted(r.get("labels", {}).items()))) for r in RECORDS]
    assert len(series) == len(set(series))
    for name, _ in series:
        assert RECORD.match(name), f"{name} is not level:metric:operations"


def test_prometheus_rule_wraps_the_same_groups() -> None:
    resource = load("prometheus-rule.yaml")
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["namespace"] == "monitoring"
    assert resource["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert resource["spec"]["groups"] == RULES["groups"]


def test_runbooks_say_what_to_do() -> None:
    text = RUNBOOKS_MD.read_text()
    for name in {a.name for a in all_alerts(Config())}:
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Meaning**", "**Impact**", "**Diagnosis**", "**Mitigation**"):
            assert part in section, (name, part)
        assert "```promql" in section or "```sh" in section, name


# --- every metric used exists ----------------------------------------------------------------


def _all_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every rule, dashboard target and variable, and runbook query."""
    out = [(r.get("alert") or r["record"], r["expr"]) for r in ALERTS + RECORDS]
    for dashboard in build_all(Config()):
        for panel in dashboard.panels():
            out += [(f"{dashboard.uid}: {panel.title}", t.expr) for t in panel.targets]
        out += [(f"{dashboard.uid}: ${v.name}", v.query) for v in dashboard.variables if v.query]
    for block in re.findall(r"```promql\n(.*?)```", RUNBOOKS_MD.read_text(), re.DOTALL):
        out += [("runbooks.md", line) for line in block.splitlines() if line.strip()]
    return out


def test_every_metric_used_is_in_the_catalog() -> None:
    recorded = {r["record"] for r in RECORDS}
    histograms = {
        f"{m.name}{suffix}"
        for m in BY_NAME.values()
        if m.type is MetricType.HISTOGRAM
        for suffix in ("_bucket", "_sum", "_count")
    }
    known = set(BY_NAME) | histograms | set(KSM_METRICS) | set(PROMETHEUS_METRICS) | recorded
    queries = _all_queries()
    assert len(queries) > 100
    unknown = {(w, n) for w, expr in queries for n in metric_names(expr) if n not in known}
    assert not unknown, sorted(unknown)


def test_the_exporter_selector_is_on_every_exporter_metric() -> None:
    """Like the mixins' CI script: no exporter series is read without the job selector."""
    for where, expr in _all_queries():
        if where == "runbooks.md":
            continue
        for name in re.findall(r"(?<!:)\b((?:nvidia_gpu|kube_gpu_exporter)_[a-z_]+)\b(?!:)", expr):
            if name in BY_NAME:
                assert re.search(rf'\b{name}\{{job="kube-gpu-exporter"', expr), (where, name)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (gpu) (rate(a_total{xid=~"1|b_c"}[$__rate_interval]))', {"a_total"}),
        ('label_replace(x{p!=""}, "uuid", "$1", "parent_uuid", "(.+)")', {"x"}),
        ("x offset 10m unless on (instance) group_left (model) y == bool 1", {"x", "y"}),
        ("sum_over_time(a:b:c[1h:1m]) / scalar(count_over_time(vector(1)[1h:1m]))", {"a:b:c"}),
        ('count({__name__="up", job="a"})', {"up"}),
        ('label_values(nvidia_gpu_info{job="a"}, instance)', {"nvidia_gpu_info"}),
        ("time() - ts > 1e3 and absent(up)", {"ts", "up"}),
        ("sum(x) without (gpu) * 2", {"x"}),
    ],
)
def test_metric_names_tokenizer(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


# --- the Go template subset ------------------------------------------------------------------


def test_humanize_like_prometheus() -> None:
    assert humanize(0) == "0"
    assert humanize(88) == "88"
    assert humanize(1234567) == "1.235M"
    assert humanize(0.0012) == "1.2m"
    assert humanize1024(2 * 2**30) == "2Gi"
    assert humanize1024(512) == "512"
    assert humanize_percentage(0.975) == "97.5%"
    assert humanize_duration(3725) == "1h 2m 5s"
    assert humanize_duration(90061) == "1d 1h 1m 1s"
    assert humanize_duration(42.5) == "42.5s"
    assert humanize_duration(0.25) == "250ms"


def test_templates() -> None:
    template = (
        "GPU {{ $labels.gpu }}{{ with $labels.pod }} of {{ . }}{{ end }}: "
        "{{ $value | humanizePercentage }}"
    )
    assert render(template, {"gpu": "1", "pod": "p"}, 0.5) == "GPU 1 of p: 50%"
    assert render(template, {"gpu": "1"}, 0.5) == "GPU 1: 50%"
    for alert in all_alerts(Config()):
        render(alert.description, {}, 1.0)  # only supported actions
