"""A scenario's `kubelet` section → what the kubelet's pod-resources API would answer.

Device ids are the ones a real NVIDIA device plugin hands out: the GPU's uuid, `<uuid>::<n>`
for a time-slicing replica, and a MIG instance's uuid under `nvidia.com/mig-<profile>` (the
mixed strategy), so the exporter resolves them exactly as it does on a cluster.
"""

from __future__ import annotations

from collections import defaultdict

from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2
from kube_gpu_exporter.exporter.simulated.scenario import DeviceState, PodSpec, Scenario

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = "nvidia.com/mig-{profile}"


def pod_resources(scenario: Scenario) -> list[api_pb2.PodResources]:
    """One PodResources per pod, its containers in the scenario's order."""
    devices = scenario.state_at(0).devices
    containers: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = defaultdict(dict)
    for pod in scenario.spec.kubelet.pods:
        resource, device_id = _device_id(devices, pod)
        held = containers[(pod.namespace, pod.name)].setdefault(pod.container, {})
        held.setdefault(resource, []).append(device_id)
    return [
        api_pb2.PodResources(
            namespace=namespace,
            name=name,
            containers=[
                api_pb2.ContainerResources(
                    name=container,
                    devices=[
                        api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                        for r, ids in held.items()
                    ],
                )
                for container, held in by_container.items()
            ],
        )
        for (namespace, name), by_container in containers.items()
    ]


def allocatable(scenario: Scenario) -> list[api_pb2.ContainerDevices]:
    """Every device the device plugin advertises: whole GPUs (or their replicas) and MIG
    instances, one entry per resource name."""
    state = scenario.state_at(0)
    replicas = scenario.spec.kubelet.replicas
    by_resource: dict[str, list[str]] = defaultdict(list)
    for index, device in enumerate(state.devices):
        if device.mig:
            for mig in device.mig:
                by_resource[MIG_RESOURCE.format(profile=mig.profile)].append(mig.uuid)
        elif index in replicas:
            ids = (f"{device.uuid}::{n}" for n in range(replicas[index]))
            by_resource[GPU_RESOURCE].extend(ids)
        else:
            by_resource[GPU_RESOURCE].append(device.uuid)
    return [api_pb2.ContainerDevices(resource_name=r, device_ids=i) for r, i in by_resource.items()]


def _device_id(devices: tuple[DeviceState, ...], pod: PodSpec) -> tuple[str, str]:
    """A pod's (resource name, device id), from the scenario's device uuids."""
    device = devices[pod.device]
    if pod.mig is not None:
        mig = device.mig[pod.mig]
        return MIG_RESOURCE.format(profile=mig.profile), mig.uuid
    if pod.replica is not None:
        return GPU_RESOURCE, f"{device.uuid}::{pod.replica}"
    return GPU_RESOURCE, device.uuid
