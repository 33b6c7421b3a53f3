"""The exporter as deploy/ and the chart run it, for bench/peers.py: the DaemonSet's own flags
with a kubelet and an API server that hold a node's worth of pods.

The flags are read from the generated manifest (deploy/daemonset.yaml, written by
`kube-gpu-exporter generate`), not copied, so a flag the DaemonSet gains is benched at once.
Two of them name things that only exist in a cluster, and are pointed at their stand-ins:
`--web.listen-address` (127.0.0.1 and a free port) and `--kubelet.pod-resources-socket` (a
real gRPC pod-resources server, tests/fakes/kubelet_server.py, in the bench's process).
Everything else, the collection interval included, is the manifest's, and so is the way the
exporter finds the API server: its in-cluster config. The test API server (demo/kube_api: real
HTTP list and watch) answers over TLS with a certificate for 127.0.0.1, named by
KUBERNETES_SERVICE_HOST/PORT; the exporter runs in a mount namespace of its own (`unshare
--mount`, root only) where a tmpfs on /run holds the service account's token, ca.crt and
namespace at /var/run/secrets/kubernetes.io/serviceaccount, as the kubelet mounts them.
`NODE_NAME` comes from the environment, as the DaemonSet's downward API sets it. Where no
mount namespace can be made, the service account becomes `--kubernetes.kubeconfig` for the
same server (the report says which), which also loads the kubeconfig parser and YAML.

The pods are what such a node runs: the GPU pods holding every device (on the MIG node 56
slices over 30 pods, on the H100 node 8 GPUs over 4 pods) and the usual DaemonSet pods without
devices, listed alike by the kubelet and by the API server (labels, an owner, container ids).
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
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


def manifest_container(manifest: Path = MANIFEST) -> tuple[list[str], dict[str, str]]:
    """The exporter container's args and plain env values (MALLOC_ARENA_MAX, ...) in the
    generated DaemonSet; env the downward API fills (NODE_NAME) is set by deployed_node."""
    try:
        daemonset = yaml.safe_load(manifest.read_text())
        containers = daemonset["spec"]["template"]["spec"]["containers"]
        (exporter,) = (c for c in containers if c["name"] == CONTAINER)
        env = {e["name"]: str(e["value"]) for e in exporter.get("env", []) if "value" in e}
        return [str(arg) for arg in exporter["args"]], env
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise BenchError(f"{manifest}: no exporter container args ({err})") from None


def manifest_args(manifest: Path = MANIFEST) -> list[str]:
    """The exporter container's args in the generated DaemonSet."""
    return manifest_container(manifest)[0]


# Run as `sh -c MOUNT_SA <service account folder> <command...>` inside `unshare --mount`: the
# folder appears where in-cluster config reads it, then the command replaces the shell (same
# pid, so /proc/<pid> is the exporter's).
MOUNT_SA = (
    "mount -t tmpfs bench-run /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && "
    'cp "$0"/* /run/secrets/kubernetes.io/serviceaccount/ && exec "$@"'
)


def deployed_command(
    args: list[str], port: int, socket: Path, service_account: Path | None, kubeconfig: Path
) -> list[str]:
    """`args` with the cluster's things replaced by the stand-ins'; fails on a missing one.
    In a mount namespace holding `service_account` when given, else with `kubeconfig`."""
    replaced = {LISTEN: f"{procs.HOST}:{port}", SOCKET: str(socket)}
    out = []
    for arg in args:
        name = arg.split("=", 1)[0]
        out.append(f"{name}={replaced.pop(name)}" if name in replaced else arg)
    if replaced or "--kubernetes.enabled" not in out:
        raise BenchError(f"{MANIFEST}: the exporter's args lack {sorted(replaced)} or the watch")
    command = [sys.executable, "-m", "kube_gpu_exporter.exporter", *out]
    if service_account is None:
        return [*command, f"--kubernetes.kubeconfig={kubeconfig}"]
    return ["unshare", "--mount", "sh", "-c", MOUNT_SA, str(service_account), *command]


def can_mount() -> bool:
    """Whether this user may make a mount namespace and mount in it (root, as the bench runs)."""
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--mount", "sh", "-c", "mount -t tmpfs bench-probe /run"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def service_account(folder: Path, ca: Path) -> Path:
    """What the kubelet mounts for the pod's ServiceAccount: token, ca.crt, namespace."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text("bench-token")
    (folder / "namespace").write_text("kube-gpu-exporter")
    shutil.copy(ca, folder / "ca.crt")
    return folder


def make_certificates(folder: Path) -> Path:
    """A CA and a serving certificate it signs for IP 127.0.0.1 (tls.crt, tls.key); the CA."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr = (folder / name for name in ("ca.key", "ca.crt", "tls.key", "tls.csr"))
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    for args in (
        ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key)],
        ["req", "-x509", "-new", "-key", str(ca_key), "-out", str(ca), "-days", "2",
         "-subj", "/CN=bench API CA"],
        ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
        ["req", "-new", "-key", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(folder / "tls.crt"), "-days", "2", "-extfile", str(ext)],
    ):  # fmt: skip
        done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"openssl {args[0]}: {done.stderr.strip()}")
    return ca


class TlsFront:
    """HTTPS on a port of its own in front of the test API server's plain HTTP (which peeks at
    its sockets, as TLS sockets cannot be): each connection's bytes pumped both ways by two
    threads, so a watch ends on either side as it would without the front."""

    def __init__(self, upstream_port: int, certificates: Path) -> None:
        self._upstream = upstream_port
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(certificates / "tls.crt", certificates / "tls.key")
        self._listener = socket.create_server((procs.HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True, name="tls-front").start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._connection, args=(raw,), daemon=True).start()

    def _connection(self, raw: socket.socket) -> None:
        try:
            client = self._context.wrap_socket(raw, server_side=True)
            upstream = socket.create_connection((procs.HOST, self._upstream))
        except OSError:
            raw.close()
            return
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()

    def close(self) -> None:
        self._listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either side ends, then close both (which ends the other pump too)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for each in (source, sink):
            with suppress(OSError):
                each.close()


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
    in_cluster: bool  # the service account mounted (else a kubeconfig stands for it)


@contextmanager
def deployed_node(state: NodeState, work: Path) -> Iterator[DeployedNode]:
    """A kubelet and an API server holding the node's pods, for as long as the block runs."""
    args, manifest_env = manifest_container()
    held = gpu_pods(state)
    kubelet_socket = work / "kubelet" / "kubelet.sock"
    kubelet_socket.parent.mkdir(parents=True, exist_ok=True)
    in_cluster = can_mount()
    with FakeKubelet(kubelet_socket) as kubelet, KubeApiServer() as api, ExitStack() as stack:
        account, api_port = None, api.port
        if in_cluster:
            ca = make_certificates(work / "api-certificates")
            front = TlsFront(api.port, work / "api-certificates")
            stack.callback(front.close)
            account, api_port = service_account(work / "serviceaccount", ca), front.port
        kubelet.pods = kubelet_pods(held)
        by_resource: dict[str, list[str]] = {}
        for each in held:
            by_resource.setdefault(each.resource, []).extend(each.device_ids)
        kubelet.allocatable = [devices(name, *ids) for name, ids in by_resource.items()]
        listed = api_pods(held)
        for each in listed:
            api.put(each)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-deployed")
        env = {**manifest_env, "NODE_NAME": NODE}
        if in_cluster:  # as the kubelet sets them for the `kubernetes` Service
            env |= {
                "KUBERNETES_SERVICE_HOST": procs.HOST,
                "KUBERNETES_SERVICE_PORT": str(api_port),
            }
        yield DeployedNode(
            command=lambda port: deployed_command(args, port, kubelet_socket, account, kubeconfig),
            env=env,
            pods=len(listed),
            gpu_pods=len(held),
            held=sum(len(each.device_ids) for each in held),
            args=tuple(args),
            in_cluster=in_cluster,
        )
