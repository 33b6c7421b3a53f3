"""The objects the demo's API server serves, built as kube-apiserver returns them: pods,
ResourceSlices, events, Status errors, and a kubeconfig pointing at a server. Tests build their
fixtures with the same functions, so the demo and the tests speak of one API."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NODE = "node-a"
PODS = "pods"
SLICES = "resourceslices"
NODES = "nodes"
QUOTAS = "resourcequotas"
EVENTS = "events"
PODS_PATH = "/api/v1/pods"
SLICES_PATH = "/apis/resource.k8s.io/{version}/resourceslices"
NODES_PATH = "/api/v1/nodes"
QUOTAS_PATH = "/api/v1/resourcequotas"
EVENTS_PATH = "/api/v1/events"
# Kueue's resources (kueue.x-k8s.io), listed and watched across namespaces, as the cluster view
# does, under the versions a server is made with (none: a cluster without Kueue).
KUEUE_PATH = "/apis/kueue.x-k8s.io/{version}/{resource}"
KUEUE_KINDS = {
    "workloads": "Workload",
    "localqueues": "LocalQueue",
    "clusterqueues": "ClusterQueue",
    "resourceflavors": "ResourceFlavor",
    "cohorts": "Cohort",
}
# /api/v1/namespaces/<ns>/<resource>[/<name>]: a namespace's list or watch, or one object
NAMESPACED_PATH = re.compile(
    r"/api/v1/namespaces/([^/]+)/(pods|resourcequotas|events)(?:/([^/]+))?"
)
KINDS = {
    PODS: "Pod",
    SLICES: "ResourceSlice",
    NODES: "Node",
    QUOTAS: "ResourceQuota",
    EVENTS: "Event",
    **KUEUE_KINDS,
}
# The fields the exporter selects by (`reason`: the cluster view's FailedCreate events)
SELECTABLE = ("spec.nodeName", "spec.driver", "status.phase", "reason")


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str = NODE,
    uid: str | None = None,
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    containers: Mapping[str, str] | None = None,
    init_containers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod object as the API returns it. `containers` maps name → containerID (with prefix)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or str(uuid.uuid4()),
        "labels": dict(labels or {}),
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": str(uuid.uuid4()),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def statuses(entries: Mapping[str, str] | None) -> list[dict[str, Any]]:
        return [
            {"name": n, "containerID": cid, "ready": True, "restartCount": 0}
            for n, cid in (entries or {}).items()
        ]

    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": n} for n in containers or {}]},
        "status": {
            "phase": phase,
            "containerStatuses": statuses(containers),
            "initContainerStatuses": statuses(init_containers),
        },
    }


def make_slice(
    name: str,
    devices: Mapping[str, Mapping[str, str]],
    *,
    pool: str = NODE,
    generation: int = 1,
    node: str = NODE,
    driver: str = "gpu.nvidia.com",
    version: str = "v1",
) -> dict[str, Any]:
    """A ResourceSlice; `devices` maps device name → string attributes (`uuid`, `type`, …).

    In v1beta1 a device's attributes sit under `basic`, as the API serves them there.
    """

    def device(dev_name: str, attributes: Mapping[str, str]) -> dict[str, Any]:
        attrs = {"attributes": {k: {"string": v} for k, v in attributes.items()}}
        return (
            {"name": dev_name, "basic": attrs}
            if version == "v1beta1"
            else {"name": dev_name, **attrs}
        )

    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": str(uuid.uuid4())},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [device(n, a) for n, a in devices.items()],
        },
    }


def make_event(
    name: str,
    namespace: str = "default",
    *,
    message: str,
    reason: str = "FailedCreate",
    kind: str = "Warning",
    count: int = 1,
    uid: str | None = None,
    involved: tuple[str, str] = ("ReplicaSet", "train-7f9c"),
) -> dict[str, Any]:
    """A core/v1 Event as a controller's recorder leaves it: `count` is how often it
    happened (a repeat updates the event, it does not add one); `involved` the object's
    kind and name."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "involvedObject": {"kind": involved[0], "name": involved[1], "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": kind,
        "count": count,
        "source": {"component": "replicaset-controller"},
        "firstTimestamp": "2024-05-01T10:00:00Z",
        "lastTimestamp": "2024-05-01T10:00:00Z",
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for `server` without auth (JSON is valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config))
    return path


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


REASONS = {
    404: "NotFound",
    410: "Expired",
    500: "InternalError",
    503: "ServiceUnavailable",
    429: "TooManyRequests",
}


def selected(obj: Mapping[str, Any], selector: str) -> bool:
    """`field=value[,field!=value]` over the SELECTABLE fields, all the exporter sends;
    anything else is a bug in the exporter."""
    for term in filter(None, selector.split(",")):
        field, _, value = term.partition("=")
        negated = field.endswith("!")
        field = field.removesuffix("!")
        if field not in SELECTABLE:
            raise ValueError(f"unsupported field selector {selector!r}")
        found: Any = obj
        for name in field.split("."):
            found = found.get(name) if isinstance(found, Mapping) else None
        if (found == value) == negated:
            return False
    return True
