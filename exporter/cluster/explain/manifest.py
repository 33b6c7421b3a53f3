"""`explain -f`: the pod a manifest file would create, before it is submitted.

The file may hold a Pod or a workload that makes pods (Deployment, StatefulSet, ReplicaSet,
DaemonSet, Job, ReplicationController, CronJob), in any document of a multi-document file or
in a List; the first pod spec found is the one explained (`read_manifest`), named after its
workload when it has no name. The API server's dry run (admission.py) then makes the pod
that would be created of it. Only where that cannot be asked (the caller may not create
pods) is it judged as a person wrote it (`as_written`): limits standing in for requests, and
of what admission adds, only DefaultTolerationSeconds' NoExecute tolerations of `not-ready`
and `unreachable` nodes (no LimitRange, RuntimeClass or quota but GPU quotas). Every problem
is one InputError line naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.parse import parse_pod
from kube_gpu_exporter.exporter.input_errors import InputError, quoted
from kube_gpu_exporter.exporter.input_yaml import parse_yaml_all, read_input

MAX_DOCUMENTS: Final = 100
# DefaultTolerationSeconds: a pod without them tolerates these NoExecute taints for 300 s.
DEFAULT_NO_EXECUTE_KEYS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
TEMPLATE_KINDS: Final = frozenset(
    {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "ReplicationController"}
)


def load_manifest(path: str, namespace: str) -> Pod:
    """The pod the manifest at `path` describes, as written (see `as_written`)."""
    return as_written(read_manifest(path, namespace), f"manifest {path}")


def read_manifest(path: str, namespace: str) -> Mapping[str, Any]:
    """The pod object the manifest at `path` describes, with a name and a namespace
    (`namespace` where the manifest names none)."""
    label = f"manifest {path}"
    streamed = parse_yaml_all(read_input(path, label), label, MAX_DOCUMENTS)
    documents = list(_documents(streamed))
    for document in documents:
        found = _pod_object(document)
        if found is not None:
            metadata = found["metadata"]
            if not all(isinstance(metadata.get(k, ""), str) for k in ("name", "namespace")):
                raise InputError(f"{label}: the pod's metadata.name or namespace is not a string")
            return {**found, "metadata": {"namespace": namespace, **metadata}}
    kinds = sorted({str(d.get("kind")) for d in documents if isinstance(d, Mapping)})
    shown = f" (found kind {', '.join(quoted(k) for k in kinds)})" if kinds else ""
    raise InputError(f"{label}: no Pod or pod template in it{shown}")


def as_written(pod: Mapping[str, Any], label: str) -> Pod:
    """The pod object as the scheduler would read it without admission, but for the
    tolerations every pod is given (`admitted`)."""
    parsed = parse_pod(admitted(pod))
    if parsed is None:  # a name or namespace of the wrong type
        raise InputError(f"{label}: the pod's metadata.name or namespace is not a string")
    return parsed


def admitted(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod object as admission leaves it for the scheduler: DefaultTolerationSeconds'
    tolerations added unless one of the pod's own already covers the taint (same or empty
    key, NoExecute or empty effect)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return pod
    tolerations = spec.get("tolerations")
    own = (
        [t for t in tolerations if isinstance(t, Mapping)] if isinstance(tolerations, list) else []
    )
    added = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in DEFAULT_NO_EXECUTE_KEYS
        if not any(
            t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None)
            for t in own
        )
    ]
    if not added:
        return pod
    return {**pod, "spec": {**spec, "tolerations": [*own, *added]}}


def _documents(streamed: list[Any]) -> Iterator[Any]:
    """The objects of the file's documents, a `kind: List`'s items among them."""
    for document in streamed:
        if isinstance(document, Mapping) and document.get("kind") == "List":
            items = document.get("items")
            yield from items if isinstance(items, list) else []
        elif document is not None:
            yield document


def _pod_object(document: Any) -> Mapping[str, Any] | None:
    """A Pod, or a pod template made into one (named after its workload)."""
    if not isinstance(document, Mapping):
        return None
    kind = document.get("kind")
    if kind == "Pod" or (kind is None and isinstance(document.get("spec"), Mapping)):
        return _named(document, document)
    spec = document.get("spec")
    if kind == "CronJob" and isinstance(spec, Mapping):
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, Mapping) else None
    elif kind not in TEMPLATE_KINDS:
        return None
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(template, Mapping):
        return None
    return _named(template, document)


def _named(pod: Mapping[str, Any], owner: Mapping[str, Any]) -> Mapping[str, Any]:
    """`pod` with a name and namespace: its own, else its workload's, else a placeholder
    (a template has none; a Pod may have only generateName)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    owner_meta = owner.get("metadata") if isinstance(owner.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(owner_meta, Mapping)
    name = meta.get("name") or owner_meta.get("name") or meta.get("generateName") or "manifest"
    namespace = meta.get("namespace") or owner_meta.get("namespace")
    metadata = {**meta, "name": name}
    if namespace:
        metadata["namespace"] = namespace
    else:
        metadata.pop("namespace", None)
    return {**pod, "metadata": metadata, "status": {}}
