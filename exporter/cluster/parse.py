"""Nodes, pods and ResourceQuotas from the API's JSON into the slim values of objects.py.

Each parser reads only the fields placement needs and never raises: a field of the wrong
type reads as absent (see fields.py). An object without the identity its key needs (a name,
and for pods and quotas a namespace) parses to None, as `ListWatch`'s parsers expect.

Each parser reads the JSON and hands the raw values to a `*_from` function, which does all
the rest; decode.py, which decodes the cluster watches' JSON straight into typed structs,
hands them the same raw values from its structs, so both paths make the same values. A value
already slim (what decode.py yields) is returned as it is, so the watches' parsers take either.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.quantities import (
    CPU,
    MEMORY,
    Resources,
    add,
    frozen,
    maximum,
    parse_resources,
)
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS, ClusterSettings

RESTARTABLE: Final = "Always"  # an init container with restartPolicy Always is a sidecar
POD_LEVEL_RESOURCES: Final = (CPU, MEMORY)  # what spec.resources (pod-level) may set
QUOTA_PREFIX: Final = "requests."
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"  # of spec.affinity.nodeAffinity


def parse_node(obj: Mapping[str, Any] | Node) -> Node | None:
    if isinstance(obj, Node):
        return obj
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    return node_from(
        name=metadata.get("name"),
        labels=metadata.get("labels"),
        taints=spec.get("taints"),
        unschedulable=spec.get("unschedulable"),
        allocatable=status.get("allocatable"),
        conditions=status.get("conditions"),
    )


def node_from(
    *, name: Any, labels: Any, taints: Any, unschedulable: Any, allocatable: Any, conditions: Any
) -> Node | None:
    """A node from its fields as JSON gives them (None where absent), each of any type."""
    name = fields.text(name)
    if not name:
        return None
    return Node(
        name=name,
        labels=fields.string_map(labels),
        taints=fields.taints(taints),
        allocatable=frozen(parse_resources(allocatable), keep_zero=True),
        ready=fields.condition(conditions, "Ready").get("status") == "True",
        unschedulable=unschedulable is True,
    )


def parse_pod(obj: Mapping[str, Any] | Pod, namespace: str = "") -> Pod | None:
    """A pod; `namespace` stands in for a missing metadata.namespace (a manifest's)."""
    if isinstance(obj, Pod):
        return obj
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    containers = fields.entries(spec.get("containers"))
    return pod_from(
        name=metadata.get("name"),
        namespace=fields.text(metadata.get("namespace")) or namespace,
        uid=metadata.get("uid"),
        created=metadata.get("creationTimestamp"),
        deletion=metadata.get("deletionTimestamp"),
        node_name=spec.get("nodeName"),
        requests=effective_requests(spec),
        tolerations=spec.get("tolerations"),
        node_selector=spec.get("nodeSelector"),
        required_affinity=fields.mapping(
            fields.mapping(spec.get("affinity")).get("nodeAffinity")
        ).get(REQUIRED),
        gates=spec.get("schedulingGates"),
        claims=has_claims(
            spec.get("resourceClaims"),
            (fields.mapping(c.get("resources")).get("claims") for c in containers),
        ),
        phase=status.get("phase"),
        nominated=status.get("nominatedNodeName"),
        reason=status.get("reason"),
        conditions=status.get("conditions"),
        priority=spec.get("priority"),
        owners=metadata.get("ownerReferences"),
    )


def pod_from(
    *,
    name: Any,
    namespace: Any,
    uid: Any,
    created: Any,
    deletion: Any,
    node_name: Any,
    requests: Mapping[str, int],
    tolerations: Any,
    node_selector: Any,
    required_affinity: Any,
    gates: Any,
    claims: bool,
    phase: Any,
    nominated: Any,
    reason: Any,
    conditions: Any,
    priority: Any = None,
    owners: Any = None,
) -> Pod | None:
    """A pod from its fields as JSON gives them (None where absent), each of any type, with
    its effective requests and whether it has claims already worked out."""
    name, namespace = fields.text(name), fields.text(namespace)
    if not (name and namespace):
        return None
    scheduled = fields.condition(conditions, "PodScheduled")
    disruption = fields.condition(conditions, "DisruptionTarget")
    terms = fields.mapping(required_affinity).get("nodeSelectorTerms")
    return Pod(
        namespace=fields.interned(namespace),
        name=name,
        uid=fields.text(uid),
        phase=fields.interned(phase) or "Pending",
        node_name=fields.interned(node_name),
        created_at=fields.timestamp(created),
        requests=shared_requests(tuple(requests.items())),
        tolerations=fields.tolerations(tolerations),
        node_selector=fields.node_selector(node_selector),
        affinity=None if required_affinity is None else fields.selector_terms(terms),
        scheduling_gates=tuple(fields.interned(g.get("name")) for g in fields.entries(gates)),
        nominated_node=fields.interned(nominated),
        scheduled_reason=""
        if scheduled.get("status") == "True"
        else fields.interned(scheduled.get("reason")),
        scheduled_at=fields.timestamp(scheduled.get("lastTransitionTime")),
        status_reason=fields.interned(reason),
        disruption=fields.interned(disruption.get("reason"))
        if disruption.get("status") == "True"
        else "",
        deleting=deletion is not None,
        has_claims=claims,
        priority=priority if type(priority) is int else None,
        owner_uid=controller_uid(owners),
    )


def controller_uid(owners: Any) -> str:
    """The uid of the owner reference marked `controller` (the one a pod has at most), ""
    when none is: interned, since a Job's or a ReplicaSet's pods all name it."""
    for owner in fields.entries(owners):
        if owner.get("controller") is True:
            return fields.interned(owner.get("uid"))
    return ""


@functools.lru_cache(maxsize=fields.SHARED)
def shared_requests(items: tuple[tuple[str, int], ...]) -> Resources:
    """A pod's requests (frozen, zeros left out), one mapping shared by every pod that asks
    for the same: a cluster's pods come in a few sizes."""
    return frozen(dict(items))


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for the pod, as Kubernetes' PodRequests computes it: the
    app containers plus the restartable init containers (sidecars) that run beside them, or
    the peak of the init phase if higher (each init container plus the sidecars started
    before it), per resource; pod-level cpu/memory requests replace the containers' sum;
    then the RuntimeClass overhead is added."""
    return combined_requests(
        app=(container_requests(c) for c in fields.entries(spec.get("containers"))),
        init=(
            (container_requests(c), c.get("restartPolicy") == RESTARTABLE)
            for c in fields.entries(spec.get("initContainers"))
        ),
        pod_level=container_requests(spec),  # spec.resources, read as a container's
        overhead=parse_resources(spec.get("overhead")),
    )


def combined_requests(
    *,
    app: Iterable[Resources],
    init: Iterable[tuple[Resources, bool]],
    pod_level: Resources,
    overhead: Resources,
) -> dict[str, int]:
    """effective_requests from the containers' own requests, read already: the app
    containers', the init containers' in order (each with whether it is a restartable
    sidecar), the pod-level ones and the overhead."""
    requests: dict[str, int] = {}
    for own in app:
        add(requests, own)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for own, restartable in init:
        if restartable:
            add(requests, own)
            add(sidecars, own)
            init_peak = maximum(init_peak, sidecars)
        else:
            init_peak = maximum(init_peak, add(dict(own), sidecars))
    requests = maximum(requests, init_peak)
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            requests[name] = pod_level[name]
    return add(requests, overhead)


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests (see own_requests)."""
    resources = fields.mapping(container.get("resources"))
    return own_requests(resources.get("limits"), resources.get("requests"))


def own_requests(limits: Any, requests: Any) -> dict[str, int]:
    """A container's requests from its `resources.limits` and `.requests`: a resource with
    a limit and no request requests its limit (the API server's defaulting, which a
    manifest has not been through yet)."""
    return parse_resources(limits) | parse_resources(requests)


def has_claims(pod_claims: Any, container_claims: Iterable[Any]) -> bool:
    """Whether `spec.resourceClaims` or any container's `resources.claims` holds a claim."""
    return bool(fields.entries(pod_claims)) or any(map(fields.entries, container_claims))


def parse_quota(
    obj: Mapping[str, Any] | Quota, settings: ClusterSettings = DEFAULT_SETTINGS
) -> Quota | None:
    if isinstance(obj, Quota):
        return obj
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    return quota_from(
        name=metadata.get("name"),
        namespace=metadata.get("namespace"),
        spec_hard=spec.get("hard"),
        status_hard=status.get("hard"),
        used=status.get("used"),
        scoped=bool(spec.get("scopes")) or bool(spec.get("scopeSelector")),
        settings=settings,
    )


def quota_from(
    *,
    name: Any,
    namespace: Any,
    spec_hard: Any,
    status_hard: Any,
    used: Any,
    scoped: bool,
    settings: ClusterSettings,
) -> Quota | None:
    """A ResourceQuota's GPU entries (`requests.nvidia.com/gpu`, the only form Kubernetes
    takes for an extended resource, or a bare name). The status's `hard` is what admission
    enforces; the spec's is used until the quota controller has written one. `scoped`: the
    spec has scopes or a scope selector."""
    name, namespace = fields.text(name), fields.text(namespace)
    if not (name and namespace):
        return None
    hard = status_hard if isinstance(status_hard, Mapping) else spec_hard
    return Quota(
        namespace=fields.interned(namespace),
        name=name,
        hard=frozen(_gpu_entries(hard, settings), keep_zero=True),
        used=frozen(_gpu_entries(used, settings), keep_zero=True),
        scoped=scoped,
    )


def _gpu_entries(value: Any, settings: ClusterSettings) -> dict[str, int]:
    entries = {}
    for key, amount in parse_resources(value).items():
        resource = key.removeprefix(QUOTA_PREFIX)
        if settings.is_gpu_resource(resource):
            entries[resource] = amount
    return entries
