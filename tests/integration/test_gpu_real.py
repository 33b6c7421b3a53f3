"""On a real NVIDIA driver (the device machine): the sampler and the served metrics.

Deselected in CI (`-m "not gpu"`); run with `make test-gpu` where a GPU is present.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.snapshot import DeviceSample, NodeSample
from support import run_exporter, values

pytestmark = pytest.mark.gpu


def test_sampler_reads_every_real_gpu() -> None:
    sampler = NvmlSampler(watch_xids=False)
    try:
        node = sampler.sample()
        again = sampler.sample()
    finally:
        sampler.close()
    assert node.nvml_up, "NVML did not initialise on this machine"
    gpus = [d for d in node.devices if not d.identity.is_mig]
    assert gpus, "no GPU found"
    for device in node.devices:
        ident, v = device.identity, device.values
        print(f"{ident.uuid} {ident.model!r} {ident.mig_profile} up={device.up} {dict(v)}")
        assert device.up
        assert ident.uuid.startswith(("GPU-", "MIG-"))
        assert v["nvidia_gpu_memory_total_bytes"] > 0
        assert 0 <= v["nvidia_gpu_memory_used_bytes"] <= v["nvidia_gpu_memory_total_bytes"]
    for gpu in gpus:
        v = gpu.values
        assert 0 < v["nvidia_gpu_temperature_celsius"] < 120
        assert 0 < v["nvidia_gpu_power_watts"] <= v["nvidia_gpu_power_limit_watts"] * 1.5
        assert v["nvidia_gpu_sm_clock_hertz"] > 1e6
        assert gpu.clock_events is not None
        energy_now = {
            d.identity.uuid: d.values.get("nvidia_gpu_energy_joules_total") for d in again.devices
        }
        assert energy_now[gpu.identity.uuid] >= v["nvidia_gpu_energy_joules_total"]
    print("errors:", dict(node.errors), "driver:", node.driver_version)
    assert node.errors == {}


def test_exporter_serves_real_gpus(tmp_path: Path) -> None:
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    with run_exporter(["--collector.interval=1s"], tmp_path) as exporter:
        parsed = exporter.metrics()
        log = exporter.log()
    print(log)
    assert len([v for v in values(parsed, "nvidia_gpu_up") if v == 1]) >= count
    assert values(parsed, "kube_gpu_exporter_nvml_up") == [1]
    assert len(values(parsed, "nvidia_gpu_temperature_celsius")) == count
    assert "Traceback" not in log


# --- GPM, field values and process visibility on a real GPU ---------------------------------

LOAD = """
import sys, time
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a @ b
    torch.cuda.synchronize()
"""


@pytest.fixture
def matmul_load() -> Iterator[int]:
    """A bf16 matrix-product loop on GPU 0 for 20 s (torch is on the device machines)."""
    proc = subprocess.Popen([sys.executable, "-c", LOAD, "20"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _gpus(node: NodeSample) -> list[DeviceSample]:
    return [d for d in node.devices if not d.identity.is_mig]


def test_gpm_activity_of_a_matrix_product(matmul_load: int) -> None:
    """GPM needs two samples: nothing in the first cycle, the load's activity in the second."""
    time.sleep(2.0)  # past cuBLAS's start-up: a steady stream of products
    sampler = NvmlSampler(watch_xids=False)
    try:
        first = sampler.sample()
        time.sleep(1.0)
        second = sampler.sample()
    finally:
        sampler.close()
    gpu = _gpus(second)[0]
    print({k: round(v, 3) for k, v in gpu.values.items() if "active" in k or "occupancy" in k})
    assert c.SM_ACTIVE.name not in _gpus(first)[0].values
    # A warm H100 read 0.96 / 0.93 / 0.90; a window catching start-up 0.62 / 0.52 / 0.51.
    assert gpu.values[c.GRAPHICS_ACTIVE.name] > 0.6
    assert gpu.values[c.SM_ACTIVE.name] > 0.5
    assert gpu.values[c.TENSOR_ACTIVE.name] > 0.4  # bf16 products run on the tensor cores
    assert 0 <= gpu.values[c.DRAM_ACTIVE.name] <= 1
    assert gpu.values[c.PCIE_RECEIVE_RATE.name] >= 0
    assert second.errors == {}


def test_field_values_of_a_real_gpu() -> None:
    sampler = NvmlSampler(watch_xids=False)
    try:
        first = _gpus(sampler.sample())[0]
        time.sleep(0.5)
        second = _gpus(sampler.sample())[0]
    finally:
        sampler.close()
    print(dict(second.values), dict(second.labelled))
    for counter in (c.PCIE_TRANSMIT_BYTES, c.PCIE_RECEIVE_BYTES):
        assert second.values[counter.name] >= first.values[counter.name] > 0
    assert 10 < second.values[c.MEMORY_TEMPERATURE.name] < 110
    assert second.values[c.PCIE_REPLAYS.name] >= 0
    assert second.values[c.POWER_MANAGEMENT_LIMIT.name] >= second.values[c.POWER_LIMIT.name] * 0.5
    assert second.values[c.RECOVERY_ACTION.name] == 0
    durations = {k[1] for k in second.labelled if k[0] == c.CLOCK_EVENT_DURATION.name}
    assert durations == {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
    assert 0 <= second.values[c.ENCODER_UTILIZATION.name] <= 1


PROCESS_COUNT = """
import pynvml
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
node = NvmlSampler(watch_xids=False).sample()
gpu = [d for d in node.devices if not d.identity.is_mig][0]
listed = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
print(node.host_pid_namespace, len(listed), gpu.processes is None,
      gpu.values["nvidia_gpu_memory_used_bytes"])
"""


def test_nvml_lists_processes_only_of_the_callers_pid_namespace(matmul_load: int) -> None:
    """What decides whether the leak alert is safe without hostPID (docs/metrics.md)."""
    sampler = NvmlSampler(watch_xids=False)
    try:
        node = sampler.sample()
    finally:
        sampler.close()
    assert node.host_pid_namespace is True
    pids = [p.pid for p in _gpus(node)[0].processes or ()]
    assert matmul_load in pids
    own_namespace = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PROCESS_COUNT],
        capture_output=True,
        text=True,
        check=True,
    )
    host_pid, processes, unknown, used = own_namespace.stdout.split()
    print("in its own PID namespace:", own_namespace.stdout)
    assert host_pid == "False"
    # The load's memory (two 128 MiB matrices, the CUDA context), none of its processes:
    # the exporter reports the process list as unknown there, not as empty.
    assert processes == "0" and float(used) > 512 << 20
    assert unknown == "True"
