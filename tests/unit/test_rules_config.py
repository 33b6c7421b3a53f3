"""The thresholds file: defaults, the example file, and errors that name the key and value."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from kube_gpu_exporter.exporter.generate import command as generate
from kube_gpu_exporter.rules.config import Config, ConfigError, load_config, parse_config
from kube_gpu_exporter.rules.settings.values import duration_seconds, selector_labels

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "rules" / "thresholds.example.yaml"
ERROR_LINE = re.compile(r"^kube-gpu-exporter: error: (?P<file>\S+): (?P<key>\S+): .+ \(got .+\)$")


def test_defaults_are_the_fields():
    cfg = Config()
    assert cfg.alerts.GPUAllocatedIdle.threshold == 0.1
    assert cfg.alerts.GPUAllocatedIdle.for_ == "15m"
    assert cfg.alerts.GPUMemoryNearFull.threshold == 0.95
    assert cfg.alerts.GPUTemperatureHigh.threshold == 85
    assert cfg.selectors.exporter == 'job="kube-gpu-exporter"'
    assert cfg.labels.node == "instance"
    assert cfg.prometheus_rule.labels == {"release": "kube-prometheus-stack"}
    assert 109 in cfg.alerts.GPUXidErrors.xids  # NVIDIA's Xid catalog: reset the GPU
    assert 94 in cfg.alerts.GPUXidApplicationErrors.xids  # the catalog: restart the application


def test_no_file_means_defaults():
    assert load_config(None) == Config()
    assert parse_config("") == Config()


def test_the_example_file_is_the_defaults():
    assert load_config(EXAMPLE) == Config()


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        annotation: Any = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += _keys(annotation, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def test_the_example_file_names_every_key():
    data = yaml.safe_load(EXAMPLE.read_text())
    for path in _keys(Config):
        node = data
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"{path} is not in {EXAMPLE.name}"
            node = node[part]


def test_overriding_one_key_keeps_the_alerts_other_defaults():
    cfg = parse_config("alerts: {GPUPowerBrake: {severity: critical}, GPULost: {for: 3m}}")
    assert (cfg.alerts.GPUPowerBrake.for_, cfg.alerts.GPUPowerBrake.severity) == ("1m", "critical")
    assert (cfg.alerts.GPULost.for_, cfg.alerts.GPULost.severity) == ("3m", "critical")


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(ValueError):
        cfg.alerts.GPULost.severity = "info"  # type: ignore[misc]


def test_sizes_and_durations():
    cfg = parse_config("alerts: {GPUMemoryLeaked: {threshold: 512MiB}}")
    assert cfg.alerts.GPUMemoryLeaked.threshold == 512 << 20
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("90s") == 90
    assert duration_seconds("0m") == 0


def test_selector_labels_for_generated_tests():
    assert selector_labels('job="a", env=~"prod|staging"') == {"job": "a", "env": "prod"}
    with pytest.raises(ValueError):
        selector_labels('job=~".*gpu.*"')


def _nested(key: str, value: str) -> str:
    """`a.b.c`, `v` → `a: {b: {c: v}}` (the YAML that sets one key)."""
    *parents, leaf = key.split(".")
    text = f"{leaf}: {value}"
    for parent in reversed(parents):
        text = f"{parent}: {{{text}}}"
    return text


# (key path, YAML value, the value as the error shows it)
BAD = [
    ("nonsense", "1", "1"),
    ("alerts.GPUIdle", "{}", "{}"),
    ("alerts.GPULost.color", "red", "'red'"),
    ("alerts.GPUMemoryNearFull.threshold", "1.5", "1.5"),
    ("alerts.GPUAllocatedIdle.threshold", "0", "0"),
    ("alerts.GPUAllocatedIdle.threshold", "-0.2", "-0.2"),
    ("alerts.GPUMemoryNearFull.threshold", "'0.5'", "'0.5'"),
    ("alerts.GPUAllocatedIdle.for", "-5m", "'-5m'"),
    ("alerts.GPUAllocatedIdle.for", "soon", "'soon'"),
    ("alerts.GPULost.severity", "page", "'page'"),
    ("alerts.GPULost.enabled", "'yes'", "'yes'"),
    ("alerts.GPUXidErrors.xids", "[79, 0]", "0"),
    ("alerts.GPUPodPendingTooLong.ignore_reasons", "[gated, quota]", "'quota'"),
    ("alerts.GPUPreemptionRate.reasons", "[preempted, oom]", "'oom'"),
    ("alerts.GPUTemperatureHigh.threshold", "400", "400"),
    ("alerts.KubeGpuExporterStale.threshold", "2 minutes", "'2 minutes'"),
    ("alerts.GPUMissing.window", "15m", "'15m'"),  # shorter than `for` (10m) + 10m
    ("selectors.exporter", "kube-gpu-exporter", "'kube-gpu-exporter'"),
    ("labels.node", "'node name'", "'node name'"),
    ("cost.gpu_hour", "-1", "-1"),
    ("cost.currency", "dollars", "'dollars'"),
    ("dashboards.efficiency_target", "70", "70"),
    ("prometheus_rule.namespace", "Monitoring", "'Monitoring'"),
    ("runbook_url", "docs/runbooks.md", "'docs/runbooks.md'"),
]


@pytest.mark.parametrize(("key", "yaml_value", "shown"), BAD)
def test_bad_thresholds_exit_2_with_one_line_naming_key_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, yaml_value: str, shown: str
) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text(_nested(key, yaml_value))
    if yaml_value.startswith("["):  # the list's second item is the bad one
        key += "[1]"
    args = _args(config=str(path), out=str(tmp_path / "out"), runbooks=str(tmp_path / "r.md"))
    assert generate.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    match = ERROR_LINE.match(err.rstrip("\n"))
    assert match, err
    assert (match["file"], match["key"]) == (str(path), key)
    assert err.rstrip("\n").endswith(f"(got {shown})"), err
    assert not (tmp_path / "out").exists(), "nothing is written for a bad config"


@pytest.mark.parametrize(
    ("text", "message"),
    [("alerts: [", "not valid YAML at line"), ("- a\n- b\n", "top level: must be a mapping")],
)
def test_unreadable_thresholds(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "t.yaml")


def _args(**kwargs: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    return parser.parse_args([f"--{k}={v}" for k, v in kwargs.items()])


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(config=str(tmp_path / "nope.yaml"), out=str(tmp_path / "out"))
    assert generate.run(args) == 2
    assert f"cannot read {tmp_path / 'nope.yaml'}: No such file" in capsys.readouterr().err


def test_descriptions_name_the_cluster_only_when_the_alert_has_it() -> None:
    """With the cluster as an external label (added after evaluation), an alert has no
    cluster label: its description must not read "in cluster  is at 81 °C"."""
    from kube_gpu_exporter.rules.alerts import all_alerts
    from kube_gpu_exporter.rules.templates import render

    cfg = parse_config("labels: {cluster: cluster, node: node}")
    labels = {"gpu": "0", "uuid": "GPU-0", "node": "node-a", "xid": "79", "namespace": "ml"}
    for alert in all_alerts(cfg):
        plain = render(alert.description, labels, 81.0)
        assert "in cluster" not in plain, (alert.name, plain)
        named = render(alert.description, labels | {"cluster": "eu-1"}, 81.0)
        if "$labels.cluster" in alert.description:
            assert "in cluster eu-1" in named, (alert.name, named)
