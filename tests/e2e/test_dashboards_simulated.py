"""Each dashboard says when its data comes from a simulated exporter.

`serve --simulate` serves invented readings under the real metric names; its
`kube_gpu_exporter_build_info` carries `simulated="true"` (a real node's carries "false", or
no such label before the label existed). Debian's Prometheus scrapes three fixed expositions
as the exporter's job: one simulated node, one real node saying "false", one real node without
the label, and again the two real ones alone as another job. Each committed dashboard's marker
(a stat in its first row) is run as Grafana would run it, its variables filled, and read the
way the panel draws it: the count of simulated nodes, red from 1, plain at 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.grafana.render import dashboard_json
from kube_gpu_exporter.rules.config import parse_config
from prometheus_server import Generation, Prometheus, run_prometheus
from support import serve_exposition

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "deploy" / "dashboards"
UIDS = ("kube-gpu-cluster", "kube-gpu-node", "kube-gpu-workload")
INFO = "kube_gpu_exporter_build_info"
SIMULATED = f'{INFO}{{version="1.0.0",simulated="true"}} 1\n'
REAL = f'{INFO}{{version="1.0.0",simulated="false"}} 1\n'
BEFORE_THE_LABEL = f'{INFO}{{version="0.9.0"}} 1\n'
REAL_ONLY_JOB = "real-only"


def committed(uid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / f"{uid}.json").read_text())
    return data


def real_only(uid: str) -> dict[str, Any]:
    """The same dashboard built for the job that scrapes the real nodes alone."""
    cfg = parse_config(f"selectors: {{exporter: 'job=\"{REAL_ONLY_JOB}\"'}}")
    dashboard = next(d for d in build_all(cfg) if d.uid == uid)
    data: dict[str, Any] = json.loads(dashboard_json(dashboard))
    return data


def marker(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The one panel reading build_info's simulated="true"."""
    found = [
        p
        for p in dashboard["panels"]
        for t in p.get("targets", [])
        if re.search(rf'\b{INFO}\{{[^}}]*simulated="true"', t["expr"])
    ]
    assert len(found) == 1, f'{dashboard["uid"]}: {len(found)} panels read simulated="true"'
    panel: dict[str, Any] = found[0]
    return panel


def fill(expr: str, node: str) -> str:
    values = {"node": node, "__range": "5m", "cluster": ".*"}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


def shown(panel: dict[str, Any], value: float) -> tuple[str, str]:
    """(text, colour) the stat draws for `value`: a value mapping first, else the number
    coloured by the last threshold step at or under it."""
    defaults = panel["fieldConfig"]["defaults"]
    for mapping in defaults.get("mappings", []):
        result = mapping["options"].get(f"{value:g}")
        if mapping["type"] == "value" and result:
            return result["text"], result["color"]
    colour = ""
    for step in defaults["thresholds"]["steps"]:
        if step["value"] is None or value >= step["value"]:
            colour = step["color"]
    return f"{value:g}", colour


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[tuple[Prometheus, str, str]]:
    tmp = tmp_path_factory.mktemp("simulated")
    with (
        serve_exposition(SIMULATED) as simulated,
        serve_exposition(REAL) as real,
        serve_exposition(BEFORE_THE_LABEL) as before,
    ):
        jobs = {REAL_ONLY_JOB: [real, before]}
        with run_prometheus(
            tmp, [simulated, real, before], extra_jobs=jobs, generation=generation
        ) as prom:
            prom.wait_for(f"{INFO}", count=5)
            yield prom, simulated, real


def value_of(prom: Prometheus, panel: dict[str, Any], node: str) -> float:
    (target,) = panel["targets"]
    result = prom.query(fill(target["expr"], node))
    assert len(result) == 1, result
    return float(result[0]["value"])


@pytest.mark.parametrize("uid", UIDS)
def test_the_marker_sits_in_the_first_row_and_reads_simulated_true(uid: str) -> None:
    dashboard = committed(uid)
    panel = marker(dashboard)
    rows = [p["gridPos"]["y"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows[0] < panel["gridPos"]["y"] < rows[1], "the marker is in the first row"
    assert panel["type"] == "stat" and panel["options"]["colorMode"] == "background"
    assert "serve --simulate" in panel["description"]


@pytest.mark.parametrize("uid", UIDS)
def test_a_simulated_node_turns_the_marker_red(
    prometheus: tuple[Prometheus, str, str], uid: str
) -> None:
    prom, simulated, _ = prometheus
    panel = marker(committed(uid))
    assert shown(panel, value_of(prom, panel, ".*")) == ("1", "red")
    assert shown(panel, value_of(prom, panel, simulated)) == ("1", "red")


@pytest.mark.parametrize("uid", UIDS)
def test_real_nodes_leave_the_marker_plain(
    prometheus: tuple[Prometheus, str, str], uid: str
) -> None:
    prom, _, _ = prometheus
    panel = marker(real_only(uid))
    text, colour = shown(panel, value_of(prom, panel, ".*"))
    assert colour != "red" and text == "none"


def test_the_node_dashboard_marks_only_the_simulated_node(
    prometheus: tuple[Prometheus, str, str],
) -> None:
    prom, simulated, real = prometheus
    panel = marker(committed("kube-gpu-node"))
    assert shown(panel, value_of(prom, panel, simulated)) == ("1", "red")
    assert shown(panel, value_of(prom, panel, real))[0] == "none"
