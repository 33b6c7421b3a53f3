"""The generated rules checked by promtool of both generations (Debian's 2.42 and the built 3.x,
the `generation` fixture): the committed deploy/ and the output of other configurations
(multi-cluster, regex selector, no `for`, odd thresholds). The same tests pass on both: where
Prometheus 3 reads a rule differently, the rule or its case input changed, not the expectation."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.exporter.generate.command import main as generate
from prometheus_server import Generation

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

MULTI_CLUSTER = """
selectors: {exporter: 'job=~"gpu-exporter|kube-gpu-exporter", env="prod"'}
labels: {node: node, cluster: cluster}
alert_labels: {team: gpu-platform, page: "no"}
cost: {gpu_hour: 3.1, currency: CHF}
alerts:
  GPUAllocatedIdle: {threshold: 0.25, for: 1h30m}
  GPUMemoryNearFull:
    {threshold: 0.5, for: 0m, severity: critical, preallocating: 'namespace=~"serving|jax"'}
  GPUMemoryFillingUp: {window: 30m, horizon: 2h, for: 20m}
  GPUMissing: {window: 2h, for: 5m}
  GPUTemperatureHigh: {threshold: 90.5, for: 90s}
  GPUXidErrors: {window: 1h, for: 5m, xids: [79], labels: {page: "yes", team: hardware}}
  GPUXidApplicationErrors: {window: 2m, for: 5m}
  GPUEccUncorrectable: {window: 3m, for: 2m}
  GPUMemoryLeaked: {threshold: 0}
  KubeGpuExporterStale: {threshold: 45s, for: 0m}
  GPUDriverVersionMismatch: {for: 0m}
  GPULost: {enabled: false}
"""
NO_FOR = """
alerts:
  GPUAllocatedIdle: {for: 0m, threshold: 0.33, window: 20m, keep_firing_for: 0s}
  GPUMemoryFillingUp: {for: 0m, horizon: 30m}
  GPUThermalThrottling: {for: 0m}
  GPUHardwareSlowdown: {for: 0s}
  GPUPowerBrake: {for: 0s}
  GPULost: {for: 0m}
  GPUNotAdvertised: {for: 0m}
  GPUPartiallyAdvertised: {for: 0m}
  KubeGpuExporterDown: {for: 0m}
  KubeGpuExporterAbsent: {for: 0m}
  KubeGpuExporterNvmlDown: {for: 0m}
  KubeGpuExporterPodResourcesDown: {for: 0m}
  GPUMemoryLeaked: {for: 0m, threshold: 3GiB}
  KubeGpuExporterStale: {threshold: 1h, for: 10m}
"""


# promtool 2.42 takes ~15 s of CPU over deploy/'s tests alone; among make test's six workers
# on two cores it once passed 120 s. A hang is still caught, well before pytest-timeout's 600.
PROMTOOL_SECONDS = 400


def promtool(gen: Generation, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gen.promtool, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_SECONDS,
        check=False,
    )


def test_promtool_checks_the_committed_rules(generation: Generation) -> None:
    result = promtool(generation, "check", "rules", "rules.yaml", cwd=DEPLOY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_tests_pass_on_the_committed_rules(generation: Generation) -> None:
    result = promtool(generation, "test", "rules", "rules-test.yaml", cwd=DEPLOY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_rules_that_miss_their_tests(
    tmp_path: Path, generation: Generation
) -> None:
    """The tests have teeth: loosen one threshold and promtool fails."""
    shutil.copy(DEPLOY / "rules-test.yaml", tmp_path)
    rules = (DEPLOY / "rules.yaml").read_text()
    assert "> 0.95" in rules
    (tmp_path / "rules.yaml").write_text(rules.replace("> 0.95", "> 0.99"))
    result = promtool(generation, "test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "GPUMemoryNearFull" in result.stdout + result.stderr


def test_routing_labels_reach_every_alert_and_an_alert_overrides_them(tmp_path: Path) -> None:
    """The promtool run of the multi-cluster config checks each firing alert's labels; here,
    that they are in the rules at all, with the per-alert value winning."""
    (tmp_path / "thresholds.yaml").write_text(MULTI_CLUSTER)
    out = tmp_path / "deploy"
    args = ["--config", str(tmp_path / "thresholds.yaml"), "--out", str(out)]
    assert generate([*args, "--runbooks", str(tmp_path / "runbooks.md")]) == 0
    rules = [
        r for g in yaml.safe_load((out / "rules.yaml").read_text())["groups"] for r in g["rules"]
    ]
    labels = {r["alert"]: r["labels"] for r in rules if "alert" in r}
    assert labels["GPUXidErrors"] == {"severity": "critical", "page": "yes", "team": "hardware"}
    assert labels["GPUTemperatureHigh"] == {
        "severity": "warning",
        "page": "no",
        "team": "gpu-platform",
    }
    assert all(v.get("team") for v in labels.values())


@pytest.mark.parametrize("config", [MULTI_CLUSTER, NO_FOR], ids=["multi-cluster", "no-for"])
def test_promtool_on_other_configurations(
    tmp_path: Path, config: str, generation: Generation
) -> None:
    (tmp_path / "thresholds.yaml").write_text(config)
    out = tmp_path / "deploy"
    args = ["--config", str(tmp_path / "thresholds.yaml"), "--out", str(out)]
    assert generate([*args, "--runbooks", str(tmp_path / "runbooks.md")]) == 0
    check = promtool(generation, "check", "rules", "rules.yaml", cwd=out)
    assert check.returncode == 0, check.stdout + check.stderr
    test = promtool(generation, "test", "rules", "rules-test.yaml", cwd=out)
    assert test.returncode == 0, test.stdout + test.stderr


def _alert_names(rules: dict[str, Any]) -> set[str]:
    return {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_is_tested_firing_and_not_firing():
    rules = yaml.safe_load((DEPLOY / "rules.yaml").read_text())
    tests = yaml.safe_load((DEPLOY / "rules-test.yaml").read_text())
    assert tests["rule_files"] == ["rules.yaml"]
    firing: set[str] = set()
    silent: set[str] = set()
    for group in tests["tests"]:
        assert group["interval"] == "1m", "promtool 2.42 loads every sample at t=0 without it"
        assert not set(group) & {"labels", "query_offset"}, "not parsed by promtool 2.42"
        for check in group.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = _alert_names(rules)
    assert firing == alerts
    assert silent == alerts


def test_recording_rules_are_tested():
    tests = yaml.safe_load((DEPLOY / "rules-test.yaml").read_text())
    exprs = {t["expr"] for g in tests["tests"] for t in g.get("promql_expr_test", [])}
    assert {
        "namespace:nvidia_gpu_allocated_gpus:sum",
        "namespace:nvidia_gpu_idle_gpus:sum",
        "namespace:nvidia_gpu_idle_gpu_hours:sum1h",
        "cluster:nvidia_gpu_idle_cost:sum1h",
    } <= exprs
