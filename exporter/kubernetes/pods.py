"""The pods of this node, kept current by a list-and-watch on the Kubernetes API.

Attribution on shared GPUs goes PID → cgroup (`cgroups.py`) → container id / pod uid; this
module turns those into (namespace, pod, container) and adds the pod's phase, labels and owner.
The list-and-watch itself (threading, backoff, 410 relists) is `list_watch.py`; readers get an
immutable `PodIndex` swapped in by one assignment and never wait on the API.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.kubernetes.client import KubernetesConfigError
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import Kubeconfig
from kube_gpu_exporter.exporter.kubernetes.list_watch import (
    STOP_WAIT_SECONDS,
    WATCH_SECONDS,
    ListWatch,
    Watcher,
    node_api_client,
)

__all__ = [
    "STOP_WAIT_SECONDS",
    "KubernetesConfigError",
    "PodIndex",
    "PodInfo",
    "PodWatcher",
    "parse_pod",
]


TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
RUNTIME_PREFIX_SEPARATOR = "://"  # containerd://<id>, cri-o://<id>, docker://<id>

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What attribution needs of a pod. `containers` maps bare container id → container name.

    `owner_kind`/`owner_name` name the workload: a ReplicaSet made by a Deployment is reported
    as that Deployment. A Job stays a Job, also when a CronJob made it (its name then ends in
    the schedule's timestamp): resolving the CronJob would need a read of the Job, and the Job
    is the unit that runs and finishes.
    """

    uid: str
    namespace: str
    name: str
    phase: str
    labels: Mapping[str, str] = field(hash=False)
    owner_kind: str
    owner_name: str
    containers: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True, eq=False)
class PodIndex:
    """An immutable snapshot of the node's active pods, with the three lookups attribution uses.

    Pods in phase Succeeded or Failed are never included: a completed pod holds no GPU, and
    attributing to it is a known defect of other exporters.
    """

    by_uid: Mapping[str, PodInfo]
    by_name: Mapping[tuple[str, str], PodInfo]
    by_container_id: Mapping[str, PodInfo]

    @classmethod
    def build(cls, pods: Iterable[PodInfo]) -> PodIndex:
        active = [pod for pod in pods if pod.phase not in TERMINAL_PHASES]
        return cls(
            by_uid=MappingProxyType({pod.uid: pod for pod in active}),
            by_name=MappingProxyType({(pod.namespace, pod.name): pod for pod in active}),
            by_container_id=MappingProxyType(
                {cid: pod for pod in active for cid in pod.containers}
            ),
        )

    def lookup(self, pod_uid: str | None, container_id: str | None) -> tuple[PodInfo, str] | None:
        """(pod, container name) of a process's cgroup reference; the name is "" if unknown.

        The container id is tried first (it also finds static pods, whose cgroup uid is not the
        mirror pod's uid); the pod uid covers a container whose status the kubelet has not
        posted yet, and conmon.
        """
        if container_id:
            pod = self.by_container_id.get(container_id)
            if pod is not None:
                return pod, pod.containers[container_id]
        if pod_uid:
            pod = self.by_uid.get(pod_uid)
            if pod is not None:
                return pod, ""
        return None


EMPTY_INDEX = PodIndex.build(())


def parse_pod(obj: Mapping[str, Any], labels: Collection[str] | None = None) -> PodInfo | None:
    """A pod object (the API's JSON) as a PodInfo; None if it lacks a uid, namespace or name.

    `labels`: the label keys to keep (`--kubernetes.pod-labels`), None for all. A node's watch
    keeps only those: the others were most of what a pod held (labels of a few hundred bytes
    each, on every pod of the node) and nothing reads them. Namespaces, phases and owner kinds
    are interned, so a thousand pods of one namespace hold its name once.
    """
    metadata = _mapping(obj.get("metadata"))
    status = _mapping(obj.get("status"))
    uid, namespace, name = (metadata.get(k) for k in ("uid", "namespace", "name"))
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
        return None
    every = {str(k): str(v) for k, v in _mapping(metadata.get("labels")).items() if v is not None}
    owner_kind, owner_name = _owner(metadata.get("ownerReferences"), every)
    kept = every if labels is None else {k: every[k] for k in labels if k in every}
    phase = status.get("phase")
    return PodInfo(
        uid=uid,
        namespace=sys.intern(namespace),
        name=name,
        phase=sys.intern(phase) if isinstance(phase, str) and phase else "Pending",
        labels=MappingProxyType(kept) if kept else _EMPTY,
        owner_kind=sys.intern(owner_kind),
        owner_name=owner_name,
        containers=MappingProxyType(_container_ids(status)),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _owner(references: Any, labels: Mapping[str, str]) -> tuple[str, str]:
    """The controlling owner's (kind, name); a Deployment's ReplicaSet names the Deployment."""
    refs = [_mapping(r) for r in references] if isinstance(references, list) else []
    controller = next((r for r in refs if r.get("controller") is True), None)
    if controller is None:
        return "", ""
    kind, name = str(controller.get("kind", "")), str(controller.get("name", ""))
    template_hash = labels.get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        return "Deployment", name[: -len(template_hash) - 1]
    return kind, name


def _container_ids(status: Mapping[str, Any]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        statuses = status.get(key)
        for entry in statuses if isinstance(statuses, list) else []:
            item = _mapping(entry)
            raw_id, name = item.get("containerID"), item.get("name")
            if isinstance(raw_id, str) and raw_id and isinstance(name, str):
                ids[raw_id.rpartition(RUNTIME_PREFIX_SEPARATOR)[2]] = name
    return ids


class PodWatcher(Watcher):
    """Lists and watches the pods of `node_name` (see `list_watch.py`), publishing a `PodIndex`.

    `kubeconfig` None means in-cluster config (service account token and CA); `labels` the
    pod label keys attribution copies (the others are not kept).

    The index is built when read (once per collection cycle) and only if a pod changed since:
    built on every event, a relisting node of many pods rebuilt it once per pod.
    """

    def __init__(
        self,
        node_name: str,
        kubeconfig: str | Kubeconfig | None,
        timeout: float = 10.0,
        *,
        watch_seconds: int = WATCH_SECONDS,
        labels: Collection[str] = (),
    ) -> None:
        client = node_api_client(node_name, kubeconfig, "pods")
        self._labels = frozenset(labels)
        self._pods: Mapping[str, PodInfo] = {}
        self._changes = 0  # events published so far
        self._indexed = 0  # the value of _changes when the index was built
        self._index = EMPTY_INDEX
        self._watch: ListWatch[PodInfo] = ListWatch(
            "pods",
            client.lister("/api/v1/pods", field_selector=f"spec.nodeName={node_name}"),
            self._parse,
            self._publish,
            timeout=timeout,
            watch_seconds=watch_seconds,
            on_stop=client.close,
        )

    def _publish(self, pods: Mapping[str, PodInfo]) -> None:
        self._pods = pods  # the watch's own dict, changed in place by its thread
        self._changes += 1

    def index(self) -> PodIndex:
        changes = self._changes  # read first: a change while building shows next time
        if changes != self._indexed:
            self._index = PodIndex.build(tuple(self._pods.values()))  # one C call: atomic
            self._indexed = changes
        return self._index

    def _parse(self, obj: Mapping[str, Any]) -> tuple[str, PodInfo | None] | None:
        """A pod keyed by uid; an ended pod (Succeeded, Failed) is removed."""
        pod = parse_pod(obj, self._labels)
        if pod is None:
            return None
        return pod.uid, None if pod.phase in TERMINAL_PHASES else pod
