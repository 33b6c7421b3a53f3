"""The exporter beside the oldest kubelet the version-skew policy allows with the bench's 1.37
control plane: a kubelet three minors older (real_components.K8S_OLDEST_KUBELET, built by
`make node-bin` beside the 1.37 one), on the same real node (tests/fakes/real_node.py).

- The device plugin registers with the older kubelet and its GPUs (tests/fakes/node_gpus.yaml)
  become allocatable; a pod asking for a whole GPU and one asking for a 2g.10gb MIG slice run.
- The exporter (`serve` as a process on the node's pod-resources socket, as
  test_node_device_plugin runs it) attributes exactly the devices that kubelet's `List` names,
  no more, and advertises per resource exactly what its `GetAllocatableResources` lists.
- Where the two kubelets' pod-resources answers can differ: the older one knows nothing of
  the pod-level `cpu_ids` and `memory` (PodResources' fields 4 and 5, which 1.37 fills only
  under its PodLevelResourceManagers gate, off by default), so they are empty; no DRA claims.
  Its `Get` is beta, on by default (answering each pod as `List` does), and can still be
  switched off (`KubeletPodResourcesGet: false`): after that kubelet restart `Get` fails
  (UNKNOWN, "Get method disabled") while `List`, `GetAllocatableResources` and the exporter,
  which asks only those two, go on. The 1.37 kubelet refuses that setting at its
  configuration: the gate is locked on there.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from control_plane import run_control_plane
from device_plugin import run_plugin
from real_binaries import real_components, require
from real_node import RealNode, run_node
from test_node_device_plugin import (
    ADVERTISED,
    ALLOCATED,
    MIXED,
    MIXED_RESOURCES,
    fake_gpus,
    mig_2g,
    wait_resources,
    whole_gpus,
)

from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2, api_pb2_grpc
from support import Samples, run_exporter, values, wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.node]

OLDER = real_components.K8S_OLDEST_KUBELET
PODS = ("whole", "mig")
LAST_SUCCESS = "kube_gpu_exporter_pod_resources_last_success_timestamp_seconds"
# (namespace, pod, container, resource, device id)
Allocation = tuple[str, str, str, str, str]


def _ask(node: RealNode, method: str, request: Any) -> Any:
    """One call to the node's pod-resources socket, through the exporter's stubs."""
    with grpc.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        return getattr(stub, method)(request, timeout=10)


def _allocations(listed: Any) -> set[Allocation]:
    return {
        (pod.namespace, pod.name, container.name, devices.resource_name, device)
        for pod in listed.pod_resources
        for container in pod.containers
        for devices in container.devices
        for device in devices.device_ids
    }


def _get(node: RealNode, pod: str) -> Any:
    request = api_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace="default")
    return _ask(node, "Get", request).pod_resources


def _attributed(parsed: Samples) -> set[Allocation]:
    found = set()
    for (name, labels), value in parsed.items():
        if name == ALLOCATED and value == 1:
            got = dict(labels)
            found.add(
                (got["namespace"], got["pod"], got["container"], got["resource"], got["uuid"])
            )
    return found


def _advertised(parsed: Samples) -> dict[str, int]:
    return {
        dict(labels)["resource"]: int(value)
        for (name, labels), value in parsed.items()
        if name == ADVERTISED
    }


def test_older_kubelet_pod_resources(tmp_path: Path, fake_nvml_dir: Path) -> None:
    state, _, nvml_env = fake_gpus(tmp_path, fake_nvml_dir)
    whole, mig = whole_gpus(state), mig_2g(state)
    with (
        run_control_plane(tmp_path / "plane") as plane,
        run_node(plane, tmp_path / "node", kubelet_version=OLDER) as node,
        run_plugin(tmp_path / "plugin", nvml_env, MIXED),
    ):
        info = node.node()["status"]["nodeInfo"]
        assert (info["kubeletVersion"], plane.ok("GET", "/version")["gitVersion"]) == (
            OLDER,
            real_components.K8S,
        )
        wait_resources(node, MIXED_RESOURCES, "the plugin's resources on the older kubelet")
        node.pod("whole", resources={"limits": {"nvidia.com/gpu": 1}})
        node.pod("mig", resources={"limits": {"nvidia.com/mig-2g.10gb": 1}})
        for pod in PODS:
            node.wait_pod_phase(pod)

        listed = _ask(node, "List", api_pb2.ListPodResourcesRequest())
        allocations = _allocations(listed)
        (gpu,) = [a[4] for a in allocations if a[1] == "whole"]
        assert gpu in whole
        assert allocations == {
            ("default", "whole", "main", "nvidia.com/gpu", gpu),
            ("default", "mig", "main", "nvidia.com/mig-2g.10gb", mig),
        }
        allocatable = _ask(node, "GetAllocatableResources", api_pb2.AllocatableResourcesRequest())
        advertised = Counter(
            d.resource_name for d in allocatable.devices for _ in d.device_ids
        )  # fmt: skip
        assert advertised == {r: int(n) for r, n in MIXED_RESOURCES.items()}

        # what this kubelet does not know (pod-level resources, 1.37's fields 4 and 5) is empty;
        # no DRA claims; Get answers each pod as List does
        by_name = {p.name: p for p in listed.pod_resources}
        for pod in PODS:
            assert not by_name[pod].cpu_ids and not by_name[pod].memory
            assert not any(c.dynamic_resources for c in by_name[pod].containers)
            assert _get(node, pod) == by_name[pod]

        socket = f"--kubelet.pod-resources-socket={node.pod_resources_socket}"
        with run_exporter(["--collector.interval=1s", socket], tmp_path, nvml_env) as exporter:

            def exactly(parsed: Samples) -> bool:
                return _attributed(parsed) == allocations and _advertised(parsed) == advertised

            exporter.metrics_when(exactly, "exactly the older kubelet's List and allocatable")

            # Get switched off, which this kubelet still allows: a restart with the gate off
            config = node.workdir / "kubelet-config.yaml"  # run_node's, read at each start
            settings = yaml.safe_load(config.read_text())
            settings["featureGates"] = {"KubeletPodResourcesGet": False}
            config.write_text(yaml.safe_dump(settings))
            node.restart_kubelet()
            # the new kubelet lists the pods once it has read its checkpoint back: polled
            wait_until(
                lambda: (
                    _allocations(_ask(node, "List", api_pb2.ListPodResourcesRequest()))
                    == allocations
                ),
                timeout=60,
                what="the restarted kubelet's List",
            )
            with pytest.raises(grpc.RpcError) as refused:
                _get(node, "whole")
            assert refused.value.code() is grpc.StatusCode.UNKNOWN
            assert "Get method disabled" in (refused.value.details() or "")
            relisted = time.time()

            def read_again(parsed: Samples) -> bool:
                # a listing from the restarted kubelet, not the one the exporter held before
                (success,) = values(parsed, LAST_SUCCESS)
                return success > relisted and exactly(parsed)

            exporter.metrics_when(read_again, "the same attribution from the restarted kubelet")


def test_the_control_planes_kubelet_refuses_get_off(tmp_path: Path) -> None:
    """The same setting the older kubelet takes stops 1.37's at its configuration: the gate is
    locked on there (no node is started; it exits before touching containers or cgroups)."""
    config = tmp_path / "kubelet-config.yaml"
    settings = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{tmp_path}/no-runtime.sock",
        "featureGates": {"KubeletPodResourcesGet": False},
    }
    config.write_text(yaml.safe_dump(settings))
    argv = [str(require("kubelet")), f"--config={config}", f"--root-dir={tmp_path / 'root'}"]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "cannot set feature gate KubeletPodResourcesGet to false" in refused.stderr
