"""A real kubelet for the tests: the podresources/v1 gRPC service on a unix socket.

It is the demo's pod-resources server (grpcio's synchronous server) with fault hooks, so it
answers from its own threads and never needs (or blocks) the test's event loop, just as the
real kubelet is another process. What it answers is plain attributes that a test may change at
any time: the pods, the allocatable devices, a delay, an error, an old kubelet without
GetAllocatableResources. `stop()` and `start()` on the same path play a kubelet restart: the
socket file disappears and a new one appears.

The builders below (`pod`, `container`, `devices`, `claim`, `claim_device`, `pods_of_size`)
keep test data short and shaped as the kubelet sends it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import grpc

from kube_gpu_exporter.demo.pod_resources_server import PodResourcesServer
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2

RATE_LIMITED = (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")  # the kubelet's


def devices(resource: str, *ids: str, numa: int | None = None) -> api_pb2.ContainerDevices:
    """One ContainerDevices entry; the kubelet sends one per resource and NUMA node."""
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)]) if numa is not None else None
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=ids, topology=topology)


def claim_device(
    driver: str, pool: str, device: str, share_id: str | None = None
) -> api_pb2.ClaimResource:
    resource = api_pb2.ClaimResource(
        driver_name=driver,
        pool_name=pool,
        device_name=device,
        cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{driver}/claim={device}")],
    )
    if share_id is not None:
        resource.share_id = share_id
    return resource


def claim(namespace: str, name: str, *resources: api_pb2.ClaimResource) -> api_pb2.DynamicResource:
    return api_pb2.DynamicResource(
        claim_namespace=namespace, claim_name=name, claim_resources=resources
    )


def container(
    name: str,
    *entries: api_pb2.ContainerDevices,
    claims: Iterable[api_pb2.DynamicResource] = (),
    cpu_ids: Iterable[int] = (),
) -> api_pb2.ContainerResources:
    return api_pb2.ContainerResources(
        name=name, devices=entries, dynamic_resources=claims, cpu_ids=cpu_ids
    )


def pod(namespace: str, name: str, *containers: api_pb2.ContainerResources) -> api_pb2.PodResources:
    return api_pb2.PodResources(namespace=namespace, name=name, containers=containers)


def pods_of_size(min_bytes: int) -> list[api_pb2.PodResources]:
    """Enough pods (one GPU each, long names, many NIC ids) for a List answer ≥ `min_bytes`.

    Each pod holds exactly one `nvidia.com/gpu` device `GPU-big-<i>`, so a test can check
    that a large answer was parsed completely.
    """
    nic_ids = [f"nic-{n:04d}-0000-0000-0000-000000000000" for n in range(50)]

    def one(i: int) -> api_pb2.PodResources:
        return pod(
            "team-" + "n" * 55,
            f"{'inference-server-' * 12}{i}",
            container(
                "model-" + "c" * 55,
                devices("nvidia.com/gpu", f"GPU-big-{i}"),
                devices("example.com/nic", *nic_ids),
            ),
        )

    per_pod = one(0).ByteSize() + 4  # + field tag and length prefix
    pods = [one(i) for i in range(min_bytes // per_pod + 1)]
    size = api_pb2.ListPodResourcesResponse(pod_resources=pods).ByteSize()
    assert size >= min_bytes, (size, min_bytes)
    return pods


def kubelet_args(socket: Path, interval: str = "0.5s") -> list[str]:
    """`serve`'s flags to attribute through the kubelet on `socket`, collecting as often."""
    return [
        f"--collector.interval={interval}",
        f"--kubelet.pod-resources-socket={socket}",
        f"--kubelet.interval={interval}",
    ]


class FakeKubelet(PodResourcesServer):
    """The kubelet's pod-resources server at `socket_path`; a context manager that starts it.

    Attributes a test sets (read on every call):
      pods, allocatable          what List and GetAllocatableResources return
      delay                      seconds to wait before answering (ends early if the caller
                                 gives up), to play a stalled kubelet
      error                      (StatusCode, details) to fail List and
                                 GetAllocatableResources with, e.g. RATE_LIMITED
      allocatable_unimplemented  answer GetAllocatableResources with UNIMPLEMENTED (< 1.21)
      allocatable_error          (StatusCode, details) to fail GetAllocatableResources alone
                                 with, e.g. UNKNOWN as 1.21–1.22 do with its feature gate off
    `calls` counts the calls per method name.
    """

    def __init__(self, socket_path: Path) -> None:
        super().__init__(socket_path)
        self.delay = 0.0
        self.error: tuple[grpc.StatusCode, str] | None = None
        self.allocatable_error: tuple[grpc.StatusCode, str] | None = None
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def start(self) -> None:
        self._stopping.clear()
        super().start()

    def stopping(self) -> None:
        self._stopping.set()

    def restart(self) -> None:
        self.stop()
        self.start()

    def list_response_size(self) -> int:
        """Bytes of the List answer as it would be sent now."""
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods).ByteSize()

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def before_answer(self, method: str, context: grpc.ServicerContext) -> None:
        """Count the call, then play the configured delay and error."""
        with self._lock:
            self.calls[method] += 1
        if method == "GetAllocatableResources" and self.allocatable_unimplemented:
            return
        if method == "GetAllocatableResources" and self.allocatable_error is not None:
            context.abort(*self.allocatable_error)
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline and context.is_active():
            if self._stopping.wait(0.01):
                break
        if self.error is not None:
            code, details = self.error
            context.abort(code, details)
