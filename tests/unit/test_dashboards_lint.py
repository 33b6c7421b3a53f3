"""The committed dashboards against the conventions dashboard-linter checks, re-implemented:
a datasource variable used by every query, `$__rate_interval` in every rate(), counters only
inside rate()/increase(), units, titles, stable unique uids, provisioning-ready JSON and
ConfigMaps the Grafana sidecar picks up."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import ALL_METRICS, MetricType
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.rules.config import Config, parse_config

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "deploy" / "dashboards"
UIDS = ("kube-gpu-cluster", "kube-gpu-node", "kube-gpu-workload")  # stable: links depend on them
COUNTERS = {m.name for m in ALL_METRICS if m.type is MetricType.COUNTER}
RATE = re.compile(r"\b(rate|irate|increase)\s*\(")
# A counter that appears at its first event, at 1, is read raw too where a query counts first
# events (rules/xid_query.py: born within the interval, or counted since it began): allowed
# in a query that compares it with itself an interval ago.
FIRST_EVENTS = re.compile(r"unless (\w+)\{[^}]*\} offset \$__rate_interval\b")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load(uid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / f"{uid}.json").read_text())
    return data


DASHBOARDS = {uid: load(uid) for uid in UIDS}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_the_committed_dashboards_are_exactly_these() -> None:
    assert sorted(p.name for p in FOLDER.glob("*.json")) == sorted(f"{u}.json" for u in UIDS)
    assert tuple(d.uid for d in build_all(Config())) == UIDS


@pytest.mark.parametrize("uid", UIDS)
def test_provisioning_ready(uid: str) -> None:
    dashboard = DASHBOARDS[uid]
    assert dashboard["uid"] == uid and len(uid) <= 40
    assert "__inputs" not in dashboard and "__requires" not in dashboard
    assert "id" not in dashboard, "a provisioned dashboard must not carry a database id"
    assert dashboard["title"] and dashboard["description"]
    assert dashboard["schemaVersion"] >= 36
    assert "${DS_" not in json.dumps(dashboard), "an __inputs placeholder is never resolved"


@pytest.mark.parametrize("uid", UIDS)
def test_datasource_variable_and_every_query_through_it(uid: str) -> None:
    dashboard = DASHBOARDS[uid]
    variables = dashboard["templating"]["list"]
    assert variables[0]["name"] == "datasource" and variables[0]["type"] == "datasource"
    assert variables[0]["query"] == "prometheus"
    for variable in variables:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


def test_variables() -> None:
    names = {uid: [v["name"] for v in d["templating"]["list"]] for uid, d in DASHBOARDS.items()}
    assert names["kube-gpu-cluster"] == ["datasource", "cluster"]
    assert names["kube-gpu-node"] == ["datasource", "cluster", "node", "gpu"]
    assert names["kube-gpu-workload"] == ["datasource", "cluster", "namespace", "pod"]


def test_a_cluster_label_turns_the_cluster_variable_on() -> None:
    cfg = parse_config("labels: {cluster: k8s_cluster}")
    for dashboard in build_all(cfg):
        variable = next(v for v in dashboard.variables if v.name == "cluster")
        assert variable.kind == "query" and "k8s_cluster" in variable.query
        for panel in dashboard.panels():
            for target in panel.targets:
                assert 'k8s_cluster="$cluster"' in target.expr, (dashboard.uid, panel.title)


def _ranges(expr: str) -> list[tuple[str, str]]:
    """(function, range) of every rate(), irate() and increase() call in `expr`."""
    out = []
    for match in RATE.finditer(expr):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        inner = expr[match.end() : i - 1]
        window = re.findall(r"\[([^\]]*)\]\s*$", inner)
        out.append((match.group(1), window[0] if window else ""))
    return out


@pytest.mark.parametrize("uid", UIDS)
def test_rate_interval_in_every_rate(uid: str) -> None:
    seen = 0
    for panel in panels(DASHBOARDS[uid]):
        for target in panel["targets"]:
            for function, window in _ranges(target["expr"]):
                assert window == "$__rate_interval", (panel["title"], function, window)
                seen += 1
    assert seen, "every dashboard has a counter panel"


@pytest.mark.parametrize("uid", UIDS)
def test_counters_only_inside_rate(uid: str) -> None:
    for panel in panels(DASHBOARDS[uid]):
        for target in panel["targets"]:
            first_events = set(FIRST_EVENTS.findall(target["expr"]))
            for counter in (COUNTERS - first_events) & set(re.findall(r"[a-z_:]+", target["expr"])):
                for use in re.finditer(rf"\b{counter}\b", target["expr"]):
                    before = target["expr"][: use.start()]
                    opened = [m.group(1) for m in RATE.finditer(before)]
                    assert opened, (panel["title"], counter, "counter used without rate()")


@pytest.mark.parametrize("uid", UIDS)
def test_units_titles_and_layout(uid: str) -> None:
    dashboard = DASHBOARDS[uid]
    titles = [p["title"] for p in panels(dashboard)]
    assert all(titles) and len(titles) == len(set(titles)), titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["fieldConfig"]["defaults"]["unit"], f"{panel['title']} has no unit"
            for target in panel["targets"]:
                assert target["refId"] and target["expr"].strip()


def test_panels_show_the_configured_thresholds() -> None:
    cfg = parse_config("alerts: {GPUTemperatureHigh: {threshold: 80}}")
    node = next(d for d in build_all(cfg) if d.uid == "kube-gpu-node")
    temperature = next(p for p in node.panels() if p.title == "Temperature")
    assert temperature.threshold_line and (80, "red") in temperature.steps


@pytest.mark.parametrize("uid", UIDS)
def test_one_configmap_per_dashboard_for_the_sidecar(uid: str) -> None:
    path = FOLDER / f"{uid}-configmap.yaml"
    assert path.stat().st_size < 256 * 1024, "over the client-side apply annotation limit"
    resource = yaml.safe_load(path.read_text())
    assert resource["apiVersion"] == "v1" and resource["kind"] == "ConfigMap"
    assert resource["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert resource["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert resource["data"] == {f"{uid}.json": (FOLDER / f"{uid}.json").read_text()}
