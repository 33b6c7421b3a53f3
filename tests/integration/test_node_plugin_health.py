"""The device plugin's view of each GPU beside NVML's, on the real kubelet 1.37.2.

The test bench's device plugin (tests/fakes/device_plugin.py, NVIDIA's rules) marks a GPU
Unhealthy on an Xid NVIDIA does not count as the application's; the exporter's
nvidia_gpu_action_required reads NVIDIA's Xid catalog and the driver's recovery action. Here
they disagree both ways, and what the kubelet reports is read from the kubelet itself:

- an unhealthy device leaves pod-resources GetAllocatableResources (the kubelet lists healthy
  devices only) and the Node's allocatable, and stays in its capacity;
- nvidia_gpu_kubelet_allocatable is 0 for it and 1 for the others;
- the two PromQL queries docs/metrics.md gives, run by a real Prometheus scraping the
  exporter, name the GPU the plugin took out while NVML asks nothing of it (Xid 92: the
  catalog says investigate, the plugin says Unhealthy), and the GPU NVML asks a reset of while
  the plugin still offers it (a recovery action, which no plugin reads).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import grpc
import pytest
from control_plane import run_control_plane
from device_plugin import run_plugin
from real_node import RealNode, run_node

from fakenvml import write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2, api_pb2_grpc
from kube_gpu_exporter.exporter.simulated.scenario import NodeState, Scenario
from prometheus_server import BUILT, binaries_of, run_prometheus
from support import Samples, run_exporter, values, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.node]

GPUS = Path(__file__).resolve().parents[1] / "fakes" / "node_gpus.yaml"
MIXED = {"version": "v1", "flags": {"migStrategy": "mixed"}}
GPU = "nvidia.com/gpu"
# GPU 0: Xid 79 (both say so); GPU 1: Xid 13 (the application's: neither); GPU 2: Xid 92
# (the plugin only); GPU 4: the driver's recovery action asks a reset (NVML only)
XIDS = {0: (79,), 1: (13,), 2: (92,)}
RESET_ASKED = 4
DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def doc_queries() -> list[str]:
    """The PromQL blocks of docs/metrics.md's "The device plugin's view beside NVML's"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n### The device plugin's view beside NVML's\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return [b.split("```", 1)[0].strip() for b in section.split("```promql\n")[1:]]


def faulted() -> NodeState:
    state = Scenario.load(GPUS).state_at(0)
    devices = []
    for d in state.devices:
        d = dataclasses.replace(d, xids=d.xids + XIDS.get(d.index, ()))
        if d.index == RESET_ASKED:
            d = dataclasses.replace(d, readings={**d.readings, "recovery_action": 1})
        devices.append(d)
    return dataclasses.replace(state, devices=tuple(devices))


def allocatable_ids(node: RealNode) -> dict[str, set[str]]:
    """GetAllocatableResources: resource → device ids, from the real kubelet."""
    with grpc.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        answer = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10)
    listed: dict[str, set[str]] = {}
    for devices in answer.devices:
        listed.setdefault(devices.resource_name, set()).update(devices.device_ids)
    return listed


def offered(parsed: Samples) -> dict[str, float]:
    """uuid → nvidia_gpu_kubelet_allocatable."""
    return {
        dict(labels)["uuid"]: value
        for (name, labels), value in parsed.items()
        if name == c.KUBELET_ALLOCATABLE.name
    }


def test_the_plugins_view_beside_nvmls(tmp_path: Path, fake_nvml_dir: Path) -> None:
    state_file = tmp_path / "nvml-state"
    healthy = Scenario.load(GPUS).state_at(0)
    write_state(state_file, healthy)
    nvml_env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_file)}
    uuid = {d.index: d.uuid for d in healthy.devices}
    whole = {uuid[i] for i in (0, 1, 2, 4)}
    migs = {m.uuid for d in healthy.devices for m in d.mig}
    with (
        run_control_plane(tmp_path / "plane") as plane,
        run_node(plane, tmp_path / "node") as node,
        run_plugin(tmp_path / "plugin", nvml_env, MIXED),
    ):
        wait_until(lambda: node.allocatable().get(GPU) == "4", timeout=90, what="4 GPUs")
        assert allocatable_ids(node)[GPU] == whole
        socket = f"--kubelet.pod-resources-socket={node.pod_resources_socket}"
        with (
            run_exporter(["--collector.interval=1s", socket], tmp_path, nvml_env) as exporter,
            run_prometheus(
                tmp_path, [f"127.0.0.1:{exporter.port}"], generation=binaries_of(BUILT)
            ) as prometheus,
        ):
            parsed = exporter.metrics_when(
                lambda p: offered(p) == dict.fromkeys(whole | migs, 1.0), "every device offered"
            )
            assert uuid[3] not in offered(parsed)  # the GPU in MIG mode: its instances are

            write_state(state_file, faulted())
            wait_until(
                lambda: allocatable_ids(node).get(GPU) == {uuid[1], uuid[4]},
                timeout=60,
                what="the unhealthy GPUs out of GetAllocatableResources",
            )
            # the Node follows at its next status update (GetAllocatableResources at once)
            wait_until(lambda: node.allocatable().get(GPU) == "2", timeout=60, what="the Node")
            assert node.node()["status"]["capacity"][GPU] == "4"
            parsed = exporter.metrics_when(
                lambda p: offered(p).get(uuid[0]) == 0 and offered(p).get(uuid[2]) == 0,
                "the kubelet's view",
            )
            assert offered(parsed) == {**dict.fromkeys(whole | migs, 1.0), uuid[0]: 0, uuid[2]: 0}
            action = c.ACTION_REQUIRED.name
            assert values(parsed, action, uuid=uuid[0], source="xid", xid="79") == [1]
            assert values(parsed, action, uuid=uuid[1], action="none") == [1]
            assert values(parsed, action, uuid=uuid[2], action="none") == [1]
            assert values(parsed, action, uuid=uuid[4], source="recovery_action") == [1]

            def uuids(promql: str) -> set[str]:
                return {r["metric"]["uuid"] for r in prometheus.query(promql)}

            plugin_only, nvml_only, _ = doc_queries()
            wait_until(
                lambda: uuids(plugin_only) == {uuid[2]} and uuids(nvml_only) == {uuid[4]},
                timeout=30,
                what="the two disagreements in Prometheus",
            )
