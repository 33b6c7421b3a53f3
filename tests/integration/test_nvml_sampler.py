"""The NVML sampler through the real pynvml, over the fake libnvidia-ml the session compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from fakenvml import write_state
from kube_gpu_exporter.exporter.nvml.gpm import MIN_SAMPLE_GAP_SECONDS
from kube_gpu_exporter.exporter.nvml.sampler import BACKOFF_START_SECONDS, NvmlSampler
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import READING_KEYS, Scenario
from kube_gpu_exporter.exporter.snapshot import DeviceSample, NodeSample
from support import wait_until

NODE = Scenario.parse(
    """
driver_version: "550.54.15"
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    energy_joules: 1234.567
    processes:
      - {pid: 4100, used_memory_bytes: 1GiB, sm_utilization: 0.5}
      - {pid: 4101, used_memory_bytes: 2GiB}
    readings: {utilization: 0.75, memory_bandwidth_utilization: 0.25, memory_used_bytes: 3GiB,
               temperature_celsius: 66, power_watts: 250.5, sm_clock_mhz: 1500,
               memory_clock_mhz: 2619, clock_events: [sw_power_cap, hw_slowdown],
               ecc_corrected: 4, ecc_uncorrected: 1}
    timeline:
      - {at: 10, lost: true}
      - {at: 20, lost: false, xid: [79, 13]}
  - uuid: GPU-22222222-0000-4000-8000-000000000000
    name: NVIDIA A100-SXM4-40GB
    memory_total_bytes: 40GiB
    mig:
      - {profile: 3g.20gb, gpu_instance_id: 1, uuid: MIG-33333333-0000-4000-8000-000000000000,
         memory_total_bytes: 19968MiB, readings: {memory_used_bytes: 12GiB}}
      - {profile: 1g.5gb, gpu_instance_id: 13, compute_instance_id: 0,
         uuid: MIG-44444444-0000-4000-8000-000000000000, memory_total_bytes: 4864MiB}
    processes:
      - {pid: 4200, used_memory_bytes: 512MiB, gpu_instance_id: 13, compute_instance_id: 0}
  - uuid: GPU-55555555-0000-4000-8000-000000000000
    unsupported: [power_watts, ecc, clock_events, memory_clock_mhz]
    readings: {temperature_celsius: 40}
"""
)


@pytest.fixture
def state_file(nvml_state: Path) -> Path:
    return nvml_state


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def second_cycle() -> NodeSample:
    """What the sampler reads in its second cycle, when GPM has two samples to compare and
    the NVLink count is known: what the simulated backend plays from the start."""
    sampler = NvmlSampler(watch_xids=False)
    try:
        sampler.sample()
        time.sleep(MIN_SAMPLE_GAP_SECONDS + 0.02)
        return sampler.sample()
    finally:
        sampler.close()


def by_uuid(node: NodeSample) -> dict[str, DeviceSample]:
    return {d.identity.uuid: d for d in node.devices}


def test_nvml_reads_what_the_simulated_backend_plays(state_file: Path) -> None:
    """Both backends of one scenario agree: whole GPUs, MIG instances, unsupported readings."""
    state = NODE.state_at(0)
    write_state(state_file, state)
    read = second_cycle()
    expected = node_sample(state)
    assert read.nvml_up and read.driver_version == "550.54.15"
    assert by_uuid(read) == by_uuid(expected)
    assert len(read.devices) == 5
    assert read.errors == {}


@pytest.mark.parametrize("key", READING_KEYS)
def test_each_unsupported_key_drops_the_same_readings_in_both_backends(
    state_file: Path, key: str
) -> None:
    """The readings table drives both: a key faults its NVML calls on the GPU and on its MIG
    instances, and every reading made by one of those calls goes, on the fake as simulated."""
    state = Scenario.parse(
        f"""
devices:
  - unsupported: [{key}]
    readings: {{clock_events: [gpu_idle]}}
    processes: [{{pid: 7, used_memory_bytes: 1GiB, sm_utilization: 0.5}}]
  - unsupported: [{key}]
    mig: [{{profile: 3g.20gb, gpu_instance_id: 1, memory_total_bytes: 20GiB}}]
    processes: [{{pid: 8, used_memory_bytes: 1GiB, gpu_instance_id: 1}}]
"""
    ).state_at(0)
    write_state(state_file, state)
    read = second_cycle()
    assert by_uuid(read) == by_uuid(node_sample(state))
    assert read.errors == {}


def test_units_and_labels_from_nvml(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0))
    sampler = NvmlSampler(watch_xids=False)
    try:
        devices = by_uuid(sampler.sample())
    finally:
        sampler.close()
    gpu = devices["GPU-11111111-0000-4000-8000-000000000000"]
    assert gpu.values["nvidia_gpu_power_watts"] == 250.5
    assert gpu.values["nvidia_gpu_energy_joules_total"] == 1234.567
    assert gpu.values["nvidia_gpu_sm_clock_hertz"] == 1.5e9
    assert gpu.clock_events == {"sw_power_cap", "hw_slowdown"}
    mig = devices["MIG-44444444-0000-4000-8000-000000000000"]
    assert mig.identity.mig_profile == "1g.5gb"
    assert mig.identity.parent_uuid == "GPU-22222222-0000-4000-8000-000000000000"
    assert (mig.identity.gpu_instance_id, mig.identity.index) == (13, 1)
    assert "nvidia_gpu_utilization_ratio" not in mig.values
    assert [(p.pid, p.used_memory_bytes, p.sm_utilization) for p in mig.processes or ()] == [
        (4200, 512 * 2**20, None)  # per-process utilization is not supported on MIG
    ]
    assert [(p.pid, p.sm_utilization) for p in gpu.processes or ()] == [(4100, 0.5), (4101, 0.0)]
    assert "nvidia_gpu_utilization_ratio" not in devices[mig.identity.parent_uuid].values
    unsupported = devices["GPU-55555555-0000-4000-8000-000000000000"]
    assert "nvidia_gpu_power_watts" not in unsupported.values
    assert "nvidia_gpu_ecc_corrected_errors_total" not in unsupported.values
    assert unsupported.clock_events is None
    # One NVML call reads both clocks: NOT_SUPPORTED on it drops both, and nothing else.
    assert "nvidia_gpu_sm_clock_hertz" not in unsupported.values
    assert unsupported.values["nvidia_gpu_temperature_celsius"] == 40


def test_gpu_lost_mid_run_marks_only_that_gpu_down_and_recovers(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0))
    sampler = NvmlSampler(watch_xids=False)
    try:
        assert all(d.up for d in sampler.sample().devices)
        write_state(state_file, NODE.state_at(10))
        during = sampler.sample()
        write_state(state_file, NODE.state_at(20))
        after = sampler.sample()
    finally:
        sampler.close()
    lost = by_uuid(during)["GPU-11111111-0000-4000-8000-000000000000"]
    assert not lost.up and lost.values == {}
    others = [d for d in during.devices if d is not lost]
    assert others and all(d.up for d in others)
    assert by_uuid(during)["MIG-33333333-0000-4000-8000-000000000000"].values
    assert during.errors == {"gpu_is_lost": 1}
    assert by_uuid(after)["GPU-11111111-0000-4000-8000-000000000000"].up


def test_transient_errors_drop_one_reading_and_are_counted(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0), errors={(0, "nvmlDeviceGetTemperature"): 999})
    sampler = NvmlSampler(watch_xids=False)
    try:
        node = sampler.sample()
    finally:
        sampler.close()
    gpu = by_uuid(node)["GPU-11111111-0000-4000-8000-000000000000"]
    assert gpu.up and "nvidia_gpu_temperature_celsius" not in gpu.values
    assert gpu.values["nvidia_gpu_power_watts"] == 250.5
    assert node.errors == {"unknown": 1}


SESSION_CODES = (
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
)


@pytest.mark.parametrize("code", SESSION_CODES)
def test_a_session_code_on_one_reading_of_one_gpu_keeps_the_node(
    state_file: Path, code: int
) -> None:
    """A session-level code from one function of one GPU, while NVML answers everything else,
    drops that reading only: the node stays up, every other device reports, and it counts."""
    write_state(state_file, NODE.state_at(0), errors={(0, "nvmlDeviceGetTemperature"): code})
    sampler = NvmlSampler(watch_xids=False)
    try:
        first, second = sampler.sample(), sampler.sample()
    finally:
        sampler.close()
    for node in (first, second):  # asked again next cycle, never re-initialised for it
        assert node.nvml_up and len(node.devices) == 5 and all(d.up for d in node.devices)
        gpu = by_uuid(node)["GPU-11111111-0000-4000-8000-000000000000"]
        assert "nvidia_gpu_temperature_celsius" not in gpu.values
        assert gpu.values["nvidia_gpu_power_watts"] == 250.5
        other = by_uuid(node)["GPU-55555555-0000-4000-8000-000000000000"]
        assert other.values["nvidia_gpu_temperature_celsius"] == 40
        assert node.errors == {"session": 1}


def test_driver_replaced_under_a_running_sampler_reinitialises(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0))
    sampler = NvmlSampler(watch_xids=False)
    try:
        assert sampler.sample().nvml_up
        # A driver upgrade without a reboot: every GPU answers LIB_RM_VERSION_MISMATCH.
        mismatch = {
            (index, "nvmlDeviceGetMemoryInfo_v2"): pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
            for index in range(3)
        }
        write_state(state_file, NODE.state_at(0), errors=mismatch)
        broken = sampler.sample()
        assert not broken.nvml_up and broken.devices == () and broken.errors == {"init": 1}
        write_state(state_file, NODE.state_at(0))
        assert sampler.sample().nvml_up
    finally:
        sampler.close()


def test_xid_events_are_counted_per_gpu_and_code(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0))
    sampler = NvmlSampler()
    try:
        sampler.sample()
        write_state(state_file, NODE.state_at(20))

        def counted() -> dict[int, int]:
            gpu = by_uuid(sampler.sample())["GPU-11111111-0000-4000-8000-000000000000"]
            return dict(gpu.xid_counts) if len(gpu.xid_counts) == 2 else {}

        assert wait_until(counted, timeout=10, what="two Xid events") == {79: 1, 13: 1}
    finally:
        sampler.close()


def test_no_driver_reports_down_backs_off_and_recovers(state_file: Path) -> None:
    clock = FakeClock()
    sampler = NvmlSampler(watch_xids=False, clock=clock)
    try:
        first = sampler.sample()  # no state file: the fake answers DRIVER_NOT_LOADED
        assert not first.nvml_up and first.devices == () and first.errors == {"init": 1}
        write_state(state_file, NODE.state_at(0))
        assert sampler.sample().errors == {}  # still backing off: no new attempt
        clock.now += BACKOFF_START_SECONDS
        recovered = sampler.sample()
        assert recovered.nvml_up and len(recovered.devices) == 5
    finally:
        sampler.close()


def test_init_errors_back_off_exponentially(state_file: Path) -> None:
    write_state(state_file, NODE.state_at(0), init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    clock = FakeClock()
    sampler = NvmlSampler(watch_xids=False, clock=clock)
    attempts = []
    for _ in range(40):
        attempts.append(sampler.sample().errors.get("init", 0))
        clock.now += 1
    sampler.close()
    # Attempts at t = 0, 1, 3, 7, 15, 31 (1 s doubling): 6 in 40 s, not 40.
    assert sum(attempts) == 6


OLD_DRIVER_PROBE = """
import json
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
sampler = NvmlSampler(watch_xids=False)
node = sampler.sample()
sampler.close()
gpu = node.devices[0]
print(json.dumps({"up": node.nvml_up, "values": dict(gpu.values),
                  "events": sorted(gpu.clock_events or []), "errors": dict(node.errors)}))
"""


def test_old_driver_without_v2_symbols_falls_back(fake_nvml_old_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_state(state, NODE.state_at(0))
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_old_dir), "FAKE_NVML_STATE": str(state)}
    result = subprocess.run(
        [sys.executable, "-c", OLD_DRIVER_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    read = json.loads(result.stdout)
    device = NODE.state_at(0).devices[0]
    assert read["up"] and read["errors"] == {}
    # v1 memory: `used` includes the driver-reserved memory, and reserved is not reported.
    assert read["values"]["nvidia_gpu_memory_used_bytes"] == (
        device.memory_used_bytes + device.memory_reserved_bytes
    )
    assert "nvidia_gpu_memory_reserved_bytes" not in read["values"]
    assert read["events"] == ["hw_slowdown", "sw_power_cap"]  # via the throttle-reasons call


def test_catalog_nvml_error_codes_are_pynvmls() -> None:
    """The catalog names NVML's return codes without loading NVML; they must be nvml.h's."""
    from kube_gpu_exporter.exporter.catalog.errors import NVML_ERROR_KINDS

    assert NVML_ERROR_KINDS == {
        pynvml.NVML_ERROR_GPU_IS_LOST: "gpu_is_lost",
        pynvml.NVML_ERROR_UNKNOWN: "unknown",
        pynvml.NVML_ERROR_TIMEOUT: "timeout",
        pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
        pynvml.NVML_ERROR_RESET_REQUIRED: "reset_required",
        pynvml.NVML_ERROR_UNINITIALIZED: "session",
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "session",
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "session",
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "session",
    }
