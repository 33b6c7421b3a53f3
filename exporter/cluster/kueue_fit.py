"""One reason per waiting Kueue Workload, joining Kueue's verdict and the view's node fit.

- While Kueue has not reserved quota, the reason is Kueue's own (its QuotaReserved=False
  reason, verbatim) — unless some pod set of the Workload fits no node of any flavor its
  ClusterQueue offers for its GPU resource even with every node empty: quota will never
  help, and the reason is ours (`never_fits`), in classify.py's words. "Fragmented" on empty
  nodes means no single node is big enough, so it reads `insufficient_gpus` there.
- Once quota is reserved or the Workload admitted, a pod of it that the scheduler cannot
  place gets our reason for it, classify.py's on the real pod (which carries the flavor's
  labels and tolerations Kueue added); before the Job's pods exist, each pod set's template
  with its assigned flavor applied stands in for them (`placement_reason`). A Workload whose
  pods all fit is not waiting; one with quota reserved but not admitted yet waits for its
  admission checks, in Kueue's words (its Admitted=False reason).

Pods Kueue's admission gate holds (with no gate but Kueue's: v0.17 adds `topology` beside it)
are not blamed on the gate: the Workload's reason is theirs too (kueue_view.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from kube_gpu_exporter.exporter.catalog.cluster import Reason
from kube_gpu_exporter.exporter.cluster.classify import classify
from kube_gpu_exporter.exporter.cluster.kueue_objects import Flavor, Queue
from kube_gpu_exporter.exporter.cluster.kueue_workloads import Workload
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.view import ClusterView, NodeState, node_state

ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"  # plain pods wait behind it until admitted
KUEUE_GATES: Final = "kueue.x-k8s.io/"  # its others: `topology` (v0.17 adds it beside), …


def kueue_gated(pod: Pod) -> bool:
    """Held by Kueue's admission gate and by no gate but Kueue's own."""
    return ADMISSION_GATE in pod.scheduling_gates and held_by_kueue(pod)


def held_by_kueue(pod: Pod) -> bool:
    """Gated, by Kueue's gates alone: Kueue lets it go itself."""
    gates = pod.scheduling_gates
    return bool(gates) and all(gate.startswith(KUEUE_GATES) for gate in gates)


def with_flavor(pod: Pod, flavor: Flavor | None) -> Pod:
    """The pod as Kueue lets it go in `flavor`: the flavor's node labels added to its node
    selector, its tolerations to the pod's."""
    if flavor is None or (not flavor.node_labels and not flavor.tolerations):
        return pod
    return dataclasses.replace(
        pod,
        node_selector=MappingProxyType({**pod.node_selector, **flavor.node_labels}),
        tolerations=(*pod.tolerations, *flavor.tolerations),
    )


def never_fits(
    workload: Workload, queue: Queue | None, flavors: Mapping[str, Flavor], empty: ClusterView
) -> Reason | None:
    """Our reason when a pod set fits no node, all of them empty, in any flavor its
    ClusterQueue has quota of its GPU resource in; None when one may fit, or when the queue
    or a flavor is not known (unknown is not never)."""
    if queue is None:
        return None
    for pod_set in workload.pod_sets:
        wanted = set(empty.gpu_requests(pod_set.pod))
        names = dict.fromkeys(q.flavor for q in queue.quotas if q.resource in wanted)
        if not names:
            continue  # no quota for it at all: Kueue says so itself
        first: Reason | None = None
        for name in names:
            flavor = flavors.get(name)
            if flavor is None:
                return None
            reason = classify(empty, with_flavor(pod_set.pod, flavor)).reason
            if reason is None:
                break
            first = first or reason
        else:
            return Reason.INSUFFICIENT_GPUS if first is Reason.FRAGMENTED else first
    return None


def placement_reason(
    view: ClusterView, workload: Workload, pods: Sequence[Pod], flavors: Mapping[str, Flavor]
) -> Reason | None:
    """Why an admitted Workload's pods cannot be placed now (its pending pods, or before any
    exists its pod sets in their flavors); None when they can, or are placed."""
    if pods:
        for pod in pods:
            if not pod.unscheduled or held_by_kueue(pod):
                continue  # bound, or about to be let go by Kueue
            reason = classify(view, pod).reason
            if reason is not None:
                return reason
        return None
    if not workload.admitted:
        return None
    for pod_set in workload.pod_sets:
        flavor = flavors.get(workload.flavors.get(pod_set.name, ""))
        reason = classify(view, with_flavor(pod_set.pod, flavor)).reason
        if reason is not None:
            return reason
    return None


def workload_reason(
    view: ClusterView,
    empty: ClusterView,
    workload: Workload,
    pods: Sequence[Pod],
    queue: Queue | None,
    flavors: Mapping[str, Flavor],
) -> str | None:
    """The one reason the Workload waits (see the module docstring); None: not waiting."""
    if workload.reserved or workload.admitted:
        ours = placement_reason(view, workload, pods, flavors)
        if ours is not None:
            return ours.value
        return None if workload.admitted else workload.admit_reason
    never = never_fits(workload, queue, flavors, empty)
    return never.value if never is not None else workload.quota_reason


class EmptyNodes:
    """The view's nodes with nothing bound to them: where a pod set could go once quota
    frees up. Node states are kept across cycles per node object (made again when it
    changes), and the whole view, with its cache of classifications, while no node changed:
    the same pod sets are judged again every cycle."""

    def __init__(self) -> None:
        self._states: dict[str, NodeState] = {}
        self._view: ClusterView | None = None

    def view(self, view: ClusterView) -> ClusterView:
        states = {}
        changed = len(view.nodes) != len(self._states)
        for name, state in view.nodes.items():
            held = self._states.get(name)
            if held is None or held.node is not state.node:
                held = node_state(state.node, {}, view.settings)
                changed = True
            states[name] = held
        if self._view is not None and not changed:
            return self._view
        self._states = states
        self._view = ClusterView(
            nodes=MappingProxyType(states),
            pods=(),
            quotas=MappingProxyType({}),
            settings=view.settings,
            advertised=view.advertised,
            pending=(),
        )
        return self._view
