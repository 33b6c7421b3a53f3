"""The files `generate` writes, rendered in memory, and how they compare with the disk.

The outputs are a pure function of the config, so `--check` is a byte comparison and a second
run writes identical files.
"""

from __future__ import annotations

from pathlib import Path

from kube_gpu_exporter.exporter.generate.manifests import (
    KUSTOMIZATION,
    kustomization,
    manifest_files,
)
from kube_gpu_exporter.exporter.generate.node_health_manifests import node_health_files
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.grafana.render import configmap, dashboard_json
from kube_gpu_exporter.rules.alerts import alert_groups
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.inhibitions import inhibit_rules
from kube_gpu_exporter.rules.promtool_tests import tests_file
from kube_gpu_exporter.rules.recording import recording_groups
from kube_gpu_exporter.rules.render import HEADER, dump_yaml, prometheus_rule, rules_file
from kube_gpu_exporter.rules.runbooks import runbooks_markdown

RULES_FILE = "rules.yaml"
INHIBIT_RULES = "alertmanager-inhibit-rules.yaml"
PROMETHEUS_RULE = "prometheus-rule.yaml"
DASHBOARDS_DIR = "dashboards"


def render_outputs(cfg: Config) -> dict[str, str]:
    """Every file under the output folder, by relative path, in a stable order."""
    groups = (*recording_groups(cfg), *alert_groups(cfg))
    manifests = manifest_files(cfg)
    out = {
        **manifests,
        PROMETHEUS_RULE: prometheus_rule(cfg, groups),
        RULES_FILE: rules_file(cfg, groups),
        "rules-test.yaml": tests_file(cfg, groups, RULES_FILE),
        # The inhibit_rules section for an Alertmanager configuration (not a Kubernetes object).
        INHIBIT_RULES: HEADER + dump_yaml({"inhibit_rules": inhibit_rules(cfg)}),
    }
    resources = [*manifests, PROMETHEUS_RULE]
    for dashboard in build_all(cfg):
        out[f"{DASHBOARDS_DIR}/{dashboard.uid}.json"] = dashboard_json(dashboard)
        name = f"{DASHBOARDS_DIR}/{dashboard.uid}-configmap.yaml"
        out[name] = configmap(cfg, dashboard)
        resources.append(name)
    # Everything that is a Kubernetes object; rules.yaml and rules-test.yaml are for promtool,
    # the inhibit rules for Alertmanager.
    out[KUSTOMIZATION] = kustomization(resources)
    return out


def planned_files(cfg: Config, out_dir: Path, runbooks: Path) -> dict[Path, str]:
    files = {out_dir / name: text for name, text in render_outputs(cfg).items()}
    # An opt-in kustomize Component beside them, which deploy/'s kustomization does not list
    files |= {out_dir / name: text for name, text in node_health_files(cfg).items()}
    files[runbooks] = runbooks_markdown(cfg)
    return files


def stale_files(out_dir: Path, planned: dict[Path, str]) -> list[Path]:
    """Generated-looking files in the dashboards folder that this config no longer makes."""
    folder = out_dir / DASHBOARDS_DIR
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".json", ".yaml") and p.is_file() and p not in planned
    )


def check(planned: dict[Path, str], out_dir: Path) -> list[str]:
    """What differs between the planned output and the files on disk, one line each."""
    problems = []
    for path, text in planned.items():
        if not path.is_file():
            problems.append(f"missing: {path}")
        elif path.read_bytes() != text.encode():
            problems.append(f"differs: {path}")
    problems += [f"not generated: {p}" for p in stale_files(out_dir, planned)]
    return problems


def write(planned: dict[Path, str], out_dir: Path) -> None:
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
    for path in stale_files(out_dir, planned):
        path.unlink()
