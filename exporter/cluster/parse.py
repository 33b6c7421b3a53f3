"""Nodes, pods and ResourceQuotas from the API's JSON into the slim values of objects.py.

Each parser reads only the fields placement needs and never raises: a field of the wrong
type reads as absent (see fields.py). An object without the identity its key needs (a name,
and for pods and quotas a namespace) parses to None, as `ListWatch`'s parsers expect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.quantities import (
    CPU,
    MEMORY,
    add,
    frozen,
    maximum,
    parse_resources,
)
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS, ClusterSettings

RESTARTABLE: Final = "Always"  # an init container with restartPolicy Always is a sidecar
POD_LEVEL_RESOURCES: Final = (CPU, MEMORY)  # what spec.resources (pod-level) may set
QUOTA_PREFIX: Final = "requests."


def parse_node(obj: Mapping[str, Any]) -> Node | None:
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    name = fields.text(metadata.get("name"))
    if not name:
        return None
    ready = fields.condition(status, "Ready").get("status") == "True"
    return Node(
        name=name,
        labels=fields.string_map(metadata.get("labels")),
        taints=fields.taints(spec.get("taints")),
        allocatable=frozen(parse_resources(status.get("allocatable")), keep_zero=True),
        ready=ready,
        unschedulable=spec.get("unschedulable") is True,
    )


def parse_pod(obj: Mapping[str, Any], namespace: str = "") -> Pod | None:
    """A pod; `namespace` stands in for a missing metadata.namespace (a manifest's)."""
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    name = fields.text(metadata.get("name"))
    namespace = fields.text(metadata.get("namespace")) or namespace
    if not (name and namespace):
        return None
    scheduled = fields.condition(status, "PodScheduled")
    disruption = fields.condition(status, "DisruptionTarget")
    affinity = fields.mapping(fields.mapping(spec.get("affinity")).get("nodeAffinity"))
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = None if required is None else fields.mapping(required).get("nodeSelectorTerms")
    return Pod(
        namespace=fields.interned(namespace),
        name=name,
        uid=fields.text(metadata.get("uid")),
        phase=fields.interned(status.get("phase")) or "Pending",
        node_name=fields.interned(spec.get("nodeName")),
        created_at=fields.timestamp(metadata.get("creationTimestamp")),
        requests=frozen(effective_requests(spec)),
        tolerations=fields.tolerations(spec.get("tolerations")),
        node_selector=fields.node_selector(spec.get("nodeSelector")),
        affinity=None if required is None else fields.selector_terms(terms),
        scheduling_gates=tuple(
            fields.interned(g.get("name")) for g in fields.entries(spec.get("schedulingGates"))
        ),
        nominated_node=fields.interned(status.get("nominatedNodeName")),
        scheduled_reason=""
        if scheduled.get("status") == "True"
        else fields.interned(scheduled.get("reason")),
        scheduled_at=fields.timestamp(scheduled.get("lastTransitionTime")),
        status_reason=fields.interned(status.get("reason")),
        disruption=fields.interned(disruption.get("reason"))
        if disruption.get("status") == "True"
        else "",
        deleting=metadata.get("deletionTimestamp") is not None,
        has_claims=_has_claims(spec),
    )


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for the pod, as Kubernetes' PodRequests computes it: the
    app containers plus the restartable init containers (sidecars) that run beside them, or
    the peak of the init phase if higher (each init container plus the sidecars started
    before it), per resource; pod-level cpu/memory requests replace the containers' sum;
    then the RuntimeClass overhead is added."""
    requests: dict[str, int] = {}
    for container in fields.entries(spec.get("containers")):
        add(requests, container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in fields.entries(spec.get("initContainers")):
        own = container_requests(container)
        if container.get("restartPolicy") == RESTARTABLE:
            add(requests, own)
            add(sidecars, own)
            init_peak = maximum(init_peak, sidecars)
        else:
            init_peak = maximum(init_peak, add(dict(own), sidecars))
    requests = maximum(requests, init_peak)
    pod_level = container_requests(spec)  # spec.resources, read as a container's
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            requests[name] = pod_level[name]
    return add(requests, parse_resources(spec.get("overhead")))


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests; a resource with a limit and no request requests its limit
    (the API server's defaulting, which a manifest has not been through yet)."""
    resources = fields.mapping(container.get("resources"))
    return parse_resources(resources.get("limits")) | parse_resources(resources.get("requests"))


def _has_claims(spec: Mapping[str, Any]) -> bool:
    if fields.entries(spec.get("resourceClaims")):
        return True
    return any(
        fields.entries(fields.mapping(c.get("resources")).get("claims"))
        for c in fields.entries(spec.get("containers"))
    )


def parse_quota(
    obj: Mapping[str, Any], settings: ClusterSettings = DEFAULT_SETTINGS
) -> Quota | None:
    """A ResourceQuota's GPU entries (`requests.nvidia.com/gpu`, the only form Kubernetes
    takes for an extended resource, or a bare name). The status's `hard` is what admission
    enforces; the spec's is used until the quota controller has written one."""
    metadata, spec, status = (fields.mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    name, namespace = fields.text(metadata.get("name")), fields.text(metadata.get("namespace"))
    if not (name and namespace):
        return None
    hard = status.get("hard") if isinstance(status.get("hard"), Mapping) else spec.get("hard")
    return Quota(
        namespace=fields.interned(namespace),
        name=name,
        hard=frozen(_gpu_entries(hard, settings), keep_zero=True),
        used=frozen(_gpu_entries(status.get("used"), settings), keep_zero=True),
        scoped=bool(spec.get("scopes")) or bool(spec.get("scopeSelector")),
    )


def _gpu_entries(value: Any, settings: ClusterSettings) -> dict[str, int]:
    entries = {}
    for key, amount in parse_resources(value).items():
        resource = key.removeprefix(QUOTA_PREFIX)
        if settings.is_gpu_resource(resource):
            entries[resource] = amount
    return entries
