"""The demo's node lists every process on every device, all through its story.

The story has no hidden process: where NVML's list fell short of a device's memory or activity
(a fine-tuning job whose device memory climbed while its process's stayed put, MIG instances
holding memory with nobody listed), the demo served no process count and no shared-GPU split,
and its MIG instances lost their only activity signal. Process keyframes ramp as readings do,
so a process's memory can climb with its device's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.attribution.attribute import lists_every_process
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario

DEMO = Path(__file__).parents[2] / "exporter" / "simulated" / "scenarios" / "demo.yaml"
GIB = 1 << 30

# Every 5 s of the story (it is told by 4:30) and the seconds around its keyframes.
MOMENTS = sorted({*range(0, 300, 5), 29, 31, 59, 61, 62, 239, 241})


@pytest.mark.parametrize("t", MOMENTS)
def test_every_demo_device_lists_all_its_processes(t: float) -> None:
    sample = node_sample(Scenario.load(DEMO).state_at(t))
    partial = [d.identity.uuid for d in sample.devices if not lists_every_process(d)]
    assert partial == []


def test_demo_processes_hold_the_devices_memory() -> None:
    """GPU 2's process climbs with its device towards out-of-memory; the MIG instances' memory
    is their processes'."""
    scenario = Scenario.load(DEMO)
    for t in (0, 30, 60, 130):
        gpu = scenario.state_at(t).devices[2]
        assert sum(p.used_memory_bytes for p in gpu.processes) == gpu.memory_used_bytes
    assert scenario.state_at(130).devices[2].memory_used_bytes == 78 * GIB
    mig = scenario.state_at(130).devices[3]
    held = {m.gpu_instance_id: m.memory_used_bytes for m in mig.mig}
    listed = {p.gpu_instance_id: p.used_memory_bytes for p in mig.processes}
    assert listed == {gi: used for gi, used in held.items() if used}


RAMP = """
devices:
  - readings: {utilization: 0.5, memory_used_bytes: 10GiB}
    processes: [{pid: 7, used_memory_bytes: 10GiB, sm_utilization: 0.5},
                {pid: 8, used_memory_bytes: 1GiB}]
    timeline:
      - {at: 60s, ramp: true, readings: {memory_used_bytes: 70GiB, utilization: 0.9},
         processes: [{pid: 7, used_memory_bytes: 70GiB, sm_utilization: 0.9}, {pid: 9}]}
      - {at: 90s, processes: [{pid: 7, used_memory_bytes: 5GiB, sm_utilization: 0.1}]}
"""


def test_process_keyframes_ramp_like_readings() -> None:
    """A process in both lists moves linearly, as the device's readings do; one only in the
    earlier list stays until the keyframe, one only in the later list starts at it."""
    scenario = Scenario.parse(RAMP)

    def processes(t: float) -> dict[int, tuple[int, float]]:
        listed = scenario.state_at(t).devices[0].processes
        return {p.pid: (p.used_memory_bytes, p.sm_utilization) for p in listed}

    assert processes(0) == {7: (10 * GIB, 0.5), 8: (GIB, 0.0)}
    assert processes(30) == {7: (40 * GIB, pytest.approx(0.7)), 8: (GIB, 0.0)}
    assert processes(30)[7][0] == scenario.state_at(30).devices[0].memory_used_bytes
    assert processes(60) == {7: (70 * GIB, 0.9), 9: (0, 0.0)}
    assert processes(75) == {7: (70 * GIB, 0.9), 9: (0, 0.0)}  # no ramp into 90 s: held
    assert processes(90) == {7: (5 * GIB, 0.1)}
