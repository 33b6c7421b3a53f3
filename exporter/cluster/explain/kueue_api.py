"""`explain` for Kueue: the one read of Kueue's objects (ResourceFlavors, ClusterQueues, the
LocalQueue, every Workload for the quota they hold) and, where served, the pending
workloads' positions from Kueue's visibility API.

Kueue is looked up on `kueue.x-k8s.io/v1beta2`, then v1beta1; a server that serves neither
has no Kueue (`KueueRead.served` False), which is no error: explain then judges the Job's
pod template alone. The visibility API (`visibility.kueue.x-k8s.io`, an aggregated API
Kueue serves only with its VisibilityOnDemand feature) is optional too: not served, the
position is unknown. Every other failure is one InputError line, as api.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import (
    parse_cluster_queue,
    parse_flavor,
)
from kube_gpu_exporter.exporter.cluster.explain.kueue_quota import ClusterQueue, Flavor
from kube_gpu_exporter.exporter.input_errors import InputError

GROUP: Final = "/apis/kueue.x-k8s.io"
VERSIONS: Final = ("v1beta2", "v1beta1")
VISIBILITY: Final = (
    "/apis/visibility.kueue.x-k8s.io/v1beta2",
    "/apis/visibility.kueue.x-k8s.io/v1beta1",
)
NOT_SERVED: Final = frozenset({404, 503})  # 503: an aggregated API whose server is down


@dataclass(frozen=True)
class Position:
    """A pending Workload's place in its LocalQueue and ClusterQueue (0 is the head)."""

    local_queue: int | None
    cluster_queue: int | None


@dataclass
class KueueRead:
    served: bool
    version: str = ""
    flavors: dict[str, Flavor] = field(default_factory=dict)
    queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local_queue: Mapping[str, Any] | None = None  # the one the Job names, None: none such
    workloads: list[Mapping[str, Any]] = field(default_factory=list)


class KueueReader:
    """Reads Kueue's objects through explain's ApiReader (its client and its errors)."""

    def __init__(self, reader: ApiReader) -> None:
        self._reader = reader
        self.version = ""

    def served(self) -> bool:
        for version in VERSIONS:
            if self._optional(f"{GROUP}/{version}", "Kueue's API") is not None:
                self.version = version
                return True
        return False

    def read(self, namespace: str, local_queue: str) -> KueueRead:
        if not self.version and not self.served():
            return KueueRead(served=False)
        base = f"{GROUP}/{self.version}"
        flavors = [parse_flavor(o) for o in self._list(f"{base}/resourceflavors", "flavors")]
        queues = [parse_cluster_queue(o) for o in self._list(f"{base}/clusterqueues", "queues")]
        lq_path = f"{base}/namespaces/{_q(namespace)}/localqueues/{_q(local_queue)}"
        return KueueRead(
            served=True,
            version=self.version,
            flavors={f.name: f for f in flavors if f is not None},
            queues={q.name: q for q in queues if q is not None},
            local_queue=self._optional(lq_path, f"LocalQueue {namespace}/{local_queue}"),
            workloads=self._list(f"{base}/workloads", "Kueue Workloads"),
        )

    def job(self, namespace: str, name: str) -> Mapping[str, Any]:
        path = f"/apis/batch/v1/namespaces/{_q(namespace)}/jobs/{_q(name)}"
        return self._reader.get(f"job {namespace}/{name}", path)

    def workload(self, namespace: str, name: str) -> Mapping[str, Any]:
        if not self.version and not self.served():
            raise InputError("workloads are Kueue's: the cluster serves no kueue.x-k8s.io API")
        path = f"{GROUP}/{self.version}/namespaces/{_q(namespace)}/workloads/{_q(name)}"
        return self._reader.get(f"workload {namespace}/{name}", path)

    def position(self, namespace: str, local_queue: str, workload: str) -> Position | None:
        """The Workload's position from the visibility API; None where it is not served (or
        the Workload is not pending there)."""
        for base in VISIBILITY:
            path = f"{base}/namespaces/{_q(namespace)}/localqueues/{_q(local_queue)}"
            found = self._optional(f"{path}/pendingworkloads", "pending workloads")
            if found is None:
                continue
            for item in found.get("items") or ():
                if isinstance(item, Mapping) and item.get("metadata", {}).get("name") == workload:
                    return Position(
                        _int(item.get("positionInLocalQueue")),
                        _int(item.get("positionInClusterQueue")),
                    )
            return Position(None, None)
        return None

    def _list(self, path: str, what: str) -> list[Mapping[str, Any]]:
        return list(self._reader.items(what, path))

    def _optional(self, path: str, what: str) -> Mapping[str, Any] | None:
        """The object at `path`, None where the server answers 404 (or 503)."""
        return self._reader.optional(what, path, NOT_SERVED)


def _q(text: str) -> str:
    return quote(text, safe="")


def _int(value: Any) -> int | None:
    return value if type(value) is int else None
