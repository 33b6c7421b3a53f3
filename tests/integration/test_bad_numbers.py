"""Numbers beyond reason in the inputs: each is one line and exit status 2 at start, never a
process that starts and then fails every cycle. The CLI runs in-process (inprocess_cli.py).

Every number of a scenario ends as a float sample, so each must be finite and within 2**53,
the largest whole number a float holds exactly; YAML reads `.inf`, `.nan` and 400-digit
integers without complaint, so the scenario's schema refuses them, whatever the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_cli import assert_one_line, offline_cli, run_cli

from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioError

HUGE = str(10**400)
NINES = "9" * 400


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli():
        yield


BAD_SCENARIOS = {
    "huge-int-bytes": (f"devices:\n  - memory_total_bytes: {HUGE}\n", "memory_total_bytes"),
    "huge-size-text": (f"devices:\n  - memory_total_bytes: {NINES}GiB\n", "memory_total_bytes"),
    "huge-reserved": (f"devices:\n  - memory_reserved_bytes: {2**60}\n", "memory_reserved_bytes"),
    "inf-power": ("devices:\n  - readings: {power_watts: .inf}\n", "power_watts"),
    "nan-temperature": ("devices:\n  - readings: {temperature_celsius: .nan}\n", "temperature"),
    "nan-utilization": ("devices:\n  - readings: {utilization: .nan}\n", "utilization"),
    "inf-keyframe": ("devices:\n  - timeline: [{at: .inf, lost: true}]\n", "timeline[0].at"),
    "huge-keyframe-text": (
        f"devices:\n  - timeline: [{{at: {NINES}h, lost: true}}]\n",
        "timeline[0].at",
    ),
    "float-beyond-2**53": ("devices:\n  - energy_joules: 1.0e+300\n", "energy_joules"),
    "inf-power-limit": ("devices:\n  - power_limit_watts: .inf\n", "power_limit_watts"),
    "huge-counter": (f"devices:\n  - readings: {{ecc_corrected: {HUGE}}}\n", "ecc_corrected"),
    "huge-xid": (f"devices:\n  - timeline: [{{at: 1, xid: [{HUGE}]}}]\n", "xid"),
    "huge-pid": (
        f"devices:\n  - processes: [{{pid: {HUGE}, used_memory_bytes: 1GiB}}]\n",
        "pid",
    ),
    "nan-sm-share": (
        "devices:\n  - processes: [{pid: 1, sm_utilization: .nan}]\n",
        "sm_utilization",
    ),
    "huge-instance-id": (
        f"devices:\n  - mig: [{{profile: 1g.10gb, gpu_instance_id: {HUGE}, "
        "memory_total_bytes: 10GiB}]\n",
        "gpu_instance_id",
    ),
    "huge-mig-memory": (
        f"devices:\n  - mig: [{{profile: 1g.10gb, gpu_instance_id: 1, "
        f"memory_total_bytes: {HUGE}}}]\n",
        "memory_total_bytes",
    ),
    "huge-replicas": (
        f"devices:\n  - {{}}\nkubelet:\n  replicas: {{0: {2**40}}}\n",
        "replicas",
    ),
}


@pytest.mark.parametrize(("text", "key"), BAD_SCENARIOS.values(), ids=BAD_SCENARIOS.keys())
def test_a_scenario_number_beyond_reason_is_one_line(tmp_path: Path, text: str, key: str) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text)
    line = assert_one_line(*run_cli(["serve", "--simulate", scenario]), str(scenario), key)
    assert len(line) < 300


def test_the_largest_numbers_allowed_play_every_second() -> None:
    """At the bounds a scenario still plays: every sample of its first hour is finite."""
    scenario = Scenario.parse(
        f"""
devices:
  - memory_total_bytes: {2**53}
    energy_joules: {float(2**53)}
    power_limit_watts: {float(2**53)}
    readings: {{power_watts: {float(2**53)}, ecc_corrected: {2**53}}}
    timeline:
      - {{at: 10, ramp: true, readings: {{power_watts: 0.0}}}}
      - {{at: {2**53}, ramp: true, readings: {{power_watts: {float(2**53)}}}}}
"""
    )
    for t in range(0, 3600, 7):
        node = node_sample(scenario.state_at(t))
        assert node.devices and not node.errors


def test_a_keyframe_at_infinity_is_refused_by_the_loader() -> None:
    with pytest.raises(ScenarioError, match=r"timeline\[0\]\.at"):
        Scenario.parse("devices:\n  - timeline: [{at: .inf, lost: true}]\n")
