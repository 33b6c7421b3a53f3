"""A real node joined to the test bench's control plane: containerd with runc (Debian's
packages) and the kubelet built from k8s.io/kubernetes at the control plane's version
(`make node-bin`).

What it takes on this machine kind (checked here): cgroup v1 only and
no systemd, so the kubelet runs with `cgroupDriver: cgroupfs` and `failCgroupV1: false`, and
runc with `SystemdCgroup = false`; the sandbox refuses a negative oom_score_adj, so the CRI
plugin has `restrict_oom_score_adj = true` (else runc fails "can't get final child's PID from
pipe: EOF"); no registry, so the sandbox image and the pods' image are the local pause image
(local_image.py) imported from a docker-archive with `ctr images import`, and pods say
`imagePullPolicy: Never`.

Everything of the node lives in folders of its own: containerd's root, state, socket and
config and the kubelet's `--root-dir` (the pod-resources socket is
`<root>/pod-resources/kubelet.sock`) in a short temporary folder (`/tmp/kge-node-*`: a unix
socket's path has at most 107 bytes, which a pytest-xdist worker's folder overruns),
certificates, configuration and logs in the test's work folder. Two things are fixed
paths of the kubelet's own and so shared by every node on the machine: the device-plugin
folder `/var/lib/kubelet/device-plugins/` (k8s.io/kubelet's DevicePluginPath) and the cgroup
hierarchy's `kubepods` folders; one node runs at a time (a lock file makes a second wait).

Networking: the one CNI network is Debian's `bridge` and `host-local` plugins on a bridge of
the node's own (`kgebr<pid>`, removed at teardown) holding 10.214.<pid % 256>.1 on the
machine's side, with no forwarding and no masquerading: a pod that is not hostNetwork gets its
own network namespace and an address in that /24, and reaches the node's other pods and the
bridge's address only (the kubelet's probes come from there). (The loopback
plugin alone is not enough: containerd 1.6 wants an `eth0` in the result, "failed to find
network info for sandbox".) The kubelet reports the node Ready once the runtime's network
is. The node's InternalIP is whatever the kubelet finds; nothing in these tests sends
traffic to it (no probes, no exec or logs through the API server).

Teardown: the node's pods are deleted (the kubelet stops their containers), the kubelet
stops, every task and container containerd still holds is killed and removed with `ctr`,
whatever is still mounted under the short folder is unmounted, containerd stops, the
bridge and the short folder are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from control_plane import ControlPlane
from local_image import IMAGE, write_archive
from real_binaries import require

from kube_gpu_exporter.demo.children import ended_with_parent
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2, api_pb2_grpc
from support import free_port, stop_process, wait_until

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
_NODE_LOCK = Path("/run/kge-real-node.lock")
DEBIAN_PACKAGES = ("containerd", "runc")


@dataclass
class RealNode:
    """A running node: its name, folders and logs."""

    name: str
    plane: ControlPlane
    workdir: Path
    root_dir: Path
    containerd_socket: Path
    logs: dict[str, Path] = field(default_factory=dict)
    _restart_kubelet: Callable[[Callable[[], None] | None], None] | None = None
    # the bridge's address on the machine's side: the Node's InternalIP with node_ip_on_bridge
    bridge_address: str = ""

    def restart_kubelet(self, while_down: Callable[[], None] | None = None) -> None:
        """Stop the kubelet (SIGTERM), call `while_down()`, and start it again with the same
        flags and folders, as an upgrade or a crash does: its sockets are made anew, and its
        device-plugin folder emptied but for its checkpoint. Returns once the Node is Ready
        again. (Without `while_down` it is down for well under a second.)"""
        assert self._restart_kubelet is not None, "not started by run_node"
        self._restart_kubelet(while_down)

    @property
    def pod_resources_socket(self) -> Path:
        return self.root_dir / "pod-resources" / "kubelet.sock"

    def pod_resources(self) -> Any:
        """The kubelet's pod-resources List (v1), through the exporter's generated stubs."""
        with grpc.insecure_channel(f"unix://{self.pod_resources_socket}") as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            return stub.List(api_pb2.ListPodResourcesRequest(), timeout=10)

    def allocatable(self) -> dict[str, str]:
        """The Node's status.allocatable."""
        return dict(self.node()["status"].get("allocatable", {}))

    def log_tail(self, component: str, lines: int = 40) -> str:
        text = self.logs[component].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def node(self) -> Any:
        return self.plane.ok("GET", f"/api/v1/nodes/{self.name}")

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def pod(self, name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
        """A bare pod bound to this node (no scheduler needed) running the local pause image;
        `spec` entries override the pod spec's (`hostNetwork=True`), `resources` is the one
        container's and `container` overrides its other fields (image, args, env …)."""
        resources = spec.pop("resources", {})
        container = spec.pop("container", {})
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeName": self.name,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 1,
                "enableServiceLinks": False,
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "resources": resources,
                        **container,
                    }
                ],
                **spec,
            },
        }
        created: dict[str, Any] = self.plane.ok(
            "POST", f"/api/v1/namespaces/{namespace}/pods", body
        )
        return created

    def wait_pod_phase(
        self, name: str, phase: str = "Running", namespace: str = "default", timeout: float = 120
    ) -> Any:
        def reached() -> Any:
            pod = self.plane.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
            now = pod.get("status", {}).get("phase")
            if now == phase:
                return pod
            if now in ("Failed", "Succeeded"):  # for good: no use waiting
                status = pod.get("status", {})
                pytest.fail(f"pod {name} {now}: {status.get('reason')}: {status.get('message')}")
            return None

        try:
            return wait_until(reached, timeout=timeout, what=f"pod {name} {phase}")
        except BaseException:
            _, pod = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
            print(json.dumps(pod, indent=1)[-3000:])
            print(self.log_tail("kubelet", 60))
            raise


def require_debian_packages() -> None:
    """containerd, runc and ctr from Debian (`make system-deps` installs them)."""
    missing = [cmd for cmd in ("containerd", "containerd-shim-runc-v2", "ctr", "runc")
               if shutil.which(cmd) is None]  # fmt: skip
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not on PATH: run `make system-deps` (Debian's "
            f"{' '.join(DEBIAN_PACKAGES)})",
            pytrace=False,
        )


def _containerd_config(work: Path, socket: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{work}/root"
state = "{work}/state"

[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = "{work}/debug.sock"
[metrics]
  address = ""

[{cri}]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{work}/cni"
"""


def _kubelet_config(root: Path, containerd_socket: Path, extra: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "imageServiceEndpoint": f"unix://{containerd_socket}",
        "address": "127.0.0.1",
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "volumePluginDir": str(root / "volume-plugins"),
        "staticPodPath": str(root / "manifests"),
        "registerNode": True,
        "nodeStatusUpdateFrequency": "2s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        # a test machine's disk may be fuller than the defaults allow: no eviction, no image GC
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "protectKernelDefaults": False,
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
    }
    config.update(extra)
    return config


def _bridge_name() -> str:
    return f"kgebr{os.getpid()}"[:15]


def _pod_prefix() -> str:
    """The first three octets of the node's pod /24 (10.214.<pid % 256>)."""
    return f"10.214.{os.getpid() % 256}"


def _cni_network(node: RealNode) -> dict[str, Any]:
    prefix = _pod_prefix()
    return {
        "cniVersion": "1.0.0",
        "name": "kge-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": _bridge_name(),
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": f"{prefix}.0/24", "gateway": f"{prefix}.1"}]],
                    "dataDir": str(node.workdir / "cni-ipam"),
                },
            }
        ],
    }


def _unmount_under(folder: Path) -> None:
    """Unmount (lazily, deepest first) whatever is still mounted under `folder`."""
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts]
    for target in sorted((t for t in targets if t.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def _start(
    name: str, argv: Sequence[str], workdir: Path, stack: ExitStack | None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `name` with its output appended to `workdir/<name>.log`; stopped when `stack`
    closes (None: the caller stops it)."""
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            ended_with_parent(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
        )
    if stack is not None:
        stack.callback(_stop, proc)
    return proc, log_path


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    stop_process(proc, timeout)


def _alive(proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    if proc.poll() is not None:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"{what} exited with {proc.returncode}:\n{tail}", pytrace=False)


def _clear_containerd(node: RealNode) -> None:
    """Kill and remove every task and container (the pods' and the sandboxes')."""
    tasks = node.ctr("tasks", "ls", "-q").stdout.split()
    for task in tasks:
        node.ctr("tasks", "kill", "--signal", "SIGKILL", task)
    for task in tasks:
        for _ in range(20):
            if node.ctr("tasks", "delete", "--force", task).returncode == 0:
                break
    for container in node.ctr("containers", "ls", "-q").stdout.split():
        node.ctr("containers", "delete", container)


@contextmanager
def run_node(
    plane: ControlPlane,
    workdir: Path,
    *,
    name: str = "kge-node",
    kubelet_config: dict[str, Any] | None = None,
    kubelet_version: str | None = None,
    node_ip_on_bridge: bool = False,
    timeout: float = 180,
) -> Iterator[RealNode]:
    """containerd + the kubelet, joined to `plane` as Node `name`; yields once the Node is
    Ready and the local image is loaded. `kubelet_version`: another pinned kubelet than the
    control plane's (real_components.K8S_OLDEST_KUBELET, within the version-skew policy).
    `node_ip_on_bridge`: the Node's InternalIP is the bridge's address (`--node-ip`), so that a
    hostNetwork pod's IP, which the kubelet probes and a Service lists, is on the bridge and
    not the machine's own address."""
    kubelet_bin = require("kubelet", kubelet_version)
    require_debian_packages()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    with ExitStack() as stack:
        lock = stack.enter_context(_NODE_LOCK.open("w"))
        fcntl.flock(lock, fcntl.LOCK_EX)  # one node per machine: see the module's docstring
        # a unix socket's path has at most 107 bytes, and a pytest-xdist worker's folder is
        # long enough to pass it with containerd's; the sockets' folders are in a short one
        short = Path(tempfile.mkdtemp(prefix="kge-node-"))
        stack.callback(shutil.rmtree, short, ignore_errors=True)
        stack.callback(_unmount_under, short)
        containerd_dir = short / "containerd"
        root = short / "kubelet"
        for folder in (containerd_dir / "cni", root / "manifests", root / "volume-plugins"):
            folder.mkdir(parents=True, exist_ok=True)
        socket = containerd_dir / "containerd.sock"
        node = RealNode(name, plane, workdir, root, socket)
        node.bridge_address = f"{_pod_prefix()}.1"

        # the one CNI network (Debian's bridge and host-local plugins): a bridge of the node's
        # own holding <prefix>.1 on this side (the kubelet's probes reach the pods on the
        # link), no forwarding, no masquerading, pods in a /24 of 10.214.0.0/16 picked from the
        # process id. The kubelet reports the node Ready only once the runtime's network is
        stack.callback(
            subprocess.run, ["ip", "link", "delete", _bridge_name()], capture_output=True
        )
        for command in (
            ["link", "add", _bridge_name(), "type", "bridge"],
            ["addr", "add", f"{_pod_prefix()}.1/24", "dev", _bridge_name()],
            ["link", "set", _bridge_name(), "up"],
        ):
            done = subprocess.run(["ip", *command], capture_output=True, text=True)
            assert done.returncode == 0, f"ip {' '.join(command)}: {done.stderr}"
        (containerd_dir / "cni" / "10-kge.conflist").write_text(json.dumps(_cni_network(node)))
        config = containerd_dir / "config.toml"
        config.write_text(_containerd_config(containerd_dir, socket))
        containerd, node.logs["containerd"] = _start(
            "containerd", ["containerd", "--config", str(config)], workdir, stack
        )
        stack.callback(_clear_containerd, node)

        def containerd_up() -> bool:
            _alive(containerd, "containerd", node.logs["containerd"])
            return socket.exists() and node.ctr("version").returncode == 0

        wait_until(containerd_up, timeout=timeout, what="containerd serving")
        archive = write_archive(workdir / "pause-image.tar")
        loaded = node.ctr("images", "import", str(archive))
        assert loaded.returncode == 0, f"ctr images import: {loaded.stderr}"

        # a kubelet reads the device manager's checkpoint from the fixed folder: one that an
        # earlier node left would bring its resources back (at 0 allocatable) on this one
        if DEVICE_PLUGIN_DIR.is_dir():
            for leftover in DEVICE_PLUGIN_DIR.iterdir():
                leftover.unlink(missing_ok=True)
        kubeconfig = workdir / "kubelet.kubeconfig"
        shutil.copyfile(plane.kubeconfig, kubeconfig)
        kubelet_yaml = workdir / "kubelet-config.yaml"
        settings = _kubelet_config(root, socket, kubelet_config or {})
        kubelet_yaml.write_text(yaml.safe_dump(settings))
        kubelet_argv = [
            str(kubelet_bin),
            f"--config={kubelet_yaml}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={root}",
            f"--cert-dir={workdir / 'kubelet-pki'}",
            f"--hostname-override={name}",
            "--v=2",
            *([f"--node-ip={node.bridge_address}"] if node_ip_on_bridge else []),
        ]
        kubelet, node.logs["kubelet"] = _start("kubelet", kubelet_argv, workdir, None)
        stack.callback(lambda: _stop(kubelet))  # the one running then: restart replaces it
        healthz = f"http://127.0.0.1:{settings['healthzPort']}/healthz"

        def ready() -> bool:
            _alive(kubelet, "kubelet", node.logs["kubelet"])
            with urllib.request.urlopen(healthz, timeout=5) as answer:
                if answer.status != 200:
                    return False
            status, found = plane.request("GET", f"/api/v1/nodes/{name}")
            if status != 200:
                return False
            conditions = found.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        def probe() -> bool:
            try:
                return ready()
            except OSError:
                return False

        def wait_ready() -> None:
            try:
                wait_until(probe, timeout=timeout, what=f"node {name} Ready")
            except BaseException:
                print(node.log_tail("kubelet", 80))
                raise

        wait_ready()

        def restart(while_down: Callable[[], None] | None) -> None:
            nonlocal kubelet
            _stop(kubelet, timeout=60)
            if while_down is not None:
                while_down()
            # the Node stays Ready in the API until the kubelet posts again: wait for a new
            # heartbeat, not the old condition
            before = _ready_heartbeat(node)
            kubelet, _ = _start("kubelet", kubelet_argv, workdir, None)
            wait_until(
                lambda: _ready_heartbeat(node) not in ("", before) or None,
                timeout=timeout,
                what="the restarted kubelet's heartbeat",
            )
            wait_ready()

        node._restart_kubelet = restart
        # stop pods the kubelet's own way first: their cgroups and mounts go with them
        stack.callback(_delete_pods, node)
        yield node


def _ready_heartbeat(node: RealNode) -> str:
    """The Ready condition's lastHeartbeatTime, or '' when it is not True."""
    for condition in node.node().get("status", {}).get("conditions", []):
        if condition["type"] == "Ready" and condition["status"] == "True":
            return str(condition.get("lastHeartbeatTime", ""))
    return ""


def _delete_pods(node: RealNode) -> None:
    # DaemonSets first: their controller would put a deleted pod back on the node
    for daemonset in node.plane.ok("GET", "/apis/apps/v1/daemonsets").get("items", []):
        meta = daemonset["metadata"]
        node.plane.request(
            "DELETE", f"/apis/apps/v1/namespaces/{meta['namespace']}/daemonsets/{meta['name']}"
        )
    on_node = f"/api/v1/pods?fieldSelector=spec.nodeName={node.name}"
    for pod in node.plane.ok("GET", on_node).get("items", []):
        meta = pod["metadata"]
        node.plane.request(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 1},
        )
    # the containers are removed with ctr next anyway
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: not node.plane.ok("GET", on_node)["items"] or None,
            timeout=30,
            what="the node's pods gone",
        )
