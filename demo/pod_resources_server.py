"""A kubelet pod-resources server (podresources/v1 over a unix socket) serving a fixed listing.

The demo's node has no kubelet, so this stands in for it with the same protocol the exporter
speaks to a real one. The tests' fake kubelet builds on it, adding delays and errors through
`before_answer`.
"""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc

from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2, api_pb2_grpc


class PodResourcesServer:
    """Listens on `socket_path`; `pods` and `allocatable` are read on every call."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.pods: list[api_pb2.PodResources] = []
        self.allocatable: list[api_pb2.ContainerDevices] = []
        self.allocatable_unimplemented = False
        self._server: grpc.Server | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def before_answer(self, method: str, context: grpc.ServicerContext) -> None:
        """Called before each answer; a subclass may delay it or abort the call."""

    def start(self) -> None:
        """Listen on the socket path, replacing a leftover file as the kubelet does."""
        if self._server is not None:
            raise RuntimeError("already running")
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), server
        )
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop at once (in-flight calls are cancelled) and remove the socket file."""
        server, self._server = self._server, None
        if server is not None:
            self.stopping()
            server.stop(grace=None).wait(10)
        self.socket_path.unlink(missing_ok=True)

    def stopping(self) -> None:
        """Called as the server stops, before in-flight calls are cancelled."""

    def __enter__(self) -> PodResourcesServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, server: PodResourcesServer) -> None:
        self._server = server

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self._server.before_answer("List", context)
        return api_pb2.ListPodResourcesResponse(pod_resources=self._server.pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        self._server.before_answer("GetAllocatableResources", context)
        if self._server.allocatable_unimplemented:  # a kubelet before 1.21
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return api_pb2.AllocatableResourcesResponse(devices=self._server.allocatable)

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        self._server.before_answer("Get", context)
        for candidate in self._server.pods:
            if (candidate.namespace, candidate.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=candidate)
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} not found in {request.pod_namespace}",
        )
