"""The demo's cluster: the story node's pods in the API server, the cgroups that tie the
node's processes to them, and a few more nodes and pending GPU pods for the cluster view.

The simulated node's kubelet names pods, but only the API server says which container a
process runs in, and that is what splits a time-sliced GPU between its pods. So the story's
pods are served with container ids, and a small procfs under the work folder gives each
simulated process the cgroup file the kubelet would have made for it.

Around the story node, four more nodes make three kinds of waiting visible in
`kube-gpu-exporter cluster` and `explain`: a 2-GPU pod with one free GPU on each of four
nodes (fragmented), an 8-GPU pod whose only empty node carries a taint it does not tolerate,
and a Job in a namespace whose GPU quota is used up (its pods are refused at creation).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kube_gpu_exporter.demo.kube_api import KubeApiServer, make_event, make_pod
from kube_gpu_exporter.demo.kube_api.cluster_objects import (
    GPU_TAINT,
    make_gpu_pod,
    make_node,
    make_quota,
    quota_refusal,
)
from kube_gpu_exporter.demo.kubelet_listing import allocatable, pod_resources
from kube_gpu_exporter.exporter.simulated.scenario import Scenario

STORY_NODE = "gpu-node-0"
GPU = "nvidia.com/gpu"
RESEARCH_TAINT = {"key": "dedicated", "value": "research", "effect": "NoSchedule"}
FRAGMENTED_POD = ("ml", "llm-sft-0")  # the pod the banner explains
# The story's workloads, where the pod is one of a controller's.
OWNERS = {
    ("ml", "llm-pretrain-0"): ("StatefulSet", "llm-pretrain"),
    ("ml", "finetune-llama"): ("Job", "finetune-llama"),
    **{("serving", f"chat-{n}"): ("StatefulSet", "chat") for n in range(3)},
}
# Around the story node: (node, taints, [(namespace, pod, GPUs)]) — 8 H100s each.
Holders = list[tuple[str, str, int]]
NODES: tuple[tuple[str, tuple[Mapping[str, str], ...], Holders], ...] = (
    (
        "gpu-node-1",
        (),
        [("ml", "train-a-0", 4), ("research", "sweep-0", 2), ("research", "sweep-1", 1)],
    ),
    ("gpu-node-2", (), [("ml", "train-a-1", 4), ("ml", "train-b-0", 3)]),
    (
        "gpu-node-3",
        (),
        [("ml", "train-a-2", 4), ("research", "sweep-2", 1), ("serving", "rerank-0", 2)],
    ),
    ("gpu-node-4", (RESEARCH_TAINT,), []),
)
PENDING = ((*FRAGMENTED_POD, 2), ("ml", "pretrain-70b-0", 8))
QUOTA_NAMESPACE, QUOTA_GPUS = "research", 4  # the three sweep pods hold all four
CGROUP = (  # as the kubelet's systemd driver and containerd name them
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice/"
    "cri-containerd-{cid}.scope\n"
)


def populate(api: KubeApiServer, scenario: Scenario, now: datetime | None = None) -> None:
    """Put the nodes, the story node's pods, the other nodes' and the pending pods, and the
    used-up quota into `api`."""
    now = now or datetime.now(UTC)
    story = {name: str(n) for name, n in _story_allocatable(scenario).items()}
    api.put_node(make_node(STORY_NODE, None, allocatable=story))
    for pod in _story_pods(scenario):
        api.put(pod)
    for node, taints, holders in NODES:
        api.put_node(make_node(node, 8, taints=(GPU_TAINT, *taints)))
        for namespace, name, gpus in holders:
            api.put(_gpu_pod(namespace, name, gpus, now - timedelta(hours=3), node))
    for minutes, (namespace, name, gpus) in zip((12, 40), PENDING, strict=True):
        api.put(_gpu_pod(namespace, name, gpus, now - timedelta(minutes=minutes)))
    quota = make_quota("gpu-quota", QUOTA_NAMESPACE, hard=QUOTA_GPUS, used=QUOTA_GPUS)
    api.put_quota(quota)


def record_refusal(api: KubeApiServer, count: int) -> None:
    """The Job controller's FailedCreate event for the sweep pod the quota refuses, with the
    `count` its retries have reached."""
    refusal = quota_refusal(
        "gpu-quota", {f"requests.{GPU}": "1"}, used=str(QUOTA_GPUS), pod="sweep-3-x7k2p"
    )
    name = "sweep.17f3a2b4c5d6e7f8"
    event = make_event(
        name,
        QUOTA_NAMESPACE,
        message=refusal,
        count=count,
        uid=_uid(QUOTA_NAMESPACE, name),
        involved=("Job", "sweep"),
    )
    api.put_event(event)


def write_procfs(root: Path, scenario: Scenario) -> Path:
    """`<root>/<pid>/cgroup` for every process of the scenario (at any time): a device's
    n-th process runs in the container of its (n mod pods)-th pod, in the scenario's order."""
    pods_on: dict[int, list[tuple[str, str, str]]] = {}
    for pod in scenario.spec.kubelet.pods:
        pods_on.setdefault(pod.device, []).append((pod.namespace, pod.name, pod.container))
    for index, device in enumerate(scenario.spec.devices):
        pods = pods_on.get(index, [])
        frames = [device.processes, *(k.processes or [] for k in device.timeline)]
        pids = list(dict.fromkeys(p.pid for frame in frames for p in frame))
        for n, pid in enumerate(pids if pods else []):
            namespace, name, container = pods[n % len(pods)]
            uid = _uid(namespace, name).replace("-", "_")
            cid = _container_id(namespace, name, container)
            (root / str(pid)).mkdir(parents=True, exist_ok=True)
            (root / str(pid) / "cgroup").write_text(CGROUP.format(uid=uid, cid=cid))
    return root


def _story_pods(scenario: Scenario) -> Iterator[dict[str, Any]]:
    """The kubelet's pods as the API serves them, with what they hold as requests."""
    for listed in pod_resources(scenario):
        namespace, name = listed.namespace, listed.name
        containers = {
            c.name: f"containerd://{_container_id(namespace, name, c.name)}"
            for c in listed.containers
        }
        pod = make_pod(
            name,
            namespace,
            node=STORY_NODE,
            uid=_uid(namespace, name),
            owner=OWNERS.get((namespace, name)),
            containers=containers,
        )
        for spec, held in zip(pod["spec"]["containers"], listed.containers, strict=True):
            requests = {d.resource_name: str(len(d.device_ids)) for d in held.devices}
            spec["resources"] = {"requests": requests, "limits": dict(requests)}
        yield pod


def _story_allocatable(scenario: Scenario) -> dict[str, int]:
    return {d.resource_name: len(d.device_ids) for d in allocatable(scenario)}


def _gpu_pod(
    namespace: str, name: str, gpus: int, created: datetime, node: str = ""
) -> dict[str, Any]:
    """A pod of `gpus` whole GPUs with the demo's stable uid: bound to `node`, or Pending and
    unschedulable since `created`."""
    at = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    uid = _uid(namespace, name)
    return make_gpu_pod(
        name, gpus, namespace, node=node, uid=uid, created=at, cpu="8", memory="64Gi"
    )


def _uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kube-gpu-exporter-demo/{namespace}/{name}"))


def _container_id(namespace: str, name: str, container: str) -> str:
    return hashlib.sha256(f"{namespace}/{name}/{container}".encode()).hexdigest()
