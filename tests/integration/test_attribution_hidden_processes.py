"""Shared GPUs whose busy processes NVML does not list, on a hostPID node.

The exporter runs as `serve` in the host's PID namespace over the real pynvml and the fake
libnvidia-ml, with the pod watch and a procfs tree that ties the listed processes to their
containers. Where the listed processes cannot account for what a device's own readings show,
both the device's compute process count and the split among its sharers are unknown: absent.
A 0 there reads as "nothing runs" to the idle rules and pages the holders of busy GPUs.
"""

from __future__ import annotations

from pathlib import Path

from fakenvml import exporter_env
from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kubelet_server import FakeKubelet, container, devices, pod
from support import run_exporter, values, wait_until

HIDDEN = "GPU-00000000-0000-4000-8000-000000000000"  # busy at 80 %, NVML lists nobody
SMALL = "GPU-11111111-0000-4000-8000-000000000000"  # at 40 %: one listed process at 10 %
UNSAID = "GPU-22222222-0000-4000-8000-000000000000"  # one process's memory NVML cannot say
IDLE = "GPU-33333333-0000-4000-8000-000000000000"  # idle, nobody listed: surely idle
SPLIT = "GPU-44444444-0000-4000-8000-000000000000"  # every process listed
UNSAID_BYTES = 12345  # replaced by NVML_VALUE_NOT_AVAILABLE in the state file
SCENARIO = Scenario.parse(
    f"""
devices:
  - uuid: {HIDDEN}
    readings: {{utilization: 0.8, memory_used_bytes: 50GiB}}
  - uuid: {SMALL}
    readings: {{utilization: 0.4, memory_used_bytes: 2560MiB}}
    processes: [{{pid: 5100, used_memory_bytes: 2GiB, sm_utilization: 0.1}}]
  - uuid: {UNSAID}
    readings: {{utilization: 0.0, memory_used_bytes: 2GiB}}
    processes:
      - {{pid: 5200, used_memory_bytes: 1GiB, sm_utilization: 0.0}}
      - {{pid: 5201, used_memory_bytes: {UNSAID_BYTES}, sm_utilization: 0.0}}
  - uuid: {IDLE}
    readings: {{utilization: 0.0, memory_used_bytes: 300MiB}}
  - uuid: {SPLIT}
    readings: {{utilization: 0.6, memory_used_bytes: 6GiB}}
    processes: [{{pid: 5400, used_memory_bytes: 6GiB, sm_utilization: 0.6}}]
"""
)
# Two sharers per GPU, a-<n> and b-<n>; pid → the sharer whose container runs it.
GPUS = (HIDDEN, SMALL, UNSAID, IDLE, SPLIT)
OWNERS = {5100: "a-1", 5200: "a-2", 5201: "b-2", 5400: "a-4"}


def uid(name: str) -> str:
    side, n = name.split("-")
    return f"1b4f0a52-8a8e-4c0a-9f1e-{ord(side):06d}{int(n):06d}"


def cid(name: str) -> str:
    """A containerd id (64 hex digits) of the sharer's one container."""
    return (name.replace("-", "") * 32)[:64]


def cgroup(procfs: Path, pid: int, name: str) -> None:
    """The process's cgroup v2 path as the systemd driver and containerd write it."""
    pod_slice = f"kubepods-burstable-pod{uid(name).replace('-', '_')}.slice"
    scope = f"cri-containerd-{cid(name)}.scope"
    path = f"0::/kubepods.slice/kubepods-burstable.slice/{pod_slice}/{scope}\n"
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "cgroup").write_text(path)


def test_busy_processes_nvml_does_not_list_leave_count_and_split_absent(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = exporter_env(fake_nvml_dir, state, SCENARIO.state_at(0))
    text = state.read_text()
    assert f"process 5201 {UNSAID_BYTES} " in text
    state.write_text(text.replace(f"process 5201 {UNSAID_BYTES} ", f"process 5201 {2**64 - 1} "))
    procfs = tmp_path / "proc"
    for pid, name in OWNERS.items():
        cgroup(procfs, pid, name)
    socket = tmp_path / "kubelet.sock"
    with KubeApiServer() as api, FakeKubelet(socket) as kubelet:
        sharers = [
            (f"{side}-{n}", gpu, i) for n, gpu in enumerate(GPUS) for i, side in enumerate("ab")
        ]
        for name, _, _ in sharers:
            api.put(
                make_pod(
                    name, "ml", uid=uid(name), containers={"main": f"containerd://{cid(name)}"}
                )
            )
        kubelet.pods = [
            pod("ml", name, container("main", devices("nvidia.com/gpu", f"{gpu}::{i}")))
            for name, gpu, i in sharers
        ]
        args = [
            "--collector.interval=0.5s", f"--kubelet.pod-resources-socket={socket}",
            "--kubelet.interval=0.5s", "--kubernetes.enabled",
            f"--kubernetes.kubeconfig={api.write_kubeconfig(tmp_path / 'kubeconfig')}",
            f"--kubernetes.node-name={NODE}", f"--path.procfs={procfs}",
        ]  # fmt: skip
        with run_exporter(args, tmp_path, env=env) as exporter:
            parsed = wait_until(
                lambda: (
                    (m := exporter.metrics())
                    and all(
                        values(m, "nvidia_gpu_pod_utilization_ratio", pod=name)
                        for name in ("a-3", "b-3", "a-4", "b-4")
                    )
                    and m
                ),
                what="the split of the two GPUs whose processes are all listed",
            )
            log = exporter.log()
    assert values(parsed, "kube_gpu_exporter_host_pid_namespace") == [1]

    def count(gpu: str) -> list[float]:
        return values(parsed, "nvidia_gpu_compute_processes", uuid=gpu)

    def usage(name: str) -> tuple[list[float], list[float]]:
        return (
            values(parsed, "nvidia_gpu_pod_utilization_ratio", pod=name),
            values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod=name),
        )

    for n in (0, 1, 2):  # HIDDEN, SMALL, UNSAID: the list cannot be all there is
        assert count(GPUS[n]) == [], GPUS[n]
        assert usage(f"a-{n}") == ([], []) and usage(f"b-{n}") == ([], []), GPUS[n]
    # An idle GPU listing nobody is idle for both sharers; a fully listed one is split.
    assert count(IDLE) == [0]
    assert usage("a-3") == ([0], [0]) and usage("b-3") == ([0], [0])
    assert count(SPLIT) == [1]
    assert usage("a-4") == ([0.6], [6 * 2**30]) and usage("b-4") == ([0], [0])
    # The device's own readings do not depend on processes.
    assert values(parsed, "nvidia_gpu_utilization_ratio", uuid=HIDDEN) == [0.8]
    assert "Traceback" not in log
