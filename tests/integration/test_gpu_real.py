"""On a real NVIDIA driver (the device machine): the sampler and the served metrics.

Deselected in CI (`-m "not gpu"`); run with `make test-gpu` where a GPU is present.
"""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
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
