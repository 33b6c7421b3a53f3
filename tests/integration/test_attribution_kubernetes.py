"""Attribution with the Kubernetes API: a time-sliced GPU split by process, owners and labels.

Real parts throughout: the exporter process, a gRPC kubelet, an HTTP server answering list and
watch as the API server does, and a procfs tree with the cgroup files of the GPU processes.
"""

from __future__ import annotations

from pathlib import Path

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod
from kubelet_server import FakeKubelet, container, devices, pod
from support import run_exporter, values, wait_until

GPU = "GPU-11111111-0000-4000-8000-000000000000"
SCENARIO = f"""
devices:
  - uuid: {GPU}
    readings: {{utilization: 0.9, memory_used_bytes: 30GiB}}
    processes:
      - {{pid: 4100, used_memory_bytes: 10GiB, sm_utilization: 0.6}}
      - {{pid: 4200, used_memory_bytes: 20GiB, sm_utilization: 0.3}}
"""
CID_A = "a" * 64
CID_B = "b" * 64
UID_A = "1b4f0a52-8a8e-4c0a-9f1e-000000000001"
UID_B = "1b4f0a52-8a8e-4c0a-9f1e-000000000002"


def cgroup(procfs: Path, pid: int, uid: str, container_id: str) -> None:
    """A cgroup v2 path as the systemd driver and containerd write it."""
    slice_uid = uid.replace("-", "_")
    path = (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{container_id}.scope\n"
    )
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "cgroup").write_text(path)


def test_shared_gpu_split_by_process_with_owners_and_labels(tmp_path: Path) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    procfs = tmp_path / "proc"
    cgroup(procfs, 4100, UID_A, CID_A)
    cgroup(procfs, 4200, UID_B, CID_B)
    socket = tmp_path / "kubelet.sock"
    with KubeApiServer() as api, FakeKubelet(socket) as kubelet:
        api.put(
            make_pod(
                "notebook-a", "lab", uid=UID_A, labels={"team": "vision"},
                owner=("StatefulSet", "notebook-a"), containers={"jupyter": f"containerd://{CID_A}"},
            )
        )  # fmt: skip
        api.put(
            make_pod(
                "train-b", "ml", uid=UID_B, labels={"team": "nlp"},
                owner=("Job", "train-b"), containers={"main": f"containerd://{CID_B}"},
            )
        )  # fmt: skip
        api.put(make_pod("done-c", "ml", phase="Succeeded", containers={"main": ""}))
        kubelet.pods = [
            pod("lab", "notebook-a", container("jupyter", devices("nvidia.com/gpu", f"{GPU}::0"))),
            pod("ml", "train-b", container("main", devices("nvidia.com/gpu", f"{GPU}::1"))),
            pod("ml", "done-c", container("main", devices("nvidia.com/gpu", f"{GPU}::2"))),
        ]
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        args = [
            "--simulate", str(tmp_path / "node.yaml"), "--collector.interval=0.5s",
            f"--kubelet.pod-resources-socket={socket}", "--kubelet.interval=0.5s",
            "--kubernetes.enabled", f"--kubernetes.kubeconfig={kubeconfig}",
            f"--kubernetes.node-name={NODE}", "--kubernetes.pod-labels=team",
            f"--path.procfs={procfs}",
        ]  # fmt: skip
        with run_exporter(args, tmp_path) as exporter:
            wait_until(
                lambda: len(values(exporter.metrics(), "nvidia_gpu_pod_utilization_ratio")) == 2,
                what="the split of the shared GPU",
            )
            parsed = exporter.metrics()
            # Each pod gets its own processes' share, never the device's 0.9 / 30 GiB.
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="notebook-a") == [0.6]
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="train-b") == [0.3]
            assert values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod="train-b") == [20 * 2**30]
            info = values(
                parsed, "nvidia_gpu_allocation_info", pod="train-b", sharing="shared",
                owner_kind="Job", owner_name="train-b", label_team="nlp",
            )  # fmt: skip
            assert info == [1]
            # A Succeeded pod is never attributed, whatever the kubelet still lists.
            assert values(parsed, "nvidia_gpu_allocation_info", pod="done-c") == []
            assert values(parsed, "kube_gpu_exporter_kubernetes_api_up") == [1]

            # The API server fails: attribution carries on from the kubelet, the fault shows.
            api.fail(500, times=1000)
            api.end_watches()
            wait_until(
                lambda: values(exporter.metrics(), "kube_gpu_exporter_kubernetes_api_up") == [0],
                what="the API marked down",
            )
            after = exporter.metrics()
            assert values(after, "nvidia_gpu_allocation_info", pod="notebook-a") == [1]
            assert values(after, "nvidia_gpu_allocation_info", pod="train-b") == [1]
            log = exporter.log()
    assert "Traceback" not in log
