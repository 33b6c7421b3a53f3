"""The test bench's device plugin (tests/fakes/device_plugin.py) on a real node:
it registers through the kubelet's real device-plugin API and advertises the fake
NVML's GPUs of tests/fakes/node_gpus.yaml (four whole H100s, an A100 in MIG mode with a
3g.20gb, a 2g.10gb and a 1g.5gb instance) as NVIDIA's plugin names them.

- Mixed MIG strategy: the Node's allocatable shows `nvidia.com/gpu: 4` and one of each
  `nvidia.com/mig-<profile>`; pods asking for `nvidia.com/gpu: 1` and `nvidia.com/mig-2g.10gb:
  1` are admitted and run, the kubelet's pod-resources List names the allocated ids (a GPU
  UUID, the 2g.10gb's MIG UUID), and the container got `NVIDIA_VISIBLE_DEVICES` from Allocate;
  the exporter (a process on the same fake NVML) attributes both devices to their pods from
  the real kubelet's pod-resources socket and counts the advertised GPUs.
- Health: a critical Xid (79) on a whole GPU and on the MIG GPU drops them from allocatable
  (capacity stays), an application Xid (13) on another GPU does not.
- Time-slicing with renameByDefault: four replicas of each whole GPU as
  `nvidia.com/gpu.shared` (16), ids `<uuid>::<n>`, the container seeing the GPU's UUID; after
  a kubelet restart the plugin registers again, the replicas are back and the running pod
  keeps its replica in the pod-resources List.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from control_plane import run_control_plane
from device_plugin import run_plugin
from real_node import RealNode, run_node

from fakenvml import write_state
from kube_gpu_exporter.exporter.simulated.scenario import NodeState, Scenario
from support import Samples, run_exporter, values, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.node]

GPUS = Path(__file__).resolve().parents[1] / "fakes" / "node_gpus.yaml"
MIG_GPU = 3
ALLOCATED = "nvidia_gpu_allocation_info"
ADVERTISED = "nvidia_gpu_node_advertised_devices"
MIXED = {"version": "v1", "flags": {"migStrategy": "mixed"}}
MIGS = ("nvidia.com/mig-3g.20gb", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-1g.5gb")
# what MIXED advertises of node_gpus.yaml: the four whole GPUs, one of each MIG instance
MIXED_RESOURCES = {"nvidia.com/gpu": "4", **dict.fromkeys(MIGS, "1")}
SHARED = {
    **MIXED,
    "sharing": {
        "timeSlicing": {
            "renameByDefault": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
        }
    },
}


def gpus_state(xids: Mapping[int, tuple[int, ...]] | None = None) -> NodeState:
    """The node's GPUs (node_gpus.yaml) at 0 s, with `xids` (GPU index → Xids) added."""
    state = Scenario.load(GPUS).state_at(0)
    devices = tuple(
        dataclasses.replace(d, xids=d.xids + (xids or {}).get(d.index, ())) for d in state.devices
    )
    return dataclasses.replace(state, devices=devices)


def fake_gpus(tmp_path: Path, fake_nvml_dir: Path) -> tuple[NodeState, Path, dict[str, str]]:
    """The node's GPUs at 0 s, written to the state file the fake NVML reads (a test rewrites
    it to change them), and the environment that loads that NVML in a process."""
    state = gpus_state()
    state_file = tmp_path / "nvml-state"
    write_state(state_file, state)
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_file)}
    return state, state_file, env


def whole_gpus(state: NodeState) -> set[str]:
    """The UUIDs of the GPUs not in MIG mode: what `nvidia.com/gpu` allocates."""
    return {d.uuid for d in state.devices if not d.mig}


def mig_2g(state: NodeState) -> str:
    """The UUID of the MIG GPU's 2g.10gb instance: what `nvidia.com/mig-2g.10gb` allocates."""
    return next(m.uuid for m in state.devices[MIG_GPU].mig if m.profile == "2g.10gb")


def wait_resources(node: RealNode, expected: Mapping[str, str], what: str) -> None:
    def reached() -> bool:
        allocatable = node.allocatable()
        return all(allocatable.get(name) == count for name, count in expected.items())

    try:
        wait_until(reached, timeout=90, what=what)
    except BaseException:
        print("allocatable:", node.allocatable())
        print(node.log_tail("kubelet", 40))
        raise


def _devices_by_pod(node: RealNode) -> dict[str, dict[str, list[str]]]:
    """Pod name → resource → device ids, from the kubelet's pod-resources List."""
    listed: dict[str, dict[str, list[str]]] = {}
    for pod in node.pod_resources().pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                ids = listed.setdefault(pod.name, {}).setdefault(devices.resource_name, [])
                ids.extend(devices.device_ids)
    return listed


def _container_env(node: RealNode, pod: str) -> dict[str, str]:
    """The environment containerd gave the pod's `main` container (its OCI spec)."""
    for container in node.ctr("containers", "ls", "-q").stdout.split():
        info: Any = json.loads(node.ctr("containers", "info", container).stdout)
        labels = info.get("Labels") or {}
        if (
            labels.get("io.kubernetes.pod.name") == pod
            and labels.get("io.kubernetes.container.name") == "main"
        ):
            env = info["Spec"]["process"]["env"]
            return dict(item.split("=", 1) for item in env)
    raise AssertionError(f"no container of pod {pod} in containerd")


def test_mixed_strategy_allocation_and_health(tmp_path: Path, fake_nvml_dir: Path) -> None:
    state, state_file, nvml_env = fake_gpus(tmp_path, fake_nvml_dir)
    whole, mig = whole_gpus(state), mig_2g(state)
    with (
        run_control_plane(tmp_path / "plane") as plane,
        run_node(plane, tmp_path / "node") as node,
        run_plugin(tmp_path / "plugin", nvml_env, MIXED),
    ):
        wait_resources(node, MIXED_RESOURCES, "the plugin's resources")
        node.pod("whole", resources={"limits": {"nvidia.com/gpu": 1}})
        node.pod("mig", resources={"limits": {"nvidia.com/mig-2g.10gb": 1}})
        node.wait_pod_phase("whole")
        node.wait_pod_phase("mig")

        listed = _devices_by_pod(node)
        assert listed["mig"] == {"nvidia.com/mig-2g.10gb": [mig]}
        (gpu,) = listed["whole"]["nvidia.com/gpu"]
        assert gpu in whole
        assert _container_env(node, "whole")["NVIDIA_VISIBLE_DEVICES"] == gpu
        assert _container_env(node, "mig")["NVIDIA_VISIBLE_DEVICES"] == mig

        # the exporter (a process here, over the same fake NVML) reads the real kubelet
        socket = f"--kubelet.pod-resources-socket={node.pod_resources_socket}"
        with run_exporter(["--collector.interval=1s", socket], tmp_path, nvml_env) as exporter:

            def attributed(parsed: Samples) -> bool:
                return bool(
                    values(parsed, ALLOCATED, pod="whole", uuid=gpu, resource="nvidia.com/gpu")
                    and values(parsed, ALLOCATED, pod="mig", uuid=mig)
                    and values(parsed, ADVERTISED, resource="nvidia.com/gpu") == [4.0]
                )

            exporter.metrics_when(attributed, "the kubelet's allocations attributed")

        # a critical Xid on GPU 0 and on the MIG GPU; the application's Xid 13 on GPU 1
        write_state(state_file, gpus_state({0: (79,), MIG_GPU: (79,), 1: (13,)}))
        wait_resources(
            node, {"nvidia.com/gpu": "3", **dict.fromkeys(MIGS, "0")}, "unhealthy devices dropped"
        )
        time.sleep(3)  # the Xid 13 came with the others: nothing more is dropped after
        allocatable, capacity = node.allocatable(), node.node()["status"]["capacity"]
        assert allocatable["nvidia.com/gpu"] == "3"
        assert capacity["nvidia.com/gpu"] == "4"
        assert all(capacity[m] == "1" for m in MIGS)


def test_time_slicing_replicas(tmp_path: Path, fake_nvml_dir: Path) -> None:
    state, _, nvml_env = fake_gpus(tmp_path, fake_nvml_dir)
    whole = whole_gpus(state)
    with (
        run_control_plane(tmp_path / "plane") as plane,
        run_node(plane, tmp_path / "node") as node,
        run_plugin(tmp_path / "plugin", nvml_env, SHARED) as plugin_log,
    ):
        wait_resources(
            node,
            {"nvidia.com/gpu.shared": "16", "nvidia.com/mig-1g.5gb": "1"},
            "four replicas of each whole GPU",
        )
        assert "nvidia.com/gpu" not in node.allocatable()
        node.pod("sliced", resources={"limits": {"nvidia.com/gpu.shared": 1}})
        node.wait_pod_phase("sliced")
        (replica,) = _devices_by_pod(node)["sliced"]["nvidia.com/gpu.shared"]
        matched = re.fullmatch(r"(GPU-[0-9a-f-]+)::([0-3])", replica)
        assert matched and matched[1] in whole, replica
        assert _container_env(node, "sliced")["NVIDIA_VISIBLE_DEVICES"] == matched[1]

        # a kubelet restart: new sockets; the plugin registers again, the pod keeps its replica
        node.restart_kubelet()
        wait_until(
            lambda: plugin_log.read_text().count("nvidia.com/gpu.shared: registered") >= 2,
            timeout=60,
            what="the plugin registered again",
        )
        wait_resources(node, {"nvidia.com/gpu.shared": "16"}, "the replicas back")
        # the new kubelet lists the pod once it has read its checkpoint back: polled
        wait_until(
            lambda: _devices_by_pod(node).get("sliced") == {"nvidia.com/gpu.shared": [replica]},
            timeout=60,
            what="the pod's replica in the new kubelet's pod-resources List",
        )
        assert node.wait_pod_phase("sliced")["status"]["containerStatuses"][0]["restartCount"] == 0
