"""A real kubelet for the tests: the podresources/v1 gRPC service on a unix socket.

It is grpcio's synchronous server, so it answers from its own threads and never needs (or
blocks) the test's event loop, just as the real kubelet is another process. What it answers
is plain attributes that a test may change at any time: the pods, the allocatable devices, a
delay, an error, an old kubelet without GetAllocatableResources. `stop()` and `start()` on the
same path play a kubelet restart: the socket file disappears and a new one appears.

The builders below (`pod`, `container`, `devices`, `claim`, `claim_device`, `pods_of_size`)
keep test data short and shaped as the kubelet sends it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc

from kube_gpu_exporter.exporter.podresources.v1 import api_pb2, api_pb2_grpc

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


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self._kubelet._answer("List", context)
        return api_pb2.ListPodResourcesResponse(pod_resources=self._kubelet.pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        if self._kubelet.allocatable_unimplemented:
            self._kubelet._count("GetAllocatableResources")
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        self._kubelet._answer("GetAllocatableResources", context)
        return api_pb2.AllocatableResourcesResponse(devices=self._kubelet.allocatable)

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        self._kubelet._answer("Get", context)
        for candidate in self._kubelet.pods:
            if (candidate.namespace, candidate.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=candidate)
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} not found in {request.pod_namespace}",
        )


class FakeKubelet:
    """The kubelet's pod-resources server at `socket_path`; a context manager that starts it.

    Attributes a test sets (read on every call):
      pods, allocatable          what List and GetAllocatableResources return
      delay                      seconds to wait before answering (ends early if the caller
                                 gives up), to play a stalled kubelet
      error                      (StatusCode, details) to fail List and
                                 GetAllocatableResources with, e.g. RATE_LIMITED
      allocatable_unimplemented  answer GetAllocatableResources with UNIMPLEMENTED (< 1.21)
    `calls` counts the calls per method name.
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.pods: list[api_pb2.PodResources] = []
        self.allocatable: list[api_pb2.ContainerDevices] = []
        self.delay = 0.0
        self.error: tuple[grpc.StatusCode, str] | None = None
        self.allocatable_unimplemented = False
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Listen on the socket path, replacing a leftover file as the kubelet does."""
        assert self._server is None, "already running"
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._stopping.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop at once (in-flight calls are cancelled) and remove the socket file."""
        server, self._server = self._server, None
        if server is not None:
            self._stopping.set()
            server.stop(grace=None).wait(10)
        self.socket_path.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def list_response_size(self) -> int:
        """Bytes of the List answer as it would be sent now."""
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods).ByteSize()

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _count(self, method: str) -> None:
        with self._lock:
            self.calls[method] += 1

    def _answer(self, method: str, context: grpc.ServicerContext) -> None:
        """Count the call, then play the configured delay and error."""
        self._count(method)
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline and context.is_active():
            if self._stopping.wait(0.01):
                break
        if self.error is not None:
            code, details = self.error
            context.abort(code, details)
