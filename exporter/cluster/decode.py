"""The cluster watches' JSON decoded straight into the slim values of objects.py (msgspec).

`json.loads` makes Python objects of every field of a page — a pod's env, volumes, probes and
container statuses, a node's image list, every object's managedFields — for parse.py to read
a few dozen of them; at 150,000 pods that was most of the time to the first metrics. msgspec
decodes the page's (or the watch event's) bytes into Structs that declare only the fields
parse.py reads: the rest is skipped in C and never becomes an object. The structs' fields go,
raw, to parse.py's `*_from` functions, so both paths make their values in the same code.

parse.py's defensive reading is kept, not redone: the fields it reads are declared `Any`
(fields.py reads any type) and only the path down to them is typed, an object where the JSON
has one. A value of the wrong type on that path (`spec` a string, a container `null`) fails
validation; the page is then decoded again with its items raw, each item on its own, and an
item that fails again is read by `json.loads` and given to the parser as a mapping: the old
path, for that object alone (so is a number beyond a double, which json.loads reads as
inf). JSON that msgspec refuses and `json.loads` takes (a lone surrogate) takes the old path
for its whole page or event. A null is read as absent on both paths; only a list's own
resourceVersion tells null from absent, and it is kept apart.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import msgspec

from kube_gpu_exporter.exporter.cluster.fields import MAX_ITEMS
from kube_gpu_exporter.exporter.cluster.parse import (
    REQUIRED,
    RESTARTABLE,
    combined_requests,
    has_claims,
    node_from,
    own_requests,
    pod_from,
    quota_from,
)
from kube_gpu_exporter.exporter.cluster.quantities import parse_resources
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.kubernetes.decoding import EMPTY, JSON, Decoder, Event, Page

S = TypeVar("S")
_ABSENT: Final = object()  # a list's resourceVersion: absent reads "", null reads "None"
# Failures of msgspec that json.loads may not share: the old path decides.
_REFUSED: Final = (msgspec.DecodeError, RecursionError)  # ValidationError is a DecodeError


class _Struct(msgspec.Struct, gc=False):
    """What every struct here is: no cycles (JSON has none), so kept out of the GC."""


class _ListMeta(_Struct):
    token: Any = msgspec.field(default=None, name="continue")
    resourceVersion: Any = _ABSENT


class _Page(_Struct, Generic[S]):
    metadata: _ListMeta | None = None
    items: list[S] | None = None


class _Listing(_Struct):
    """A page's metadata alone: its items are skipped, in C."""

    metadata: _ListMeta | None = None


class _WatchEvent(_Struct, Generic[S]):
    type: Any = None
    object: S | None = None


# --- nodes -----------------------------------------------------------------------------------


class _NodeMeta(_Struct):
    name: Any = None
    labels: Any = None
    resourceVersion: Any = None


class _NodeSpec(_Struct):
    taints: Any = None
    unschedulable: Any = None


class _NodeStatus(_Struct):
    allocatable: Any = None
    conditions: Any = None


class _Node(_Struct):
    metadata: _NodeMeta | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


_NO_NODE_META, _NO_NODE_SPEC, _NO_NODE_STATUS = _NodeMeta(), _NodeSpec(), _NodeStatus()


def _node(node: _Node) -> Any:
    meta = node.metadata or _NO_NODE_META
    spec = node.spec or _NO_NODE_SPEC
    status = node.status or _NO_NODE_STATUS
    slim = node_from(
        name=meta.name,
        labels=meta.labels,
        taints=spec.taints,
        unschedulable=spec.unschedulable,
        allocatable=status.allocatable,
        conditions=status.conditions,
    )
    return EMPTY if slim is None else slim


# --- pods ------------------------------------------------------------------------------------


class _Resources(_Struct):
    limits: Any = None
    requests: Any = None
    claims: Any = None


class _Container(_Struct):
    resources: _Resources | None = None
    restartPolicy: Any = None


class _NodeAffinity(_Struct):
    required: Any = msgspec.field(default=None, name=REQUIRED)


class _Affinity(_Struct):
    nodeAffinity: _NodeAffinity | None = None


class _PodMeta(_Struct):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    creationTimestamp: Any = None
    deletionTimestamp: Any = None
    resourceVersion: Any = None
    ownerReferences: Any = None


class _PodSpec(_Struct):
    nodeName: Any = None
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    resources: _Resources | None = None  # pod-level
    overhead: Any = None
    tolerations: Any = None
    nodeSelector: Any = None
    affinity: _Affinity | None = None
    schedulingGates: Any = None
    resourceClaims: Any = None


class _PodStatus(_Struct):
    phase: Any = None
    nominatedNodeName: Any = None
    reason: Any = None
    conditions: Any = None


class _Pod(_Struct):
    metadata: _PodMeta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


_NO_POD_META, _NO_POD_SPEC, _NO_POD_STATUS = _PodMeta(), _PodSpec(), _PodStatus()


def _own(container: _Container | _PodSpec) -> dict[str, int]:
    resources = container.resources
    return {} if resources is None else own_requests(resources.limits, resources.requests)


def _pod(pod: _Pod) -> Any:
    meta = pod.metadata or _NO_POD_META
    spec = pod.spec or _NO_POD_SPEC
    status = pod.status or _NO_POD_STATUS
    containers = (spec.containers or ())[:MAX_ITEMS]
    init = (spec.initContainers or ())[:MAX_ITEMS]
    node_affinity = spec.affinity and spec.affinity.nodeAffinity
    slim = pod_from(
        name=meta.name,
        namespace=meta.namespace,
        uid=meta.uid,
        created=meta.creationTimestamp,
        deletion=meta.deletionTimestamp,
        node_name=spec.nodeName,
        requests=combined_requests(
            app=map(_own, containers),
            init=((_own(c), c.restartPolicy == RESTARTABLE) for c in init),
            pod_level=_own(spec),
            overhead=parse_resources(spec.overhead),
        ),
        tolerations=spec.tolerations,
        node_selector=spec.nodeSelector,
        required_affinity=node_affinity and node_affinity.required,
        gates=spec.schedulingGates,
        claims=has_claims(
            spec.resourceClaims, (c.resources and c.resources.claims for c in containers)
        ),
        phase=status.phase,
        nominated=status.nominatedNodeName,
        reason=status.reason,
        conditions=status.conditions,
        owners=meta.ownerReferences,
    )
    return EMPTY if slim is None else slim


# --- resource quotas -------------------------------------------------------------------------


class _QuotaMeta(_Struct):
    name: Any = None
    namespace: Any = None
    resourceVersion: Any = None


class _QuotaSpec(_Struct):
    hard: Any = None
    scopes: Any = None
    scopeSelector: Any = None


class _QuotaStatus(_Struct):
    hard: Any = None
    used: Any = None


class _Quota(_Struct):
    metadata: _QuotaMeta | None = None
    spec: _QuotaSpec | None = None
    status: _QuotaStatus | None = None


_NO_QUOTA_META, _NO_QUOTA_SPEC, _NO_QUOTA_STATUS = _QuotaMeta(), _QuotaSpec(), _QuotaStatus()


def _quota(quota: _Quota, settings: ClusterSettings) -> Any:
    meta = quota.metadata or _NO_QUOTA_META
    spec = quota.spec or _NO_QUOTA_SPEC
    status = quota.status or _NO_QUOTA_STATUS
    slim = quota_from(
        name=meta.name,
        namespace=meta.namespace,
        spec_hard=spec.hard,
        status_hard=status.hard,
        used=status.used,
        scoped=bool(spec.scopes) or bool(spec.scopeSelector),
        settings=settings,
    )
    return EMPTY if slim is None else slim


# --- events ----------------------------------------------------------------------------------


class _EventMeta(_Struct):
    uid: Any = None
    namespace: Any = None
    resourceVersion: Any = None


class _Namespaced(_Struct):
    namespace: Any = None


class _Series(_Struct):
    count: Any = None


class _KubeEvent(_Struct):
    """A core/v1 Event: what quota_events.py reads of it."""

    metadata: _EventMeta | None = None
    reason: Any = None
    type: Any = None
    message: Any = None
    count: Any = None
    involvedObject: _Namespaced | None = None
    series: _Series | None = None


def _event(event: _KubeEvent) -> Mapping[str, Any]:
    """The event as the mapping quota_events.py reads, holding only what it reads."""
    meta, involved, series = event.metadata, event.involvedObject, event.series
    return {
        "metadata": {"uid": meta.uid, "namespace": meta.namespace} if meta else None,
        "reason": event.reason,
        "type": event.type,
        "message": event.message,
        "count": event.count,
        "involvedObject": {"namespace": involved.namespace} if involved else None,
        "series": {"count": series.count} if series else None,
    }


# --- the decoder -----------------------------------------------------------------------------


class StructDecoder(Generic[S]):
    """A `Decoder` (kubernetes/decoding.py) of one kind of object: each object decoded as
    `kind` and turned by `slim` into what the watch's parser takes (a slim value, or a
    mapping the parser reads as it reads the JSON's)."""

    def __init__(self, kind: type[S], slim: Callable[[S], Any]) -> None:
        self._slim = slim
        self._page = msgspec.json.Decoder(_Page[kind])  # type: ignore[valid-type]
        self._raw_page = msgspec.json.Decoder(_Page[msgspec.Raw])
        self._item = msgspec.json.Decoder(kind)
        self._event = msgspec.json.Decoder(_WatchEvent[kind])  # type: ignore[valid-type]
        self._listing = msgspec.json.Decoder(_Listing)

    def page(self, data: bytes) -> Page:
        try:
            page = self._page.decode(data)
        except msgspec.ValidationError:
            return self._page_by_item(data)
        except _REFUSED:
            return JSON.page(data)
        return Page([self._slim(item) for item in page.items or ()], *_list_meta(page.metadata))

    def token(self, data: bytes) -> Any:
        try:
            return _list_meta(self._listing.decode(data).metadata)[0]
        except _REFUSED:
            return None

    def _page_by_item(self, data: bytes) -> Page:
        """A page that failed validation: each item alone, the odd ones by json.loads."""
        try:
            page = self._raw_page.decode(data)
        except _REFUSED:  # the page itself is odd (metadata not a mapping, …)
            return JSON.page(data)
        return Page([self._one(raw) for raw in page.items or ()], *_list_meta(page.metadata))

    def _one(self, raw: msgspec.Raw) -> Any:
        try:
            return self._slim(self._item.decode(raw))
        except _REFUSED:
            obj = json.loads(bytes(raw))
            return obj if isinstance(obj, Mapping) else EMPTY

    def event(self, line: bytes) -> Event:
        try:
            event = self._event.decode(line)
        except _REFUSED:
            return JSON.event(line)
        if event.type == "ERROR":  # a Status, not an object of the kind: read it whole
            return JSON.event(line)
        obj = event.object
        if obj is None:
            return Event(event.type, EMPTY, None)
        meta = obj.metadata  # every kind here has metadata.resourceVersion
        return Event(event.type, self._slim(obj), None if meta is None else meta.resourceVersion)


def _list_meta(meta: _ListMeta | None) -> tuple[Any, str]:
    if meta is None:
        return None, ""
    version = meta.resourceVersion
    return meta.token, "" if version is _ABSENT else str(version)


def decoders(settings: ClusterSettings) -> dict[str, Decoder]:
    """A decoder per resource the cluster watches, by its name in the API's paths."""
    return {
        "nodes": StructDecoder(_Node, _node),
        "pods": StructDecoder(_Pod, _pod),
        "resourcequotas": StructDecoder(_Quota, functools.partial(_quota, settings=settings)),
        "events": StructDecoder(_KubeEvent, _event),
    }
