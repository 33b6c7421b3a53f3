"""GPU workloads made the way users make them — a Deployment, a Job, a bare pod the scheduler
places — and the two views of which devices their containers hold: the kubelet's own
pod-resources List, and what the exporter serves as `nvidia_gpu_allocation_info`.

The two views are compared as one mapping, (namespace, pod, container, resource) → device ids,
so that a device attributed to the wrong container, a missing pod or a pod counted twice all
show. A time-sliced replica `<id>::<n>` names its device `<id>`: the exporter labels a series
with the device's uuid, not the replica (docs/metrics.md, "Shared GPUs"), so the kubelet's ids
are compared without their replica suffix.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from local_image import IMAGE

from support import Samples, samples

ALLOCATED = "nvidia_gpu_allocation_info"
# (namespace, pod, container, resource) → the device ids it holds
Held = dict[tuple[str, str, str, str], frozenset[str]]


def pod_spec(
    containers: Mapping[str, Mapping[str, int]], restart: str = "Always"
) -> dict[str, Any]:
    """A pod spec of the local pause image: one container per entry, its GPU limits."""
    return {
        "restartPolicy": restart,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": name,
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "resources": {"limits": dict(limits)},
            }
            for name, limits in containers.items()
        ],
    }


def deployment(name: str, replicas: int, limits: Mapping[str, int]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec({"main": limits})},
        },
    }


def job(name: str, limits: Mapping[str, int]) -> dict[str, Any]:
    """A Job whose one pod runs until deleted (the pause image never exits)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": pod_spec({"main": limits}, restart="Never"),
            },
        },
    }


def bare_pod(name: str, containers: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """A pod of no controller and no nodeName: the scheduler binds it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": pod_spec(containers),
    }


def listed(response: Any, prefix: str = "nvidia.com/") -> Held:
    """The kubelet's pod-resources List answer as the mapping, replicas' `::<n>` dropped."""
    held: dict[tuple[str, str, str, str], set[str]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(prefix):
                    continue
                key = (pod.namespace, pod.name, container.name, devices.resource_name)
                ids = {device.partition("::")[0] for device in devices.device_ids}
                held.setdefault(key, set()).update(ids)
    return {key: frozenset(ids) for key, ids in held.items()}


def replica_ids(response: Any) -> list[str]:
    """Every allocated id the kubelet lists, replicas' suffixes kept."""
    return [
        device
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        for device in devices.device_ids
    ]


def id_resources(response: Any) -> list[str]:
    """The resource of each id the kubelet's List allocates (a replica counts once)."""
    return [
        devices.resource_name
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        for _ in devices.device_ids
    ]


def _held(series: Iterable[Mapping[str, str]]) -> Held:
    held: dict[tuple[str, str, str, str], set[str]] = {}
    for labels in series:
        key = (labels["namespace"], labels["pod"], labels["container"], labels["resource"])
        held.setdefault(key, set()).add(labels["uuid"])
    return {key: frozenset(ids) for key, ids in held.items()}


def exported(parsed: Samples) -> Held:
    """The exporter's `nvidia_gpu_allocation_info` series of one /metrics as the mapping."""
    return _held(dict(labels) for (name, labels), _ in parsed.items() if name == ALLOCATED)


def queried(results: Iterable[Mapping[str, Any]]) -> Held:
    """The same from a PromQL answer (Prometheus.query's list)."""
    return _held(result["metric"] for result in results)


def metrics_at(address: str, port: int) -> Samples | None:
    """/metrics of an exporter at `address` (a pod's IP on the node's bridge); None while it
    does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as answer:
            return samples(answer.read())
    except OSError:
        return None
