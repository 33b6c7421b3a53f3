"""The scenario format: validation messages, keyframes, ramps and derived counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioError

GIB = 1 << 30

TIMELINE = """
devices:
  - readings: {utilization: 0.2, memory_used_bytes: 10GiB, power_watts: 100}
    timeline:
      - {at: 60s, ramp: true, readings: {memory_used_bytes: 70GiB, power_watts: 300}}
      - {at: 90s, lost: true, xid: [79]}
      - {at: 2m, lost: false, xid: [48, 48], readings: {utilization: 0.9}}
"""


def test_keyframes_hold_and_ramps_interpolate() -> None:
    scenario = Scenario.parse(TIMELINE)
    at = {t: scenario.state_at(t).devices[0] for t in (0, 30, 60, 95, 130)}
    assert at[0].memory_used_bytes == 10 * GIB
    assert at[30].memory_used_bytes == 40 * GIB  # halfway up the ramp
    assert at[60].memory_used_bytes == 70 * GIB
    assert at[130].memory_used_bytes == 70 * GIB  # held after the last keyframe
    assert at[30].utilization == 0.2 and at[130].utilization == 0.9
    assert (at[60].lost, at[95].lost, at[130].lost) == (False, True, False)
    assert at[95].xids == (79,) and at[130].xids == (79, 48, 48)


def test_energy_is_the_integral_of_power_and_never_decreases() -> None:
    scenario = Scenario.parse(TIMELINE)
    energies = [scenario.state_at(t).devices[0].energy_joules for t in range(0, 200, 5)]
    assert energies == sorted(energies)
    # 0–60 s ramps 100 → 300 W (mean 200 W), then 300 W: 12 kJ + 300 W × 40 s.
    assert scenario.state_at(100).devices[0].energy_joules == pytest.approx(12_000 + 12_000)


def test_mig_instances_get_distinct_uuids_and_defaults() -> None:
    scenario = Scenario.parse(
        """
devices:
  - mig:
      - {profile: 3g.40gb, gpu_instance_id: 1, memory_total_bytes: 40GiB}
      - {profile: 1g.10gb, gpu_instance_id: 9, memory_total_bytes: 10GiB,
         readings: {memory_used_bytes: 2GiB}}
"""
    )
    device = scenario.state_at(0).devices[0]
    assert [m.profile for m in device.mig] == ["3g.40gb", "1g.10gb"]
    assert len({m.uuid for m in device.mig} | {device.uuid}) == 3
    assert all(m.uuid.startswith("MIG-") for m in device.mig)
    assert device.mig[1].memory_used_bytes == 2 * GIB


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("devices: []", "devices: List should have at least 1 item"),
        ("devices: [{readings: {utilization: 1.5}}]", "devices[0].readings.utilization"),
        ("devices: [{colour: red}]", "devices[0].colour: unknown key"),
        ("devices: [{memory_total_bytes: 12XB}]", "not a size: '12XB'"),
        ("devices: [{timeline: [{at: soon}]}]", "not a duration: 'soon'"),
        ("devices: [{readings: {clock_events: [too_hot]}}]", "clock_events[0]"),
        ("devices: [{mig: [{profile: 1g.10gb}]}]", "gpu_instance_id: required key is missing"),
        ("devices: [{readings: {sm_active: 1.2}}]", "devices[0].readings.sm_active"),
        ("devices: [{unsupported: [sm_activity]}]", "devices[0].unsupported[0]"),
        ("devices: [{nvlink_links: 19}]", "devices[0].nvlink_links"),
        ("devices: [{minor: -1}]", "devices[0].minor"),
        ("devices: [{minor: 1}, {}]", "two GPUs have the same minor number ([1, 1])"),
        ("devices: [\n", "not valid YAML at line"),
        ("- just a list", "top level"),
    ],
)
def test_invalid_scenarios_name_the_key_and_value(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        Scenario.parse(text, "node.yaml")
    assert str(caught.value).startswith("node.yaml: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"cannot read scenario .*No such file"):
        Scenario.load(tmp_path / "absent.yaml")


def test_bundled_demo_scenario_is_valid() -> None:
    from pathlib import Path

    demo = Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml"
    scenario = Scenario.load(demo)
    state = scenario.state_at(0)
    assert len(state.devices) == 5 and len(state.devices[3].mig) == 3
    assert len(scenario.spec.kubelet.pods) == 8 and scenario.spec.kubelet.replicas == {4: 4}


def test_clock_event_durations_count_the_time_the_reason_was_active() -> None:
    scenario = Scenario.parse(
        """
devices:
  - readings: {hw_power_brake_slowdown_seconds: 5}
    timeline:
      - {at: 10s, readings: {clock_events: [sw_thermal_slowdown, hw_power_brake_slowdown]}}
      - {at: 40s, readings: {clock_events: [gpu_idle]}}
"""
    )
    at = {t: scenario.state_at(t).devices[0] for t in (5, 25, 100)}
    assert at[5].sw_thermal_slowdown_seconds == 0
    assert at[25].sw_thermal_slowdown_seconds == 15
    assert at[100].sw_thermal_slowdown_seconds == 30  # held down from 10 s to 40 s
    assert at[100].hw_power_brake_slowdown_seconds == 35  # its own 5 s, plus the 30
    assert at[100].hw_thermal_slowdown_seconds == 0


def test_gpm_values_are_per_gpu_and_per_mig_instance() -> None:
    state = Scenario.parse(
        """
devices:
  - readings: {sm_active: 0.5}
    mig:
      - {profile: 3g.40gb, gpu_instance_id: 2, memory_total_bytes: 40GiB,
         readings: {sm_active: 0.25}, timeline: [{at: 10s, readings: {sm_active: 0.75}}]}
"""
    ).state_at(20)
    device = state.devices[0]
    assert device.sm_active == 0.5
    assert device.mig[0].sm_active == 0.75
