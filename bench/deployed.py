"""The exporter as deploy/ and the chart run it, for bench/peers.py: the DaemonSet's own flags
with a kubelet and an API server that hold a node's worth of pods.

The flags are read from the generated manifest (deploy/daemonset.yaml, written by
`kube-gpu-exporter generate`), not copied, so a flag the DaemonSet gains is benched at once.
Three of them name things that only exist in a cluster, and are pointed at their stand-ins:
`--web.listen-address` (127.0.0.1 and a free port), `--kubelet.pod-resources-socket` (a real
gRPC pod-resources server, tests/fakes/kubelet_server.py, in the bench's process) and the
in-cluster service account, which becomes `--kubernetes.kubeconfig` for the test API server
(demo/kube_api: real HTTP list and watch). `NODE_NAME` comes from the environment, as the
DaemonSet's downward API sets it. Everything else, the collection interval included, is the
manifest's.

The pods are what such a node runs: the GPU pods holding every device (on the MIG node 56
slices over 30 pods, on the H100 node 8 GPUs over 4 pods) and the usual DaemonSet pods without
devices, listed alike by the kubelet and by the API server (labels, an owner, container ids).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fake
import procs
import yaml
from errors import BenchError

sys.path.insert(0, str(fake.REPO / "tests" / "fakes"))

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer, make_pod
from kube_gpu_exporter.exporter.generate.daemonset import CONTAINER
from kube_gpu_exporter.exporter.simulated.scenario import NodeState
from kubelet_server import FakeKubelet, container, devices, pod

MANIFEST = fake.REPO / "deploy" / "daemonset.yaml"
# Flags that name the cluster's own things; each is replaced by its stand-in's.
LISTEN, SOCKET = "--web.listen-address", "--kubelet.pod-resources-socket"
# Pods without devices that a GPU node runs: (namespace, name, owner kind, containers)
SYSTEM_PODS = (
    ("kube-system", "kube-proxy", "DaemonSet", ("kube-proxy",)),
    ("kube-system", "cilium", "DaemonSet", ("cilium-agent", "cilium-envoy")),
    ("kube-system", "ebs-csi-node", "DaemonSet", ("ebs-plugin", "node-driver-registrar")),
    ("monitoring", "node-exporter", "DaemonSet", ("node-exporter",)),
    ("gpu-operator", "nvidia-device-plugin", "DaemonSet", ("nvidia-device-plugin",)),
    ("gpu-operator", "nvidia-mig-manager", "DaemonSet", ("nvidia-mig-manager",)),
    ("gpu-operator", "gpu-feature-discovery", "DaemonSet", ("gpu-feature-discovery",)),
    ("kube-gpu-exporter", "kube-gpu-exporter", "DaemonSet", ("exporter",)),
)
# How many devices each GPU pod holds, in turn, until the node's devices are all held.
MIG_POD_SIZES = (2,) * 26 + (1,) * 4  # 56 MIG slices, 30 pods
GPU_POD_SIZES = (4, 2, 1, 1)  # 8 GPUs, 4 pods


def manifest_args(manifest: Path = MANIFEST) -> list[str]:
    """The exporter container's args in the generated DaemonSet."""
    try:
        daemonset = yaml.safe_load(manifest.read_text())
        containers = daemonset["spec"]["template"]["spec"]["containers"]
        (exporter,) = (c for c in containers if c["name"] == CONTAINER)
        return [str(arg) for arg in exporter["args"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise BenchError(f"{manifest}: no exporter container args ({err})") from None


def deployed_command(args: list[str], port: int, socket: Path, kubeconfig: Path) -> list[str]:
    """`args` with the cluster's things replaced by the stand-ins'; fails on a missing one."""
    replaced = {LISTEN: f"{procs.HOST}:{port}", SOCKET: str(socket)}
    out = []
    for arg in args:
        name = arg.split("=", 1)[0]
        out.append(f"{name}={replaced.pop(name)}" if name in replaced else arg)
    if replaced or "--kubernetes.enabled" not in out:
        raise BenchError(f"{MANIFEST}: the exporter's args lack {sorted(replaced)} or the watch")
    # in-cluster config (the service account) → the test server's kubeconfig
    return [sys.executable, "-m", "kube_gpu_exporter.exporter", *out,
            f"--kubernetes.kubeconfig={kubeconfig}"]  # fmt: skip


@dataclass(frozen=True)
class GpuPod:
    namespace: str
    name: str
    resource: str
    device_ids: tuple[str, ...]


def gpu_pods(state: NodeState) -> list[GpuPod]:
    """The GPU pods holding every device: MIG slices where GPUs are split, else whole GPUs."""
    migs = [(gpu.index, mig.uuid) for gpu in state.devices for mig in gpu.mig]
    if migs:
        held = [uuid for _, uuid in migs]
        sizes, resource = MIG_POD_SIZES, f"nvidia.com/mig-{state.devices[0].mig[0].profile}"
    else:
        held = [gpu.uuid for gpu in state.devices]
        sizes, resource = GPU_POD_SIZES, "nvidia.com/gpu"
    if sum(sizes) != len(held):
        raise BenchError(f"{len(held)} devices, pods for {sum(sizes)}")
    out, start = [], 0
    for i, size in enumerate(sizes):
        ids = tuple(held[start : start + size])
        out.append(GpuPod(f"team-{i % 6}", f"train-{i:02d}-7d9f8c", resource, ids))
        start += size
    return out


def _cid(namespace: str, name: str, container_name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}/{container_name}".encode()).hexdigest()
    return f"containerd://{digest}"


def api_pods(gpu: list[GpuPod]) -> list[dict[str, Any]]:
    """The node's pods as the API server lists them."""
    out = []
    for each in gpu:
        out.append(
            make_pod(
                each.name, each.namespace,
                labels={"app": "trainer", "team": each.namespace, "pod-template-hash": "7d9f8c"},
                owner=("Job", each.name.rsplit("-", 1)[0]),
                containers={"main": _cid(each.namespace, each.name, "main")},
            )
        )  # fmt: skip
    for namespace, name, kind, names in SYSTEM_PODS:
        pod_name = f"{name}-x7k2p"
        out.append(
            make_pod(
                pod_name, namespace, labels={"app.kubernetes.io/name": name}, owner=(kind, name),
                containers={c: _cid(namespace, pod_name, c) for c in names},
            )
        )  # fmt: skip
    return out


def kubelet_pods(gpu: list[GpuPod]) -> list[Any]:
    """The node's pods as the kubelet's List answers: devices only where a pod holds some."""
    out = [
        pod(each.namespace, each.name, container("main", devices(each.resource, *each.device_ids)))
        for each in gpu
    ]
    out += [
        pod(namespace, f"{name}-x7k2p", *(container(c) for c in names))
        for namespace, name, _, names in SYSTEM_PODS
    ]
    return out


@dataclass(frozen=True)
class DeployedNode:
    """The stand-ins are up; `command(port)` starts the exporter as deployed against them."""

    command: Callable[[int], list[str]]
    env: dict[str, str]
    pods: int
    gpu_pods: int
    held: int  # devices the GPU pods hold: one nvidia_gpu_allocation_info each
    args: tuple[str, ...]  # the manifest's, as read


@contextmanager
def deployed_node(state: NodeState, work: Path) -> Iterator[DeployedNode]:
    """A kubelet and an API server holding the node's pods, for as long as the block runs."""
    args = manifest_args()
    held = gpu_pods(state)
    socket = work / "kubelet" / "kubelet.sock"
    socket.parent.mkdir(parents=True, exist_ok=True)
    with FakeKubelet(socket) as kubelet, KubeApiServer() as api:
        kubelet.pods = kubelet_pods(held)
        by_resource: dict[str, list[str]] = {}
        for each in held:
            by_resource.setdefault(each.resource, []).extend(each.device_ids)
        kubelet.allocatable = [devices(name, *ids) for name, ids in by_resource.items()]
        listed = api_pods(held)
        for each in listed:
            api.put(each)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-deployed")
        yield DeployedNode(
            command=lambda port: deployed_command(args, port, socket, kubeconfig),
            env={"NODE_NAME": NODE},
            pods=len(listed),
            gpu_pods=len(held),
            held=sum(len(each.device_ids) for each in held),
            args=tuple(args),
        )
