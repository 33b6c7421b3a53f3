"""GKE's device ids name GPUs by /dev/nvidiaN's minor number, which the driver need not give in
NVML's enumeration order. Over the real pynvml and the fake libnvidia-ml (minor numbers in
another order than the indexes) and a real gRPC kubelet, every pod is attributed to the GPU
its id names."""

from __future__ import annotations

from pathlib import Path

import pynvml

from fakenvml import exporter_env
from kube_gpu_exporter.exporter.attribution.device_ids import DeviceResolver
from kube_gpu_exporter.exporter.nvml.devices import discover
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kubelet_server import FakeKubelet, container, devices, kubelet_args, pod
from support import run_exporter, values, wait_until

GPU = "GPU-{0}{0}{0}{0}{0}{0}{0}{0}-0000-4000-8000-000000000000".format
MIG = "MIG-{0}{0}{0}{0}{0}{0}{0}{0}-0000-4000-8000-000000000000".format
# index → minor: 0 → 2, 1 → 0, 2 → 1 (the MIG-enabled A100 is /dev/nvidia1)
NODE = Scenario.parse(
    f"""
devices:
  - {{uuid: "{GPU(0)}", minor: 2}}
  - {{uuid: "{GPU(1)}", minor: 0}}
  - uuid: "{GPU(2)}"
    minor: 1
    name: NVIDIA A100-SXM4-40GB
    mig:
      - {{profile: 3g.20gb, gpu_instance_id: 1, uuid: "{MIG(3)}", memory_total_bytes: 20GiB}}
      - {{profile: 3g.20gb, gpu_instance_id: 2, uuid: "{MIG(4)}", memory_total_bytes: 20GiB}}
"""
)
# GKE's names: whole GPU, time-shared replica, MIG instance (gpu instance id), both.
HOLDS = {
    "whole": ("nvidia0", GPU(1)),
    "shared-a": ("nvidia2/vgpu0", GPU(0)),
    "shared-b": ("nvidia2/vgpu1", GPU(0)),
    "mig": ("nvidia1/gi2", MIG(4)),
    "mig-shared": ("nvidia1/gi1/vgpu0", MIG(3)),
}


def test_gke_ids_name_gpus_by_minor_number_not_index(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = exporter_env(fake_nvml_dir, tmp_path / "state", NODE.state_at(0))
    socket = tmp_path / "kubelet.sock"
    args = kubelet_args(socket)
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [
            pod("ml", name, container("main", devices("nvidia.com/gpu", device_id)))
            for name, (device_id, _) in HOLDS.items()
        ]
        with run_exporter(args, tmp_path, env=env) as exporter:
            parsed = wait_until(
                lambda: (
                    (m := exporter.metrics())
                    and len(values(m, "nvidia_gpu_allocation_info")) == len(HOLDS)
                    and m
                ),
                what="every pod's allocation",
            )
            held = {
                dict(labels)["pod"]: dict(labels)["uuid"]
                for (name, labels) in parsed
                if name == "nvidia_gpu_allocation_info"
            }
            assert held == {name: uuid for name, (_, uuid) in HOLDS.items()}
            assert values(parsed, "kube_gpu_exporter_unmapped_device_ids") in ([], [0])


def test_a_minor_number_nvml_will_not_give_is_never_guessed(nvml_state: Path) -> None:
    """GPU 1's driver will not say (`minor none`): GKE's `nvidia1` names no device rather than
    the GPU at index 1, and GPU 0 keeps the minor number the fake gives by default (1)."""
    nvml_state.write_text(f"device 0\nuuid {GPU(0)}\ndevice 1\nuuid {GPU(1)}\nminor none\n")
    pynvml.nvmlInit()
    try:
        devices = discover()
    finally:
        pynvml.nvmlShutdown()
    assert [d.identity.minor for d in devices] == [1, None]
    resolver = DeviceResolver(d.identity for d in devices)
    assert resolver.gpu_of("nvidia1") == GPU(0)
    assert resolver.gpu_of("nvidia0") is None
