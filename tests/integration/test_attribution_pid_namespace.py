"""A shared GPU's split by process on a node where the exporter cannot see the processes.

The exporter runs in a PID namespace of its own (`unshare --pid`, as a pod without hostPID),
over the real pynvml and the fake libnvidia-ml, which like the real driver lists only the
caller's namespace's processes: none of the workloads'. The device is busy; the split of it
among the pods sharing it is unknown, so it must be absent — a 0 would page every sharer as
idle.
"""

from __future__ import annotations

from pathlib import Path

from fakenvml import exporter_env
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kubelet_server import FakeKubelet, container, devices, kubelet_args, pod
from support import run_exporter, values, wait_until

GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU1 = "GPU-11111111-0000-4000-8000-000000000000"
NODE = Scenario.parse(
    f"""
devices:
  - uuid: {GPU0}
    readings: {{utilization: 0.8, memory_used_bytes: 50GiB}}
    processes:
      - {{pid: 100, used_memory_bytes: 30GiB, sm_utilization: 0.5}}
      - {{pid: 200, used_memory_bytes: 20GiB, sm_utilization: 0.3}}
  - uuid: {GPU1}
    readings: {{utilization: 0.6, memory_used_bytes: 12GiB}}
    processes:
      - {{pid: 300, used_memory_bytes: 12GiB, sm_utilization: 0.6}}
"""
)
SHARERS = ("serve-a", "serve-b", "serve-c")
# unshare passes SIGTERM on to the exporter (its namespace's init) when the test stops it.
OWN_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM")


def test_without_hostpid_a_shared_gpus_split_is_absent_not_zero(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    env = exporter_env(fake_nvml_dir, tmp_path / "state", NODE.state_at(0))
    socket = tmp_path / "kubelet.sock"
    args = kubelet_args(socket)
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [
            pod("ml", name, container("main", devices("nvidia.com/gpu", f"{GPU0}::{i}")))
            for i, name in enumerate(SHARERS)
        ] + [pod("ml", "trainer-0", container("main", devices("nvidia.com/gpu", GPU1)))]
        with run_exporter(args, tmp_path, env=env, prefix=OWN_PID_NAMESPACE) as exporter:
            parsed = wait_until(
                lambda: (
                    (m := exporter.metrics())
                    and len(values(m, "nvidia_gpu_allocation_info")) == 4
                    and m
                ),
                what="the four allocations",
            )
            assert values(parsed, "kube_gpu_exporter_host_pid_namespace") == [0]
            for name in SHARERS:
                assert values(parsed, "nvidia_gpu_allocation_info", pod=name, sharing="shared")
                assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod=name) == []
                assert values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod=name) == []
            # How many processes run there is just as unknown: absent, not 0.
            assert values(parsed, "nvidia_gpu_compute_processes", uuid=GPU0) == []
            # The device's own readings, and a GPU held whole, do not depend on processes.
            assert values(parsed, "nvidia_gpu_utilization_ratio", uuid=GPU0) == [0.8]
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="trainer-0") == [0.6]
            assert values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod="trainer-0") == [
                12 * 2**30
            ]
