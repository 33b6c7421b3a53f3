"""The cluster view kept current change by change: what one pod or node changes is added and
taken off the figures it touches, and the whole is built again only after a (re)list.

`ClusterView.build` walks every node and pod, and at the targets' scale most of a cycle went
to summing the requests of pods that did not change (bench/README.md). Here the loop
keeps running figures and applies to them the changes its watches noted since the last
cycle (view_changes.py hands them over, consistent per resource):

- per node name, the requests of the pods bound to it that have not ended, `pods` counted.
  Kept for every name pods are bound to, known node or not, so a node that appears takes
  its pods' sums at once and one that goes leaves them for its return;
- per node, its `NodeState`, made again only when the node or its sums changed;
- the advertised GPU totals, with how many nodes advertise each resource (a resource no
  node names any more leaves the totals, as `build` would never have added it);
- quotas by namespace, and the pending GPU pods by (namespace, name).

A change is taken off with its old value and added with its new one, so a pod bound to a
node (pending → bound), a terminating one (bound → Succeeded) or one whose requests change
needs no case of its own. `update` then makes a new immutable `ClusterView` of the same
shape `build` makes (tests/unit/test_cluster_incremental_view.py holds the two equal over
random sequences of events): the readers (capacity, classification, quotas, families) see
one value per cycle as before, and node states that did not change are shared between
cycles, which is safe since they are frozen. The pods tuple is the copy the watch handed
over with the changes. Each view carries the last one's classifications, whose checks of the
nodes whose state is shared are taken over (classify.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.cluster.objects import Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.quantities import PODS, Resources, add
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.view import (
    ClusterView,
    NodeState,
    node_state,
    waits_for_gpu,
)
from kube_gpu_exporter.exporter.cluster.view_changes import Taken

Identity = tuple[str, str]  # (namespace, name)


class IncrementalView:
    """The running figures of one cluster; `update` once a cycle, from the loop's thread
    only (nothing here is locked)."""

    def __init__(self, settings: ClusterSettings) -> None:
        self._settings = settings
        self._lists: tuple[int, int, int] | None = None  # (nodes, pods, quotas) last seen
        self.rebuilds = 0
        self._reset()

    def _reset(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._allocated: dict[str, dict[str, int]] = {}  # node name → requests, pods
        self._states: dict[str, NodeState] = {}
        self._dirty: set[str] = set()  # node names whose state must be made again
        self._names: list[str] | None = None  # node names in order; None: to sort again
        self._ordered: Mapping[str, NodeState] = MappingProxyType({})
        self._advertised: dict[str, int] = {}
        self._advertisers: Counter[str] = Counter()  # GPU resource → nodes naming it
        self._pending: dict[Identity, Pod] = {}
        self._quotas: dict[str, dict[Identity, Quota]] = {}  # namespace → quotas
        self._quota_view: Mapping[str, tuple[Quota, ...]] | None = None
        # the last view's classifications, lent to the next one (ClusterView.carried)
        self._carried: Mapping[tuple[Any, ...], Any] = {}

    def update(self, nodes: Taken[Node], pods: Taken[Pod], quotas: Taken[Quota]) -> ClusterView:
        """The view of what was taken: the changes applied, or everything again when any
        of the three was (re)listed since the last update."""
        lists = (nodes.lists, pods.lists, quotas.lists)
        if lists != self._lists:
            self._lists = lists
            self.rebuild(nodes.values, pods.values, quotas.values)
        else:
            for old_node, new_node in nodes.changes.values():
                self._node(old_node, new_node)
            for old_pod, new_pod in pods.changes.values():
                self._pod(old_pod, -1)
                self._pod(new_pod, +1)
            for old_quota, new_quota in quotas.changes.values():
                self._quota(old_quota, new_quota)
        return self.view(pods.values)

    def rebuild(self, nodes: Iterable[Node], pods: Iterable[Pod], quotas: Iterable[Quota]) -> None:
        """Every figure again from the objects, as after a (re)list."""
        self.rebuilds += 1
        self._reset()
        for node in nodes:
            self._node(None, node)
        allocated, pending, settings = self._allocated, self._pending, self._settings
        for pod in pods:  # what `_pod` does for each, in one loop: a list is 150,000 pods
            if pod.terminated:
                continue
            if pod.node_name:
                usage = allocated.get(pod.node_name)
                if usage is None:
                    usage = allocated[pod.node_name] = {}
                add(usage, pod.requests)
                usage[PODS] = usage.get(PODS, 0) + 1
            elif settings.gpu_part(pod.requests):
                pending[(pod.namespace, pod.name)] = pod
        self._dirty.update(allocated)
        for quota in quotas:
            self._quota(None, quota)

    def view(self, pods: tuple[Pod, ...]) -> ClusterView:
        """The immutable view of the figures now, with `pods` (the objects they count)."""
        for name in self._dirty:
            node = self._nodes.get(name)
            if node is not None:
                allocated = self._allocated.get(name, {})
                self._states[name] = node_state(node, allocated, self._settings)
        if self._dirty or self._names is None:
            if self._names is None:
                self._names = sorted(self._nodes)
            self._ordered = MappingProxyType({name: self._states[name] for name in self._names})
            self._dirty.clear()
        if self._quota_view is None:
            by_namespace = {ns: tuple(held.values()) for ns, held in self._quotas.items()}
            self._quota_view = MappingProxyType(by_namespace)
        view = ClusterView(
            nodes=self._ordered,
            pods=pods,
            quotas=self._quota_view,
            settings=self._settings,
            advertised=MappingProxyType(dict(self._advertised)),
            pending=tuple(self._pending.values()),
            carried=self._carried,
        )
        self._carried = view.cache  # filled as this cycle classifies; lent to the next
        return view

    def _node(self, old: Node | None, new: Node | None) -> None:
        if old is not None:
            self._advertise(old.allocatable, -1)
        if new is not None:
            self._advertise(new.allocatable, +1)
        name = new.name if new is not None else old.name if old is not None else ""
        if new is None:
            self._nodes.pop(name, None)
            self._states.pop(name, None)
            self._names = None
        else:
            if name not in self._nodes:
                self._names = None
            self._nodes[name] = new
        self._dirty.add(name)

    def _advertise(self, allocatable: Resources, sign: int) -> None:
        for resource, amount in self._settings.gpu_part(allocatable).items():
            self._advertisers[resource] += sign
            if self._advertisers[resource] <= 0:
                del self._advertisers[resource], self._advertised[resource]
            else:
                self._advertised[resource] = self._advertised.get(resource, 0) + sign * amount

    def _pod(self, pod: Pod | None, sign: int) -> None:
        """Adds (`sign` +1) or takes off (-1) what the pod counts for."""
        if pod is None:
            return
        if pod.node_name and not pod.terminated:
            self._charge(pod.node_name, pod.requests, sign)
        if waits_for_gpu(pod, self._settings):
            identity = (pod.namespace, pod.name)
            if sign > 0:
                self._pending[identity] = pod
            else:
                self._pending.pop(identity, None)

    def _charge(self, node_name: str, requests: Resources, sign: int) -> None:
        usage = self._allocated.setdefault(node_name, {})
        for resource, amount in (*requests.items(), (PODS, 1)):
            left = usage.get(resource, 0) + sign * amount
            if left:
                usage[resource] = left
            else:
                usage.pop(resource, None)
        if not usage:
            del self._allocated[node_name]
        self._dirty.add(node_name)

    def _quota(self, old: Quota | None, new: Quota | None) -> None:
        if old is not None:
            held = self._quotas.get(old.namespace, {})
            held.pop((old.namespace, old.name), None)
            if not held:
                self._quotas.pop(old.namespace, None)
        if new is not None:
            self._quotas.setdefault(new.namespace, {})[(new.namespace, new.name)] = new
        self._quota_view = None
