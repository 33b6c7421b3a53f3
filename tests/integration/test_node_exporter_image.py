"""The exporter's container image (the Dockerfile's, built by tools/image.py) on the real node:
loaded into containerd from its docker-archive and run with `imagePullPolicy: Never` beside
a GPU pod that the device plugin served, with the fake NVML and the kubelet's pod-resources
folder mounted from the host:

- as a bare pod;
- as the Helm chart's DaemonSet (`helm install` with the image, `runtimeClassName: ""` since
  this containerd has no `nvidia` runtime, the node's pod-resources folder, the fake NVML as
  extraEnv/extraVolumes), placed by the real DaemonSet controller and scheduler on the node
  labelled `nvidia.com/gpu.present=true`, with the chart's probes, security context and
  ServiceAccount token.

Its /metrics, read on loopback inside the pod's own network namespace (`nsenter --net`),
attributes the GPU pod's device, read through the real kubelet's socket, and counts the four
advertised GPUs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from control_plane import run_control_plane
from device_plugin import run_plugin
from real_binaries import require
from real_node import RealNode, run_node

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import Samples, samples, values, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.node, pytest.mark.image]

REPO = Path(__file__).resolve().parents[2]
GPUS = Path(__file__).resolve().parents[1] / "fakes" / "node_gpus.yaml"
TOOL = REPO / "tools" / "image.py"
PORT = 19400
ALLOCATED = "nvidia_gpu_allocation_info"
ADVERTISED = "nvidia_gpu_node_advertised_devices"
KUBELET_DIR = "/var/lib/kubelet/pod-resources"
# the chart's DaemonSet: its controller; a pod's ServiceAccount token volume needs the
# namespace's `default` account and its kube-root-ca.crt ConfigMap
CONTROLLERS = ("daemonset", "serviceaccount", "root-ca-cert-publisher")
MIXED = {"version": "v1", "flags": {"migStrategy": "mixed"}}  # the A100's MIG not whole


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


image_tool = sys.modules.get("image_tool") or _load(TOOL, "image_tool")


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    missing = [cmd for cmd in ("buildah", "debootstrap") if shutil.which(cmd) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed: run `make image`", pytrace=False)
    facts: dict[str, Any] = image_tool.build()
    return facts


def _task_pid(node: RealNode, pod: str, container: str = "main") -> int:
    """The process id of the pod's `container` (its task in containerd)."""
    for line in node.ctr("containers", "ls").stdout.splitlines()[1:]:
        found = line.split()[0]
        info = node.ctr("containers", "info", found).stdout
        if f'"io.kubernetes.pod.name": "{pod}"' in info and (
            f'"io.kubernetes.container.name": "{container}"' in info
        ):
            for task in node.ctr("tasks", "ls").stdout.splitlines()[1:]:
                fields = task.split()
                if fields[0] == found and fields[2] == "RUNNING":
                    return int(fields[1])
    raise AssertionError(f"no running container of pod {pod}")


def _metrics_in_pod(pid: int) -> Samples | None:
    """/metrics on loopback inside the network namespace of process `pid`."""
    fetch = (
        "import urllib.request,sys;"
        f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{PORT}/metrics',"
        "timeout=5).read().decode())"
    )
    done = subprocess.run(
        ["nsenter", f"--target={pid}", "--net", sys.executable, "-c", fetch],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return samples(done.stdout.encode()) if done.returncode == 0 else None


def test_exporter_image_as_a_pod(
    tmp_path: Path, fake_nvml_dir: Path, built: dict[str, Any]
) -> None:
    state_dir = tmp_path / "nvml"
    state_dir.mkdir()
    write_state(state_dir / "state", Scenario.load(GPUS).state_at(0))
    nvml_env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_dir / "state")}
    with (
        run_control_plane(tmp_path / "plane") as plane,
        run_node(plane, tmp_path / "node") as node,
        run_plugin(tmp_path / "plugin", nvml_env, MIXED),
    ):
        loaded = node.ctr("images", "import", built["archive"])
        assert loaded.returncode == 0, loaded.stderr
        wait_until(
            lambda: node.allocatable().get("nvidia.com/gpu") == "4", what="the plugin's GPUs"
        )
        node.pod("gpu-user", resources={"limits": {"nvidia.com/gpu": 1}})
        node.wait_pod_phase("gpu-user")
        (gpu,) = [
            device_id
            for pod in node.pod_resources().pod_resources
            if pod.name == "gpu-user"
            for container in pod.containers
            for devices in container.devices
            for device_id in devices.device_ids
        ]

        mounts = {
            "fake-nvml": (str(fake_nvml_dir), "/fake-nvml"),
            "nvml-state": (str(state_dir), "/fake-nvml-state"),
            "pod-resources": (str(node.pod_resources_socket.parent), KUBELET_DIR),
        }
        node.pod(
            "exporter",
            volumes=[
                {"name": name, "hostPath": {"path": host, "type": "Directory"}}
                for name, (host, _) in mounts.items()
            ],
            container={
                "image": built["name"],
                "args": [
                    "serve",
                    f"--web.listen-address=127.0.0.1:{PORT}",
                    "--collector.interval=1s",
                    f"--kubelet.pod-resources-socket={KUBELET_DIR}/kubelet.sock",
                ],
                "env": [
                    {"name": "LD_LIBRARY_PATH", "value": "/fake-nvml"},
                    {"name": "FAKE_NVML_STATE", "value": "/fake-nvml-state/state"},
                ],
                "volumeMounts": [
                    {"name": name, "mountPath": inside} for name, (_, inside) in mounts.items()
                ],
            },
        )
        node.wait_pod_phase("exporter", timeout=180)
        pid = _task_pid(node, "exporter")

        def attributed() -> Samples | None:
            parsed = _metrics_in_pod(pid)
            if parsed and values(parsed, ALLOCATED, pod="gpu-user", uuid=gpu):
                return parsed
            return None

        parsed = wait_until(attributed, timeout=120, what="the pod's exporter attributing")
        assert values(parsed, ADVERTISED, resource="nvidia.com/gpu") == [4.0]


def test_chart_daemonset_on_the_node(
    tmp_path: Path, fake_nvml_dir: Path, built: dict[str, Any]
) -> None:
    """`helm install` of the chart with the built image: the DaemonSet controller and the
    scheduler put its pod on the node, the kubelet runs it, and it attributes a GPU pod."""
    state_dir = tmp_path / "nvml"
    state_dir.mkdir()
    write_state(state_dir / "state", Scenario.load(GPUS).state_at(0))
    nvml_env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_dir / "state")}
    repository, tag = built["name"].rsplit(":", 1)
    with (
        run_control_plane(tmp_path / "plane", scheduler=True, controllers=CONTROLLERS) as plane,
        run_node(plane, tmp_path / "node") as node,
        run_plugin(tmp_path / "plugin", nvml_env, MIXED),
    ):
        loaded = node.ctr("images", "import", built["archive"])
        assert loaded.returncode == 0, loaded.stderr
        plane.ok(
            "PATCH",
            f"/api/v1/nodes/{node.name}",
            {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}},
            content_type="application/merge-patch+json",
        )
        wait_until(
            lambda: node.allocatable().get("nvidia.com/gpu") == "4", what="the plugin's GPUs"
        )
        node.pod("gpu-user", resources={"limits": {"nvidia.com/gpu": 1}})
        node.wait_pod_phase("gpu-user")

        values_file = tmp_path / "values.yaml"
        values_file.write_text(
            yaml.safe_dump(
                {
                    "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                    "runtimeClassName": "",
                    "podResourcesDir": str(node.pod_resources_socket.parent),
                    "extraEnv": [
                        {"name": "LD_LIBRARY_PATH", "value": "/fake-nvml"},
                        {"name": "FAKE_NVML_STATE", "value": "/fake-nvml-state/state"},
                    ],
                    "extraVolumes": [
                        {"name": "fake-nvml", "hostPath": {"path": str(fake_nvml_dir)}},
                        {"name": "nvml-state", "hostPath": {"path": str(state_dir)}},
                    ],
                    "extraVolumeMounts": [
                        {"name": "fake-nvml", "mountPath": "/fake-nvml", "readOnly": True},
                        {"name": "nvml-state", "mountPath": "/fake-nvml-state", "readOnly": True},
                    ],
                }
            )
        )
        installed = subprocess.run(
            [str(require("helm")), "install", "kge", str(REPO / "charts" / "kube-gpu-exporter"),
             "--kubeconfig", str(plane.kubeconfig), "--namespace", "gpu-monitoring",
             "--create-namespace", "-f", str(values_file)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr

        def exporter_pod() -> str | None:
            pods = plane.ok("GET", "/api/v1/namespaces/gpu-monitoring/pods")["items"]
            for pod in pods:
                if pod["spec"].get("nodeName") == node.name and (
                    pod.get("status", {}).get("phase") == "Running"
                ):
                    return str(pod["metadata"]["name"])
            return None

        try:
            name = wait_until(exporter_pod, timeout=180, what="the DaemonSet's pod Running")
        except BaseException:
            print(json.dumps(plane.ok("GET", "/api/v1/namespaces/gpu-monitoring/pods"))[-3000:])
            print(json.dumps(plane.ok("GET", "/api/v1/namespaces/gpu-monitoring/events"))[-3000:])
            print(node.log_tail("kubelet", 30))
            raise
        pid = _task_pid(node, name, container="exporter")

        def attributed() -> Samples | None:
            parsed = _metrics_in_pod(pid)
            if parsed and values(parsed, ALLOCATED, pod="gpu-user"):
                return parsed
            return None

        parsed = wait_until(attributed, timeout=120, what="the DaemonSet's exporter attributing")
        assert values(parsed, ADVERTISED, resource="nvidia.com/gpu") == [4.0]

        def ready() -> bool:  # the chart's readiness probe, from the kubelet over the bridge
            pod = plane.ok("GET", f"/api/v1/namespaces/gpu-monitoring/pods/{name}")
            conditions = pod.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_until(ready, timeout=120, what="the DaemonSet's pod Ready")
