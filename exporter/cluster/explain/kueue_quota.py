"""`explain` for Kueue: would a Workload's pod sets get quota now, and in which flavor, as
Kueue's flavor assigner (v0.17) decides it. Pure: the cluster's Kueue objects come in parsed.

For each pod set (its count × one pod's requests), each requested resource is looked up in
the ClusterQueue's resource groups (none covering it: "resource X unavailable in
ClusterQueue"), then the group's flavors are tried in their order. A flavor is skipped when
the pod set does not tolerate one of its NoSchedule/NoExecute `nodeTaints` (its own
tolerations plus the flavor's), or when its node selector and required node affinity,
cut down to the label keys the group's flavors name, do not match the flavor's
`nodeLabels`. A flavor fits when every resource of the group fits the quota left: what the
queue may use of it (`available`: nominal less usage, plus what the cohort has unused, within
the borrowing limit and others' lending limits). The first flavor that fits is taken, one
that borrows too unless `flavorFungibility.whenCanBorrow` is `TryNextFlavor` (then a later
flavor that fits without borrowing is preferred).

Not modelled, and named by the verdict: preemption (a queue whose policy may preempt is
judged without it), fair sharing, hierarchical Cohort objects with quotas of their own,
partial admission, admission checks and topology-aware scheduling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.filters import check_selectors, untolerated
from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, SelectorTerm, Toleration

MAY_STOP: Final = ("Borrow", "MayStopSearch")  # whenCanBorrow: stop at a flavor that borrows
TRY_NEXT: Final = "TryNextFlavor"


@dataclass(frozen=True)
class Limit:
    """A ClusterQueue's quota of one resource in one flavor (None: no limit set)."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def local(self) -> int:
        """What the queue keeps to itself: nominal less what it may lend (Kueue's
        localQuota), 0 without a lending limit."""
        if self.lending_limit is None:
            return 0
        return max(0, self.nominal - self.lending_limit)


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[tuple[str, Mapping[str, Limit]], ...]  # in Kueue's order of trying


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    cohort: str = ""
    groups: tuple[ResourceGroup, ...] = ()
    when_can_borrow: str = "MayStopSearch"
    preempting: tuple[str, ...] = ()  # the preemption policies set to other than Never
    active: bool = True  # Kueue's Active condition (False: it admits nothing)

    def limit(self, flavor: str, resource: str) -> Limit | None:
        for group in self.groups:
            for name, limits in group.flavors:
                if name == flavor and resource in limits:
                    return limits[resource]
        return None

    def group_of(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.groups if resource in g.covered), None)


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: `node` carries its nodeLabels and nodeTaints as a Node would (so the
    scheduler's own taint and selector checks apply), `tolerations` what Kueue adds to pods."""

    name: str
    node: Node
    tolerations: tuple[Toleration, ...] = ()
    raw_tolerations: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class PodSet:
    """A Workload's pod set: `count` pods, each as `pod` (requests, tolerations, selectors)."""

    name: str
    count: int
    pod: Pod

    @property
    def total(self) -> dict[str, int]:
        return {r: n * self.count for r, n in self.pod.requests.items() if n}


# (cluster queue, flavor, resource) → quota the admitted Workloads hold
Usage = Mapping[tuple[str, str, str], int]


@dataclass(frozen=True)
class Room:
    """One flavor and resource of a queue: its limit, what it uses, what it may take now
    (`available`), what the cohort has unused that it may borrow (`lendable`, within its
    borrowing limit), and the most it could ever hold (`potential`)."""

    limit: Limit
    used: int
    available: int
    lendable: int
    potential: int


def room(
    cq: ClusterQueue, queues: Mapping[str, ClusterQueue], usage: Usage, flavor: str, resource: str
) -> Room:
    """Kueue's `available` and `potentialAvailable` for a queue in a flat cohort: the cohort
    holds what its queues do not keep local, and its usage is theirs past their local part."""
    limit = cq.limit(flavor, resource) or Limit(0)
    used = usage.get((cq.name, flavor, resource), 0)
    if not cq.cohort:
        return Room(limit, used, limit.nominal - used, 0, limit.nominal)
    members = [q for q in queues.values() if q.cohort == cq.cohort]
    if cq.name not in {q.name for q in members}:
        members.append(cq)
    subtree = cohort_used = 0
    for member in members:
        own = member.limit(flavor, resource) or Limit(0)
        subtree += own.nominal - own.local
        cohort_used += max(0, usage.get((member.name, flavor, resource), 0) - own.local)
    parent = subtree - cohort_used
    potential = limit.local + subtree
    if limit.borrowing_limit is not None:
        stored = limit.nominal - limit.local
        in_parent = max(0, used - limit.local)
        parent = min(stored - in_parent + limit.borrowing_limit, parent)
        potential = min(limit.nominal + limit.borrowing_limit, potential)
    local = max(0, limit.local - used)
    own_unused = max(0, limit.nominal - used)
    return Room(limit, used, local + parent, max(0, local + parent - own_unused), potential)


@dataclass(frozen=True)
class Assignment:
    """Kueue's flavors for each pod set (resource → flavor), or why not (`message`, as Kueue
    words its QuotaReserved=False message); `borrows`: the quota is borrowed from the cohort."""

    flavors: tuple[Mapping[str, str], ...] = ()
    message: str = ""
    borrows: bool = False
    tried: tuple[str, ...] = field(default=(), compare=False)  # why each flavor was passed

    @property
    def fits(self) -> bool:
        return not self.message


def assign(
    pod_sets: Sequence[PodSet],
    cq: ClusterQueue,
    queues: Mapping[str, ClusterQueue],
    flavors: Mapping[str, Flavor],
    usage: Usage,
) -> Assignment:
    """The flavor assigner's answer for the pod sets in `cq` on the usage now."""
    chosen: list[Mapping[str, str]] = []
    assumed: dict[tuple[str, str], int] = {}  # earlier pod sets' requests per flavor
    borrows = False
    tried: list[str] = []
    if not cq.active:
        return Assignment(message=f"ClusterQueue {cq.name} is inactive")
    for pod_set in pod_sets:
        picked: dict[str, str] = {}
        reasons: list[str] = []
        for resource in pod_set.total:
            if resource in picked:
                continue
            group = cq.group_of(resource)
            if group is None:
                reasons = [f"resource {resource} unavailable in ClusterQueue"]
                break
            found, why, borrowed = _flavor_for(pod_set, group, cq, queues, flavors, usage, assumed)
            tried += why
            if found is None:
                reasons = why
                break
            borrows = borrows or borrowed
            picked.update({r: found for r in pod_set.total if r in group.covered})
        if reasons:
            message = f"couldn't assign flavors to pod set {pod_set.name}: "
            return Assignment(message=message + ", ".join(sorted(reasons)), tried=tuple(tried))
        for resource, flavor in picked.items():
            key = (flavor, resource)
            assumed[key] = assumed.get(key, 0) + pod_set.total[resource]
        chosen.append(picked)
    return Assignment(tuple(chosen), borrows=borrows, tried=tuple(tried))


def _flavor_for(
    pod_set: PodSet,
    group: ResourceGroup,
    cq: ClusterQueue,
    queues: Mapping[str, ClusterQueue],
    flavors: Mapping[str, Flavor],
    usage: Usage,
    assumed: Mapping[tuple[str, str], int],
) -> tuple[str | None, list[str], bool]:
    """(the flavor, the reasons the others were passed, whether it borrows)."""
    reasons: list[str] = []
    keys = label_keys_of(group, flavors)
    borrowing: str | None = None
    wanted = {r: n for r, n in pod_set.total.items() if r in group.covered}
    for name, _ in group.flavors:
        flavor = flavors.get(name)
        if flavor is None:
            reasons.append(f"flavor {name} not found")
            continue
        why = flavor_mismatch(pod_set.pod, flavor, keys)
        if why:
            reasons.append(why)
            continue
        fits, borrows = True, False
        for resource, amount in wanted.items():
            space = room(cq, queues, usage, name, resource)
            value = assumed.get((name, resource), 0) + amount
            if value > space.potential:
                reasons.append(
                    f"insufficient quota for {resource} in flavor {name}, previously considered "
                    f"podsets requests ({assumed.get((name, resource), 0)}) + current podset "
                    f"request ({amount}) > maximum capacity ({space.potential})"
                )
                fits = False
                break
            if value > space.available:
                more = value - space.available
                reasons.append(
                    f"insufficient unused quota for {resource} in flavor {name}, {more} more needed"
                )
                fits = False
                break
            borrows = borrows or value + space.used > space.limit.nominal
        if not fits:
            continue
        if not borrows:
            return name, reasons, False
        if cq.when_can_borrow != TRY_NEXT:
            return name, reasons, True
        borrowing = borrowing or name
    return borrowing, reasons, borrowing is not None


def label_keys_of(group: ResourceGroup, flavors: Mapping[str, Flavor]) -> frozenset[str]:
    """The node label keys the group's flavors name: the only keys of the pod's selector and
    affinity that Kueue matches against a flavor."""
    return frozenset(
        key for name, _ in group.flavors if name in flavors for key in flavors[name].node.labels
    )


def flavor_mismatch(pod: Pod, flavor: Flavor, keys: frozenset[str]) -> str:
    """Why Kueue passes over `flavor` for this pod ("" when it does not)."""
    left = untolerated(flavor.node, (*pod.tolerations, *flavor.tolerations), running=False)
    if left:  # in Kueue's words: Go's %s of the Taint struct (TimeAdded nil)
        taint = left[0]
        shown = f"{{{taint.key} {taint.value} {taint.effect} <nil>}}"
        return f"untolerated taint {shown} in flavor {flavor.name}"
    selector = {k: v for k, v in pod.node_selector.items() if k in keys}
    affinity: tuple[SelectorTerm, ...] | None = None
    if pod.affinity:
        terms: list[SelectorTerm] = []
        for term in pod.affinity:
            kept = tuple(r for r in term.match_expressions if r.key in keys)
            if not kept:  # an unconstrained term matches every flavor: only the selector counts
                terms = []
                break
            terms.append(SelectorTerm(kept))
        affinity = tuple(terms) or None
    cut = Pod(pod.namespace, pod.name, node_selector=selector, affinity=affinity)
    if not check_selectors(cut, flavor.node, ()).passed:
        return f"flavor {flavor.name} doesn't match node affinity"
    return ""
