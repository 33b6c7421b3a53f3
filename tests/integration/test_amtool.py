"""The routing example and the generated inhibit rules, held to amtool of both generations
(Debian's Alertmanager 0.25 and the current one built by `make prom-bin`): the configuration
they make passes `amtool check-config`, and `amtool config routes test` sends each kind of
alert the generated rules raise to the receiver the example's comments promise."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from prometheus_server import Generation

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "alertmanager-routing.yaml"
INHIBIT = REPO / "deploy" / "alertmanager-inhibit-rules.yaml"

# (labels of an alert, the receiver it must reach)
ROUTES = [
    ({"alertname": "GPUTemperatureHigh", "severity": "warning", "uuid": "GPU-1"}, "gpu-platform"),
    ({"alertname": "GPULost", "severity": "critical", "uuid": "GPU-1"}, "gpu-platform-pager"),
    (
        {"alertname": "GPUXidErrors", "severity": "critical", "team": "hardware"},
        "hardware-pager",
    ),
    (
        {"alertname": "GPUPcieReplayErrors", "severity": "warning", "team": "hardware"},
        "hardware-tickets",
    ),
    (
        {"alertname": "GPUAllocatedIdle", "severity": "warning", "namespace": "lab"},
        "workload-owners",
    ),
    (
        {"alertname": "GPUMemoryNearFull", "severity": "critical", "namespace": "ml"},
        "gpu-platform-pager",
    ),
]


def example_config() -> dict[str, Any]:
    """The example's routing with the generated inhibit rules, as a user assembles them."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    config["inhibit_rules"] = yaml.safe_load(INHIBIT.read_text())["inhibit_rules"]
    return config


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(example_config(), sort_keys=False))
    return path


def amtool(gen: Generation, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gen.amtool, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_check_config_accepts_the_example_and_the_inhibit_rules(
    config_file: Path, generation: Generation
) -> None:
    result = amtool(generation, "check-config", str(config_file))
    assert result.returncode == 0, result.stdout + result.stderr
    inhibit_rules = len(example_config()["inhibit_rules"])
    assert f"{inhibit_rules} inhibit rules" in result.stdout
    assert "5 receivers" in result.stdout


@pytest.mark.parametrize(("labels", "receiver"), ROUTES, ids=[r for _, r in ROUTES])
def test_routes_send_each_alert_to_its_receiver(
    config_file: Path, generation: Generation, labels: dict[str, str], receiver: str
) -> None:
    pairs = [f"{k}={v}" for k, v in labels.items()]
    result = amtool(
        generation,
        "config",
        "routes",
        "test",
        f"--config.file={config_file}",
        f"--verify.receivers={receiver}",
        *pairs,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_routes_test_notices_a_wrong_receiver(config_file: Path, generation: Generation) -> None:
    """The check above has teeth: amtool fails when the receiver is not the one expected."""
    result = amtool(
        generation,
        "config",
        "routes",
        "test",
        f"--config.file={config_file}",
        "--verify.receivers=gpu-platform",
        "severity=critical",
        "alertname=GPULost",
    )
    assert result.returncode != 0
