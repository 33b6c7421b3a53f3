"""Why a GPU pod waits: exactly one reason per pod, with the evidence behind it.

Every node is checked against the pod (placement.py), then the first rule that holds gives
the reason:

1. `gated`: the pod has scheduling gates (Kueue holds pods this way until it admits them);
   the scheduler does not look at it at all.
2. `awaiting_preemption`: the pod has a nominated node; the scheduler preempted pods there
   and waits for them to leave.
3. `quota_exceeded` (only for a pod not yet created, `admitted=False`): a GPU quota of its
   namespace would refuse it. A pod that exists has passed admission, so never this.
4. no reason (`None`): some node passes every filter. A pod that waits all the same is
   blocked by what is not modelled here (inter-pod affinity, topology spread, volumes, DRA
   claims) or is about to be bound; `pending_reason` reports it as `other`.
5. `not_advertised`: a requested GPU resource is advertised (above 0) by no node at all (a
   node with only `nvidia.com/mig-*` does not advertise `nvidia.com/gpu`).
6. `fragmented`: the nodes the pod may use (taints, selectors, CPU/memory pass) have enough
   free GPUs in total, but no single one has enough. This wins over rule 7 even where
   tolerating a taint would place the pod (the real scheduler would then bind it): the
   scattered GPUs are the capacity problem the alerts are for (docs/scheduler-agreement.md).
7. a node with enough free GPUs exists but something else excludes it; each such node is
   blamed on its most fundamental failure (CPU/memory/pod slots, GPU type, other selector,
   taint: see `NodeCheck.blocked_by`), so that lifting the blamed filter alone would place
   the pod there, and across nodes the first of these wins:
   `taint_not_tolerated` (tolerating would place it), `gpu_type_unavailable`,
   `affinity_unmatched`, `other` (CPU, memory or pod count).
8. `not_advertised` again: a GPU node the pod may use advertises no GPU resource at all (its
   device plugin is down or not started), so its GPUs cannot be counted. A node advertising
   only MIG resources is not "down": its plugin answers, it just has no whole GPU. It comes
   after rule 7, which names a change that certainly places the pod (the scheduler binds it
   once the blamed filter is lifted); a silent node's GPUs may or may not be enough.
9. `insufficient_gpus`: no node has enough free GPUs, nor the nodes together.
10. `other`: anything else (a pod that requests no GPU and fits nowhere).

Classifications are cached in the view by `Pod.placement_key`: a Job's pending replicas are
classified once. The cluster loop's view also carries the last cycle's (`ClusterView.carried`),
whose checks of nodes that did not change are taken over rather than made again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from kube_gpu_exporter.exporter.catalog.cluster import Reason
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.placement import Filter, NodeCheck, check_node
from kube_gpu_exporter.exporter.cluster.quantities import Resources
from kube_gpu_exporter.exporter.cluster.quota import QuotaCheck, exceeded, quota_checks
from kube_gpu_exporter.exporter.cluster.view import ClusterView

SHOWN_NODES: Final = 3  # nodes named in a summary line; explain lists them all


_BLAME: Final = {  # rule 7: a blocking filter → its reason, in precedence order
    Filter.TAINTS: Reason.TAINT_NOT_TOLERATED,
    Filter.GPU_TYPE: Reason.GPU_TYPE_UNAVAILABLE,
    Filter.AFFINITY: Reason.AFFINITY_UNMATCHED,
    Filter.RESOURCES: Reason.OTHER,
}


@dataclass(frozen=True)
class Classification:
    """The verdict on one pod and its evidence.

    - `reason`: None when the pod fits a node (see `pending_reason`);
    - `summary`: one line saying why, with numbers and node names;
    - `requested`: the pod's GPU requests;
    - `nodes`: every checked node (the GPU nodes for a GPU pod, else all), in name order;
    - `fits`: names of the nodes that pass every filter;
    - `open_free`: per requested GPU resource, free GPUs summed over the nodes the pod may use;
    - `quota`: the namespace's GPU quota checks for the pod's requests.
    """

    reason: Reason | None
    summary: str
    requested: Resources = field(hash=False)
    nodes: tuple[NodeCheck, ...] = ()
    fits: tuple[str, ...] = ()
    open_free: Resources = field(default_factory=dict, hash=False)
    quota: tuple[QuotaCheck, ...] = ()

    @property
    def schedulable(self) -> bool:
        return self.reason is None

    @property
    def pending_reason(self) -> Reason:
        """The reason to report for a pod that is Pending: a pod that fits somewhere yet
        waits is held by something not modelled here, so `other`."""
        return self.reason or Reason.OTHER


def classify(view: ClusterView, pod: Pod, *, admitted: bool = True) -> Classification:
    """Why `pod` would not be placed on the view's nodes now (see the module docstring).
    `admitted=False` for a pod not yet created (a manifest), whose quota is checked."""
    requested = view.gpu_requests(pod)
    quotas = quota_checks(view.quotas.get(pod.namespace, ()), requested)
    key = (pod.placement_key, quotas if not admitted else None)
    cached = view.cache.get(key)
    if isinstance(cached, Classification):
        return cached if cached.quota == quotas else _with_quota(cached, quotas)
    checks = _checks(view, pod, view.carried.get(key), requested)
    reason, summary = _decide(view, pod, requested, checks, () if admitted else quotas)
    open_free = {r: sum(c.free(r) for c in checks if c.open) for r in requested}
    result = Classification(
        reason=reason,
        summary=summary,
        requested=requested,
        nodes=checks,
        fits=tuple(c.node for c in checks if c.fits),
        open_free=open_free,
        quota=quotas,
    )
    view.cache[key] = result
    return result


def _checks(
    view: ClusterView, pod: Pod, earlier: object, requested: Mapping[str, int]
) -> tuple[NodeCheck, ...]:
    """The pod against every GPU node (every node, for a pod that asks for no GPU), in name
    order. A check reads only the pod's placement and the node's state, and a state that did
    not change is the same object from one cycle's view to the next (incremental_view.py), so
    `earlier`, the last cycle's verdict on the same placement, lends its check of such a node."""
    lent = {c.node: c for c in earlier.nodes} if isinstance(earlier, Classification) else {}
    labels = view.settings.gpu_type_labels
    checks = []
    for name, state in view.nodes.items():
        if state.gpu_node or not requested:
            check = lent.get(name)
            if check is None or check.state is not state:
                check = check_node(pod, state, requested, labels)
            checks.append(check)
    return tuple(checks)


def _with_quota(cached: Classification, quotas: tuple[QuotaCheck, ...]) -> Classification:
    """A cached result for a pod of another namespace: same placement, its own quota."""
    return Classification(
        cached.reason,
        cached.summary,
        cached.requested,
        cached.nodes,
        cached.fits,
        cached.open_free,
        quotas,
    )


def _decide(
    view: ClusterView,
    pod: Pod,
    requested: Mapping[str, int],
    checks: tuple[NodeCheck, ...],
    quotas: tuple[QuotaCheck, ...],
) -> tuple[Reason | None, str]:
    if pod.scheduling_gates:
        return Reason.GATED, f"held by scheduling gates: {', '.join(pod.scheduling_gates)}"
    if pod.nominated_node:
        return Reason.AWAITING_PREEMPTION, (
            f"nominated to {pod.nominated_node}: waiting for the pods preempted there to leave"
        )
    over = exceeded(quotas)
    if over:
        return Reason.QUOTA_EXCEEDED, "would exceed quota " + "; ".join(map(str, over))
    fits = [c for c in checks if c.fits]
    if fits:
        return None, f"fits on {_named(fits)}"
    for verdict in (_not_advertised, _fragmented, _blocked, _silent):
        found = verdict(view, requested, checks)
        if found is not None:
            return found
    if requested:
        return Reason.INSUFFICIENT_GPUS, _insufficient(view, requested, checks)
    return Reason.OTHER, "no node passes every filter"


Verdict = tuple[Reason, str] | None


def _not_advertised(
    view: ClusterView, requested: Mapping[str, int], checks: tuple[NodeCheck, ...]
) -> Verdict:
    """Rule 5: a requested resource that no node advertises."""
    for resource in requested:
        if view.advertised.get(resource, 0) <= 0:
            shown = "; ".join(
                f"{c.node} {view.nodes[c.node].advertising()}" for c in checks[:SHOWN_NODES]
            )
            more = f"; and {len(checks) - SHOWN_NODES} more" if len(checks) > SHOWN_NODES else ""
            found = f" (GPU nodes: {shown}{more})" if checks else " (no GPU node at all)"
            return Reason.NOT_ADVERTISED, f"no node advertises {resource}{found}"
    return None


def _silent(
    view: ClusterView, requested: Mapping[str, int], checks: tuple[NodeCheck, ...]
) -> Verdict:
    """Rule 8: a GPU node the pod may use advertises no GPU resource at all."""
    down = [c for c in checks if c.open and not view.nodes[c.node].gpus]
    if not requested or not down:
        return None
    wanted = ", ".join(requested)
    return Reason.NOT_ADVERTISED, (
        f"no GPU resource at all advertised by {_names(c.node for c in down)}, which the pod "
        f"may use (is the device plugin running?); no other node has room for {wanted}"
    )


def _fragmented(
    view: ClusterView, requested: Mapping[str, int], checks: tuple[NodeCheck, ...]
) -> Verdict:
    open_checks = [c for c in checks if c.open]
    if not requested or not open_checks:
        return None
    totals = {r: sum(c.free(r) for c in open_checks) for r in requested}
    if any(totals[r] < n for r, n in requested.items()):
        return None
    resource = max(requested, key=lambda r: requested[r])
    holders = sorted(open_checks, key=lambda c: -c.free(resource))
    holders = [c for c in holders if c.free(resource) > 0]
    spread = ", ".join(f"{c.node} {c.free(resource)}" for c in holders[:SHOWN_NODES])
    more = f" and {len(holders) - SHOWN_NODES} more" if len(holders) > SHOWN_NODES else ""
    return Reason.FRAGMENTED, (
        f"{totals[resource]} {resource} free in total on the nodes the pod may use, but no "
        f"node has {requested[resource]} ({spread}{more})"
    )


def _blocked(
    view: ClusterView, requested: Mapping[str, int], checks: tuple[NodeCheck, ...]
) -> Verdict:
    roomy = [c for c in checks if c.gpu_room and c.blocked_by is not None]
    for blame, reason in _BLAME.items():
        by_cause: dict[str, list[str]] = {}
        for check in roomy:
            if check.blocked_by is blame:
                by_cause.setdefault(_why(check, blame), []).append(check.node)
        if by_cause:
            causes = "; ".join(f"{why} on {_names(nodes)}" for why, nodes in by_cause.items())
            return reason, f"{_LEADS[blame]}: {causes}"
    return None


_LEADS: Final = {
    Filter.TAINTS: "the nodes with room have taints the pod does not tolerate",
    Filter.GPU_TYPE: "the nodes with room have another GPU type than the pod selects",
    Filter.AFFINITY: "the nodes with room do not match the pod's node selector or affinity",
    Filter.RESOURCES: "the nodes with room for the GPUs lack other resources",
}


def _why(check: NodeCheck, blame: Filter) -> str:
    if blame is Filter.TAINTS:
        return ", ".join(map(str, check.untolerated))
    if blame is Filter.GPU_TYPE:
        return ", ".join(check.selectors.gpu_type)
    if blame is Filter.AFFINITY:
        return ", ".join(check.selectors.other)
    return ", ".join(map(str, check.short))


def _insufficient(
    view: ClusterView, requested: Mapping[str, int], checks: tuple[NodeCheck, ...]
) -> str:
    parts = []
    for resource, amount in requested.items():
        usable = sum(c.free(resource) for c in checks if c.open)
        anywhere = sum(c.free(resource) for c in checks)
        most = max((c.free(resource) for c in checks), default=0)
        parts.append(
            f"no node has {amount} {resource} free (at most {most}); {usable} free on the "
            f"nodes the pod may use, {anywhere} on all GPU nodes"
        )
    return "; ".join(parts)


def _named(checks: Iterable[NodeCheck]) -> str:
    checks = list(checks)
    return f"{len(checks)} node{'s' if len(checks) != 1 else ''}: {_names(c.node for c in checks)}"


def _names(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:SHOWN_NODES])
    return shown + (f" and {len(names) - SHOWN_NODES} more" if len(names) > SHOWN_NODES else "")
