"""docs/troubleshooting.md cannot rot: every name it mentions exists.

Metric names (`nvidia_gpu_*`, `kube_gpu_exporter_*`) must be in the catalog, alert names in
the generated rules, recording rules among the generated records, exporter flags in the CLI's
parser and `deployment.*` keys in the thresholds file's model; every section names at least
one metric or alert; and every PromQL block parses (Debian's promtool, when installed).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import BY_NAME
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.rules.promql_names import metric_names
from kube_gpu_exporter.rules.settings.deployment import Deployment

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "troubleshooting.md"
RULES = REPO / "deploy" / "rules.yaml"

# Our metric names; not preceded or followed by `:` (those are recording rules).
METRIC = re.compile(r"(?<![\w:])((?:nvidia_gpu|kube_gpu_exporter)_[a-z0-9_]*[a-z0-9])(?![\w:])")
# Recording rules: level:metric:operations, on one of our metrics.
RECORD = re.compile(
    r"(?<![\w:])([a-z_]+:(?:nvidia_gpu|kube_gpu_exporter)_[a-z0-9_]+:[a-z0-9_]+)(?![\w:])"
)
# The generated alerts' names: CamelCase, starting with GPU or KubeGpuExporter.
ALERT = re.compile(r"\b((?:GPU|KubeGpuExporter)[A-Z][A-Za-z0-9]*)\b")
# Names of that shape that are not alerts: the Node condition `serve --health.node-conditions` sets.
NOT_ALERTS = {"GPUHealthy"}
# Exporter-style flags carry a dot (`--web.listen-address`); kubectl's and nvidia-smi's do not.
DOTTED_FLAG = re.compile(r"(?<![\w-])(--(?:no-)?[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9.-]*[a-z0-9])")
DEPLOYMENT_KEY = re.compile(r"\bdeployment\.([a-z_]+)\b")
# Series that queries in the doc read besides ours: Prometheus' own and kube-state-metrics v2.
FOREIGN_METRICS = {
    "up",
    "kube_pod_container_resource_requests",
    "kube_pod_status_unschedulable",
    "kube_node_status_capacity",
    "kube_node_spec_taint",
}


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rules() -> tuple[set[str], set[str]]:
    """(alert names, recording rule names) of the generated rules."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    return {r["alert"] for r in rules if "alert" in r}, {
        r["record"] for r in rules if "record" in r
    }


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _promql_queries(doc: str) -> list[str]:
    """The queries of the ```promql blocks; queries in one block are separated by blank lines."""
    queries = []
    for block in re.findall(r"```promql\n(.*?)```", doc, re.DOTALL):
        queries += [q.strip() for q in re.split(r"\n\s*\n", block) if q.strip()]
    return queries


def test_metric_names_are_in_the_catalog(doc: str) -> None:
    mentioned = set(METRIC.findall(doc))
    assert mentioned, "the doc names no metric"
    assert not mentioned - set(BY_NAME), f"not in exporter/catalog.py: {mentioned - set(BY_NAME)}"


def test_alert_names_are_generated(doc: str, rules: tuple[set[str], set[str]]) -> None:
    alerts, _ = rules
    mentioned = set(ALERT.findall(doc)) - NOT_ALERTS
    assert mentioned, "the doc names no alert"
    assert not mentioned - alerts, f"not in deploy/rules.yaml: {mentioned - alerts}"


def test_recording_rules_are_generated(doc: str, rules: tuple[set[str], set[str]]) -> None:
    _, records = rules
    mentioned = set(RECORD.findall(doc))
    assert not mentioned - records, f"not recorded in deploy/rules.yaml: {mentioned - records}"


def test_flags_exist_in_the_cli(doc: str) -> None:
    commands = _subcommands()
    every_flag = {flag for parser in commands.values() for flag in parser._option_string_actions}
    dotted = set(DOTTED_FLAG.findall(doc))
    assert dotted, "the doc names no exporter flag"
    assert not dotted - every_flag, f"not flags of kube-gpu-exporter: {dotted - every_flag}"
    # Every flag on a command line that runs kube-gpu-exporter belongs to that subcommand.
    for line in doc.splitlines():
        run = re.search(r"kube-gpu-exporter (serve|generate)\b(.*)", line)
        if run:
            flags = set(FLAG.findall(run.group(2)))
            known = set(commands[run.group(1)]._option_string_actions)
            assert not flags - known, f"{line!r}: not flags of {run.group(1)}: {flags - known}"


def test_thresholds_keys_exist(doc: str) -> None:
    keys = set(DEPLOYMENT_KEY.findall(doc))
    assert not keys - set(Deployment.model_fields), (
        f"not keys of `deployment` in the thresholds file: {keys - set(Deployment.model_fields)}"
    )


def test_every_section_is_tied_to_a_metric_or_an_alert(doc: str) -> None:
    sections = re.split(r"^#{2,3} ", doc, flags=re.MULTILINE)[1:]
    assert len(sections) >= 10
    for section in sections:
        title = section.splitlines()[0]
        assert METRIC.search(section) or ALERT.search(section), f"section {title!r}"


def test_the_classic_failures_are_covered(doc: str) -> None:
    for needed in (
        "Insufficient nvidia.com/gpu",
        "device plugin",
        "CUDA driver version is insufficient",
        "GPUMemoryLeaked",
        "Taints without tolerations",
        "kube_gpu_exporter_nvml_up",
        "kube_gpu_exporter_pod_resources_up",
        "kube_gpu_exporter_kubernetes_api_up",
        "kube_gpu_exporter_unmapped_device_ids",
        "GPULost",
        "GPUThermalThrottling",
    ):
        assert needed in doc, needed
    xids = set(re.findall(r"^\| (\d+) \|", doc, re.MULTILINE))
    for xid in ("13", "31", "43", "45", "48", "63", "64", "74", "79", "92", "94", "95", "119"):
        assert xid in xids, f"Xid {xid} missing from the Xid table"


def test_promql_reads_only_known_series(doc: str, rules: tuple[set[str], set[str]]) -> None:
    _, records = rules
    queries = _promql_queries(doc)
    assert len(queries) >= 15
    for query in queries:
        unknown = metric_names(query) - set(BY_NAME) - records - FOREIGN_METRICS
        assert not unknown, f"{query!r} reads unknown series {unknown}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's promtool is not installed")
def test_promql_parses(doc: str, tmp_path: Path) -> None:
    rules = [
        {"record": f"doc:troubleshooting_{i}:query", "expr": query}
        for i, query in enumerate(_promql_queries(doc))
    ]
    path = tmp_path / "doc-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "doc", "rules": rules}]}))
    proc = subprocess.run(
        ["promtool", "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_to_sections_resolve(doc: str) -> None:
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", doc, flags=re.MULTILINE)}
    links = set(re.findall(r"\]\(#([^)]+)\)", doc))
    assert links and not links - anchors, f"no such section: {links - anchors}"


def _conditions(expr: str) -> list[str]:
    """The top-level `and` / `unless` clauses of a generated alert expression: each on a line
    of its own at depth 0, as rules/ renders them."""
    clauses: list[list[str]] = []
    depth = 0
    for line in expr.splitlines():
        if depth == 0 and re.match(r"(and|unless)\b", line):
            clauses.append([line])
        elif clauses:
            clauses[-1].append(line)
        depth += line.count("(") - line.count(")")
    return ["\n".join(clause) for clause in clauses]


def _described_alerts(doc: str) -> list[tuple[str, str, str]]:
    """(section title, alert, section text) for each alert a section's **Alert.** or
    **Alerts.** paragraph defines (`Name: what it fires on`)."""
    found = []
    for section in re.split(r"^#{2,3} ", doc, flags=re.MULTILINE)[1:]:
        title = section.splitlines()[0]
        for paragraph in re.findall(r"\*\*Alerts?\.\*\*(.*?)\n\n", section, re.DOTALL):
            found += [
                (title, name, section) for name in re.findall(rf"{ALERT.pattern}:", paragraph)
            ]
    return found


def test_an_alert_is_described_with_every_condition_it_has(doc: str) -> None:
    """GPUMemoryLeaked's section once left out that the alert needs hostPID: a reader whose
    exporter ran without it waited for an alert that could not fire. Every metric a condition
    of the alert (`and …`, `unless …`) reads must be named where the alert is described."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    exprs = {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}
    described = _described_alerts(doc)
    assert {"GPUMemoryLeaked", "GPUNotAdvertised"} <= {name for _, name, _ in described}
    for title, name, section in described:
        for clause in _conditions(exprs[name]):
            unnamed = sorted(m for m in metric_names(clause) if m not in section)
            assert not unnamed, f"{title!r}: {name} also needs {unnamed} ({clause.split()[0]})"
