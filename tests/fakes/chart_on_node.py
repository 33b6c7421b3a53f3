"""The Helm chart's exporter on the real node: the image tools/image.py builds, the values that
fit this bench (no `nvidia` RuntimeClass, no registry, the node's own pod-resources folder,
the fake NVML mounted from the host), `helm install`, and what the tests read back — the
DaemonSet's pod, its /metrics over the node's bridge, the kubelet's two pod-resources answers.

The image is built from the working tree, so a test that runs it runs the exporter as it is
now; the chart is the repository's, installed unchanged but for these values.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from control_plane import ControlPlane
from gpu_workloads import exported, listed, metrics_at
from real_binaries import require
from real_node import RealNode

from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2, api_pb2_grpc
from kube_gpu_exporter.exporter.simulated.scenario import NodeState
from support import Samples, wait_until

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kube-gpu-exporter"
PORT = 19400  # the chart's


def built_image() -> dict[str, Any]:
    """tools/image.py's build (cached by its inputs): the image's name and docker-archive."""
    name = "image_tool"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "image.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    facts: dict[str, Any] = sys.modules[name].build()
    return facts


def chart_values(
    image: str, node: RealNode, fake_nvml: Path, state_dir: Path, monitor: dict[str, str]
) -> dict[str, Any]:
    """The built `image`, no `nvidia` RuntimeClass (this containerd has none), the node's
    pod-resources folder, the fake NVML and its state folder, a 1 s cycle (the tests poll),
    no cluster view, and a ServiceMonitor labelled `monitor`, scraped every 2 s."""
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "runtimeClassName": "",
        "podResourcesDir": str(node.pod_resources_socket.parent),
        "extraArgs": ["--collector.interval=1s", "--kubelet.interval=1s"],
        "extraEnv": [
            {"name": "LD_LIBRARY_PATH", "value": "/fake-nvml"},
            {"name": "FAKE_NVML_STATE", "value": "/fake-nvml-state/state"},
        ],
        "extraVolumes": [
            {"name": "fake-nvml", "hostPath": {"path": str(fake_nvml)}},
            {"name": "nvml-state", "hostPath": {"path": str(state_dir)}},
        ],
        "extraVolumeMounts": [
            {"name": "fake-nvml", "mountPath": "/fake-nvml", "readOnly": True},
            {"name": "nvml-state", "mountPath": "/fake-nvml-state", "readOnly": True},
        ],
        "cluster": {"enabled": False},
        "serviceMonitor": {"enabled": True, "interval": "2s", "additionalLabels": monitor},
    }


def helm_install(
    plane: ControlPlane, release: str, namespace: str, values: dict[str, Any], workdir: Path
) -> None:
    values_file = workdir / f"{release}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    installed = subprocess.run(
        [str(require("helm")), "install", release, str(CHART),
         "--kubeconfig", str(plane.kubeconfig), "--namespace", namespace,
         "--create-namespace", "-f", str(values_file)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr


@dataclass
class Bench:
    """The node, its plane, the fake NVML's state, and the chart's exporter on it."""

    plane: ControlPlane
    node: RealNode
    state: NodeState
    state_file: Path
    workdir: Path
    namespace: str  # the chart's release's

    def exporter_pod(self, namespace: str = "") -> dict[str, Any] | None:
        """The DaemonSet's Running pod (not being deleted) with its IP."""
        path = f"/api/v1/namespaces/{namespace or self.namespace}/pods"
        for pod in self.plane.ok("GET", path)["items"]:
            status = pod.get("status", {})
            gone = pod["metadata"].get("deletionTimestamp")
            if status.get("phase") == "Running" and status.get("podIP") and not gone:
                return dict(pod)
        return None

    def exporter_log(self, namespace: str = "") -> str:
        """The end of what the kubelet kept of the exporter containers' output."""
        found = sorted(Path("/var/log/pods").glob(f"{namespace or self.namespace}_*/*/*.log"))
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in found[-2:])

    def metrics(self) -> Samples | None:
        pod = self.exporter_pod()
        return metrics_at(pod["status"]["podIP"], PORT) if pod else None

    def listed(self) -> Any:
        """The kubelet's pod-resources List."""
        return self.node.pod_resources()

    def allocatable_ids(self) -> dict[str, set[str]]:
        """The kubelet's pod-resources GetAllocatableResources: resource → ids."""
        with grpc.insecure_channel(f"unix://{self.node.pod_resources_socket}") as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            answer = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10)
        found: dict[str, set[str]] = {}
        for devices in answer.devices:
            found.setdefault(devices.resource_name, set()).update(devices.device_ids)
        return found

    def agreed(self) -> tuple[Samples, Any] | None:
        """(/metrics, the List) once the exporter's mapping equals the kubelet's."""
        parsed, answer = self.metrics(), self.listed()
        if parsed and exported(parsed) == listed(answer):
            return parsed, answer
        return None

    def wait_agreed(self) -> tuple[Samples, Any]:
        """`agreed`, waited for; both views printed when it does not come."""
        try:
            return wait_until(self.agreed, timeout=120, what="the exporter's mapping = the List")
        except BaseException:
            print("kubelet:", listed(self.listed()))
            print("exporter:", exported(self.metrics() or {}))
            print(self.exporter_log())
            raise

    def pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}"
        return list(self.plane.ok("GET", path)["items"])
