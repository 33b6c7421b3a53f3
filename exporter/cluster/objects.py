"""Slim frozen values of the Kubernetes objects the scheduler's filters read.

A pod spec can be tens of kilobytes (env, volumes, probes); what placement needs of it is a
few hundred bytes: the effective requests, tolerations, node selector and required node
affinity, gates and a few status fields. Keeping only these (`parse.py` builds them from the
API's JSON) keeps a cluster-wide watch's memory proportional to the number of objects, not
to the size of their specs. Mappings are read-only views, excluded from hashing; the
scheduling-relevant part of a pod is hashable through `Pod.placement_key`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from kube_gpu_exporter.exporter.cluster.quantities import EMPTY, Resources

NO_SCHEDULE: Final = "NoSchedule"
NO_EXECUTE: Final = "NoExecute"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
# The pods that have not ended, as a field selector: the API server leaves the others out.
ACTIVE_PODS: Final = "status.phase!=Succeeded,status.phase!=Failed"
NO_LABELS: Final[Mapping[str, str]] = MappingProxyType({})
# The taint of a cordoned node; the scheduler's NodeUnschedulable plugin reads the cordon
# itself (`spec.unschedulable`), so the view adds it where the node does not carry it yet.
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"
# What the node lifecycle controller taints a node with: Ready False, and Ready Unknown.
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
LIFECYCLE_TAINTS: Final = frozenset({NOT_READY_TAINT, "node.kubernetes.io/unreachable"})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    """A pod's toleration; `operator` is "Equal" (the API's default) or "Exists", `effect`
    "" tolerates every effect, and an empty `key` with Exists tolerates every taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True)
class Requirement:
    """A node selector requirement: In, NotIn, Exists, DoesNotExist, Gt, Lt over a label (or,
    in `match_fields`, over `metadata.name`)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} ({', '.join(self.values)})"


@dataclass(frozen=True)
class SelectorTerm:
    """One required node-affinity term: its requirements are ANDed (terms are ORed)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class Node:
    """What the scheduler reads of a Node. `allocatable` is in scheduler units (see
    quantities.py); `ready` is the Ready condition being True."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: NO_LABELS, hash=False)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=lambda: EMPTY, hash=False)
    ready: bool = True
    unschedulable: bool = False

    @functools.cached_property
    def effective_taints(self) -> tuple[Taint, ...]:
        """The taints placement honours: NoSchedule and NoExecute ones, plus the cordon's
        taint when the node does not carry it yet (the scheduler reads the cordon itself;
        a pod that tolerates the taint, a DaemonSet's, is placed all the same).

        The Ready condition adds nothing: the scheduler reads only the taints the node
        lifecycle controller sets for it (`not-ready` when False, `unreachable` when
        Unknown), and a node that does not carry them yet takes pods."""
        taints = [t for t in self.taints if t.effect in (NO_SCHEDULE, NO_EXECUTE)]
        if self.unschedulable and UNSCHEDULABLE_TAINT not in {t.key for t in taints}:
            taints.append(Taint(UNSCHEDULABLE_TAINT))
        return tuple(taints)

    @functools.cached_property
    def running_taints(self) -> tuple[Taint, ...]:
        """`effective_taints`, and for a node whose Ready condition is not True that carries
        neither lifecycle taint yet, a `not-ready` one standing in: a pod the scheduler
        would place there does not run (capacity's question, not the scheduler's)."""
        keys = {t.key for t in self.effective_taints}
        if self.ready or keys & LIFECYCLE_TAINTS:
            return self.effective_taints
        return (*self.effective_taints, Taint(NOT_READY_TAINT))


PlacementKey = tuple[object, ...]


@dataclass(frozen=True)
class Pod:
    """What placement and the cluster metrics read of a Pod.

    - `requests`: the effective requests (max of the init containers' peaks and the app
      containers plus restartable init sidecars, plus overhead), in scheduler units, zeros
      left out; limits stand in for missing requests, as the API's defaulting does;
    - `node_selector`, `affinity`: `affinity` is the required node-affinity terms, None when
      the pod has none (an empty tuple matches no node);
    - `scheduled_reason`/`scheduled_at`: the PodScheduled condition's reason
      ("Unschedulable", "SchedulingGated", "" when scheduled) and transition time;
    - `disruption`: the DisruptionTarget condition's reason (PreemptionByScheduler,
      DeletionByTaintManager, EvictionByEvictionAPI, TerminationByKubelet), else "";
    - `has_claims`: the pod asks for DRA resource claims, which placement does not evaluate;
    - `priority`: `spec.priority` as the Priority admission plugin set it, None when absent
      (the cluster watches do not read it; explain -f weighs preemption with it);
    - `owner_uid`: the uid of its controller owner (a Job's, a ReplicaSet's), "" when none:
      Kueue's Workload names the same owner, which ties the pod to its queue (kueue_pods.py).
    Times are Unix seconds, None when absent.
    """

    namespace: str
    name: str
    uid: str = ""
    phase: str = "Pending"
    node_name: str = ""
    created_at: float | None = None
    requests: Resources = field(default_factory=lambda: EMPTY, hash=False)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: NO_LABELS, hash=False)
    affinity: tuple[SelectorTerm, ...] | None = None
    scheduling_gates: tuple[str, ...] = ()
    nominated_node: str = ""
    scheduled_reason: str = ""
    scheduled_at: float | None = None
    status_reason: str = ""
    disruption: str = ""
    deleting: bool = False
    has_claims: bool = False
    priority: int | None = None
    owner_uid: str = ""

    @property
    def terminated(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def unscheduled(self) -> bool:
        """Waiting for the scheduler: not bound to a node and not ended."""
        return not self.node_name and not self.terminated

    @property
    def placement_key(self) -> PlacementKey:
        """Everything placement reads of the pod: two pods with equal keys place alike (the
        view caches classifications by it; a Job's replicas share one)."""
        return (
            tuple(sorted(self.requests.items())),
            self.tolerations,
            tuple(sorted(self.node_selector.items())),
            self.affinity,
            self.scheduling_gates,
            self.nominated_node,
        )


@dataclass(frozen=True)
class Quota:
    """A ResourceQuota's GPU entries: resource name (the `requests.` prefix removed) → units.
    `scoped`: the quota has scopes or a scope selector, so it binds only some pods (which,
    the view does not evaluate)."""

    namespace: str
    name: str
    hard: Resources = field(default_factory=lambda: EMPTY, hash=False)
    used: Resources = field(default_factory=lambda: EMPTY, hash=False)
    scoped: bool = False
