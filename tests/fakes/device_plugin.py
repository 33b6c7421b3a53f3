"""The smallest NVIDIA-style device plugin that speaks the kubelet's real device-plugin API
(k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), over whatever NVML it loads: in the test bench,
the fake libnvidia-ml (tests/fakes/fakenvml) through pynvml.

NVIDIA's own plugin (github.com/NVIDIA/k8s-device-plugin) is not served by the Go module
proxy, so this stands in for it. What it imitates, and where from (NVIDIA's public docs — the
plugin's README, "Shared Access to GPUs", "MIG support" — and its sources, internal/rm/ and
internal/plugin/server.go):

- resources: whole GPUs as `nvidia.com/gpu`, device ids the GPU UUIDs; a GPU in MIG mode is
  not a whole GPU, its MIG devices are `nvidia.com/mig-<g>g.<mem>gb` under the `mixed`
  strategy (ids the MIG UUIDs; the profile is the last word of the MIG device's NVML name,
  "NVIDIA A100-SXM4-40GB MIG 3g.20gb"), all `nvidia.com/gpu` under `single`;
- time-slicing (`sharing.timeSlicing.resources[].replicas`): each device of the named resource
  advertised `replicas` times, ids `<id>::<n>`; `renameByDefault: true` (or a resource's own
  `rename`) moves them to `<name>.shared`;
- one gRPC server per resource on `nvidia-<resource suffix>.sock` in the kubelet's
  device-plugin folder, registered with version v1beta1; ListAndWatch sends the whole list
  again on every health change; Allocate answers the envvar strategy's
  `NVIDIA_VISIBLE_DEVICES=<ids>`, replicas' `::<n>` stripped (what the NVIDIA container
  toolkit reads);
- health: NVML Xid critical-error events (nvmlEventSetWait); the Xids NVIDIA counts as the
  application's fault (13, 31, 43, 45, 68, 109) leave the device healthy, any other makes it
  Unhealthy — for an event without a GPU instance, every MIG device of that GPU too — and a
  lost GPU (NVML_ERROR_GPU_IS_LOST) makes every device Unhealthy;
- a new kubelet socket (a kubelet restart removes every socket in the folder) makes it serve
  and register again, as NVIDIA's plugin restarts its servers.

Not imitated: GetPreferredAllocation (not offered), MPS, CDI, device-id strategy `index`,
the config file's other keys. Configuration is a subset of NVIDIA's config file:

    version: v1
    flags: {migStrategy: none|single|mixed}
    sharing:
      timeSlicing:
        renameByDefault: false
        resources: [{name: nvidia.com/gpu, replicas: 4}]

Run: python tests/fakes/device_plugin.py --config FILE [--socket-dir DIR] (with
LD_LIBRARY_PATH and FAKE_NVML_STATE pointing at the fake). The stubs are generated from
deviceplugin/v1beta1/api.proto (a copy of the kubelet's) into the bin cache on first use.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pynvml
import yaml

from kube_gpu_exporter.demo.children import ended_with_parent

API_VERSION = "v1beta1"
DEFAULT_SOCKET_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
PROTO = Path(__file__).with_name("deviceplugin") / "v1beta1" / "api.proto"
# NVIDIA's plugin, internal/rm/health.go: Xids caused by the application, not the GPU
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
NO_INSTANCE = 0xFFFFFFFF
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

log = logging.getLogger("device-plugin")


def stubs(cache: Path | None = None) -> tuple[ModuleType, ModuleType]:
    """(api_pb2, api_pb2_grpc) for the device-plugin API, generated once per .proto content
    into the cache (grpcio-tools' protoc) and imported from there."""
    source = PROTO.read_bytes()
    if cache is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache = Path(xdg) / "kube-gpu-exporter" / "bin"
    out = cache / f"deviceplugin-stubs-{hashlib.sha256(source).hexdigest()[:12]}"
    package = out / "deviceplugin" / "v1beta1"
    if not (package / "api_pb2_grpc.py").is_file():
        from grpc_tools import protoc

        staging = out.with_name(out.name + f".tmp{os.getpid()}")
        (staging / "deviceplugin" / "v1beta1").mkdir(parents=True, exist_ok=True)
        (staging / "deviceplugin" / "v1beta1" / "api.proto").write_bytes(source)
        args = ["protoc", f"-I{staging}", f"--python_out={staging}",
                f"--grpc_python_out={staging}", "deviceplugin/v1beta1/api.proto"]  # fmt: skip
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        with contextlib.suppress(OSError):  # another process got there first
            staging.rename(out)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return (
        importlib.import_module("deviceplugin.v1beta1.api_pb2"),
        importlib.import_module("deviceplugin.v1beta1.api_pb2_grpc"),
    )


@dataclass
class Device:
    """One advertised device id of one resource."""

    id: str
    gpu_uuid: str  # the physical GPU it is on
    uuid: str  # what NVIDIA_VISIBLE_DEVICES names: the GPU's or the MIG device's UUID
    gpu_instance: int | None = None  # a MIG device's GPU instance id
    health: str = HEALTHY


@dataclass
class Config:
    mig_strategy: str = "none"
    rename_by_default: bool = False
    replicas: dict[str, tuple[int, bool]] = field(default_factory=dict)  # name: (n, rename)

    @classmethod
    def load(cls, path: Path | None) -> Config:
        if path is None:
            return cls()
        data = yaml.safe_load(path.read_text()) or {}
        sliced = (data.get("sharing") or {}).get("timeSlicing") or {}
        rename = bool(sliced.get("renameByDefault", False))
        replicas = {
            r["name"]: (int(r["replicas"]), bool(r.get("rename", rename)))
            for r in sliced.get("resources") or []
        }
        return cls((data.get("flags") or {}).get("migStrategy", "none"), rename, replicas)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover(config: Config) -> dict[str, list[Device]]:
    """Resource name → its devices, from NVML, as NVIDIA's resource managers name them."""
    found: dict[str, list[Device]] = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        try:
            mig_mode = pynvml.nvmlDeviceGetMigMode(handle)[0]
        except pynvml.NVMLError_NotSupported:
            mig_mode = 0
        if not mig_mode or config.mig_strategy == "none":
            found.setdefault("nvidia.com/gpu", []).append(Device(uuid, uuid, uuid))
            continue
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue
            mig_uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
            profile = _text(pynvml.nvmlDeviceGetName(mig)).rsplit(" ", 1)[-1]
            name = (
                "nvidia.com/gpu" if config.mig_strategy == "single" else f"nvidia.com/mig-{profile}"
            )
            device = Device(mig_uuid, uuid, mig_uuid, pynvml.nvmlDeviceGetGpuInstanceId(mig))
            found.setdefault(name, []).append(device)
    shared: dict[str, list[Device]] = {}
    for name, devices in found.items():
        if name not in config.replicas:
            shared[name] = devices
            continue
        count, rename = config.replicas[name]
        target = f"{name}.shared" if rename else name
        shared[target] = [
            Device(f"{d.id}::{n}", d.gpu_uuid, d.uuid, d.gpu_instance)
            for d in devices
            for n in range(count)
        ]
    return shared


class ResourceServer:
    """The DevicePlugin service of one resource, on its own socket."""

    def __init__(self, plugin: Plugin, resource: str, devices: list[Device]) -> None:
        self.plugin, self.resource, self.devices = plugin, resource, devices
        suffix = resource.split("/", 1)[1]
        self.socket = plugin.socket_dir / f"nvidia-{suffix}.sock"
        self._server: grpc.Server | None = None

    # the DevicePlugin service (method names are the API's)
    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.plugin.pb.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        while context.is_active() and not self.plugin.stopping.is_set():
            with self.plugin.changed:
                if seen == self.plugin.generation:
                    self.plugin.changed.wait(timeout=1.0)
                    continue
                seen = self.plugin.generation
                listed = [self.plugin.pb.Device(ID=d.id, health=d.health) for d in self.devices]
            log.info("%s: ListAndWatch sends %d devices", self.resource, len(listed))
            yield self.plugin.pb.ListAndWatchResponse(devices=listed)

    def Allocate(self, request: Any, context: Any) -> Any:
        by_id = {d.id: d for d in self.devices}
        answers = []
        for container in request.container_requests:
            unknown = [i for i in container.devices_ids if i not in by_id]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device ids {unknown}")
            visible = list(dict.fromkeys(by_id[i].uuid for i in container.devices_ids))
            log.info("%s: Allocate %s", self.resource, list(container.devices_ids))
            answers.append(
                self.plugin.pb.ContainerAllocateResponse(
                    envs={"NVIDIA_VISIBLE_DEVICES": ",".join(visible)}
                )
            )
        return self.plugin.pb.AllocateResponse(container_responses=answers)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not offered")

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return self.plugin.pb.PreStartContainerResponse()

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.plugin.pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def register(self) -> None:
        kubelet = self.plugin.socket_dir / KUBELET_SOCKET
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            stub = self.plugin.pb_grpc.RegistrationStub(channel)
            stub.Register(
                self.plugin.pb.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource,
                    options=self.plugin.pb.DevicePluginOptions(),
                ),
                timeout=10,
            )
        log.info("%s: registered %d devices on %s", self.resource, len(self.devices), self.socket)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)


class Plugin:
    def __init__(self, config: Config, socket_dir: Path) -> None:
        self.pb, self.pb_grpc = stubs()
        self.socket_dir = socket_dir
        self.stopping = threading.Event()
        self.changed = threading.Condition()
        self.generation = 0
        pynvml.nvmlInit()
        self.servers = [ResourceServer(self, r, d) for r, d in sorted(discover(config).items())]

    def devices(self) -> Iterator[Device]:
        for server in self.servers:
            yield from server.devices

    def mark_unhealthy(self, gpu_uuid: str | None, gpu_instance: int = NO_INSTANCE) -> None:
        """Devices on `gpu_uuid` (every device when None) become Unhealthy; a MIG device only
        when the event names its GPU instance or none."""
        with self.changed:
            for device in self.devices():
                if gpu_uuid is not None and device.gpu_uuid != gpu_uuid:
                    continue
                if gpu_instance not in (NO_INSTANCE, device.gpu_instance) and (
                    device.gpu_instance is not None
                ):
                    continue
                if device.health != UNHEALTHY:
                    log.info("device %s: %s", device.id, UNHEALTHY)
                device.health = UNHEALTHY
            self.generation += 1
            self.changed.notify_all()

    def watch_health(self) -> None:
        """NVIDIA's checkHealth: Xid critical-error events of every GPU."""
        event_set = pynvml.nvmlEventSetCreate()
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            wanted = supported & pynvml.nvmlEventTypeXidCriticalError
            if wanted:
                pynvml.nvmlDeviceRegisterEvents(handle, wanted, event_set)
        while not self.stopping.is_set():
            try:
                event = pynvml.nvmlEventSetWait_v2(event_set, 1000)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError_GpuIsLost:
                self.mark_unhealthy(None)
                continue
            except pynvml.NVMLError as error:
                log.warning("nvmlEventSetWait: %s", error)
                time.sleep(1)
                continue
            xid = int(event.eventData)
            if event.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            if xid in APPLICATION_XIDS:
                log.info("Xid %d: the application's, devices stay healthy", xid)
                continue
            uuid = _text(pynvml.nvmlDeviceGetUUID(event.device))
            log.info("Xid %d on %s", xid, uuid)
            self.mark_unhealthy(uuid, int(event.gpuInstanceId))

    def serve(self) -> None:
        """Serve and register every resource; again whenever the kubelet's socket is new."""
        threading.Thread(target=self.watch_health, daemon=True, name="health").start()
        kubelet = self.socket_dir / KUBELET_SOCKET
        registered: tuple[int, int] | None = None
        while not self.stopping.is_set():
            try:
                stat = kubelet.stat()
                current = (stat.st_ino, stat.st_mtime_ns)
            except FileNotFoundError:
                current = None
            if current is not None and current != registered:
                try:
                    for server in self.servers:
                        server.stop()
                        server.start()
                        server.register()
                    registered = current
                    with self.changed:
                        self.generation += 1
                        self.changed.notify_all()
                except grpc.RpcError as error:
                    log.warning("registration failed, trying again: %s", error)
            self.stopping.wait(0.5)
        for server in self.servers:
            server.stop()


@contextlib.contextmanager
def run_plugin(
    workdir: Path, nvml_env: dict[str, str], config: dict[str, Any] | None = None
) -> Iterator[Path]:
    """This file as a process (the fake NVML in `nvml_env`), its log at `workdir/…log`;
    yields the log's path. SIGTERM at exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__]
    if config is not None:
        (workdir / "device-plugin.yaml").write_text(yaml.safe_dump(config))
        argv += ["--config", str(workdir / "device-plugin.yaml")]
    log_path = workdir / "device-plugin.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            ended_with_parent(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **nvml_env},
        )
    try:
        yield log_path
    finally:
        from support import stop_process  # the tests' (this file also runs alone)

        stop_process(proc, 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path)
    parser.add_argument("--socket-dir", type=Path, default=DEFAULT_SOCKET_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    plugin = Plugin(Config.load(args.config), args.socket_dir)
    for server in plugin.servers:
        log.info("%s: %s", server.resource, [(d.id, d.uuid) for d in server.devices])
    signal.signal(signal.SIGTERM, lambda *_: plugin.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: plugin.stopping.set())
    plugin.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
