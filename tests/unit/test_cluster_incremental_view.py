"""The cluster view kept change by change equals the view built from scratch.

A hypothesis state machine plays random sequences of watch events (nodes added, changed and
deleted; pods created pending, bound to a node, to a node the view does not know, ending,
deleted; quotas; relists with other contents) through `ListWatch`'s event path into
`HeldObjects`, and at random points runs a cycle as the cluster loop does: `take`, then
`IncrementalView.update`. Each cycle's view must equal `ClusterView.build` of what the watches
hold — node by node, the totals, the pods, quotas and pending pods — and render the same
families. Mutants of the incremental update (a node delete forgotten, a pod's old value not
taken off, a relist not rebuilt) must each be caught.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from kube_gpu_exporter.exporter.catalog.cluster import Reason
from kube_gpu_exporter.exporter.cluster import (
    DEFAULT_SETTINGS,
    ClusterView,
    Node,
    Pod,
    Quota,
    Taint,
    Toleration,
)
from kube_gpu_exporter.exporter.cluster.capacity import node_capacity
from kube_gpu_exporter.exporter.cluster.classify import Classification, classify
from kube_gpu_exporter.exporter.cluster.incremental_view import IncrementalView
from kube_gpu_exporter.exporter.cluster.placement import check_node
from kube_gpu_exporter.exporter.cluster.settings import PRODUCT_LABEL
from kube_gpu_exporter.exporter.cluster.view_changes import HeldObjects, Taken
from kube_gpu_exporter.exporter.exposition.cluster_families import ClusterState, cluster_families
from kube_gpu_exporter.exporter.kubernetes.decoding import Event
from kube_gpu_exporter.exporter.kubernetes.list_watch import ListWatch

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
NODE_NAMES = ("gpu-a", "gpu-b", "gpu-c")
BOUND_TO = ("", *NODE_NAMES, "gone")  # "": waiting; "gone": a node the watch does not hold
NAMESPACES = ("team-a", "team-b")
POD_NAMES = ("p0", "p1", "p2", "p3")
QUOTA_NAMES = ("gpu", "mig")
AMOUNTS: Mapping[str, tuple[int, ...]] = {
    "cpu": (0, 50, 100, 2000),
    "memory": (0, 64 << 20, 128 << 20, 1 << 30),
    "pods": (0, 1, 2, 3),
    GPU: (0, 1, 2, 4, 8),
    MIG: (0, 1, 7),
}
NOW = 1_000.0


def resources(positive: bool) -> st.SearchStrategy[Mapping[str, int]]:
    """A resource list: allocatable keeps zeros (a fact), requests leave them out."""
    names = sorted(AMOUNTS)
    amounts = st.tuples(*(st.sampled_from((None, None, *AMOUNTS[name])) for name in names))
    return amounts.map(
        lambda values: MappingProxyType(
            {k: v for k, v in zip(names, values, strict=True) if v is not None}
            if not positive
            else {k: v for k, v in zip(names, values, strict=True) if v}
        )
    )


def nodes(name: str) -> st.SearchStrategy[Node]:
    labels = st.dictionaries(
        st.sampled_from((PRODUCT_LABEL, "nvidia.com/gpu.present")),
        st.sampled_from(("NVIDIA-H100", "NVIDIA-A100", "true")),
        max_size=2,
    )
    taints = st.lists(
        st.sampled_from((Taint(GPU), Taint("dedicated", "inference"))), max_size=2, unique=True
    )
    return st.builds(
        Node,
        name=st.just(name),
        labels=labels.map(MappingProxyType),
        taints=taints.map(tuple),
        allocatable=resources(positive=False),
        ready=st.booleans(),
        unschedulable=st.booleans(),
    )


def pods(namespace: str, name: str) -> st.SearchStrategy[Pod]:
    selector = st.dictionaries(
        st.just(PRODUCT_LABEL), st.sampled_from(("NVIDIA-H100", "NVIDIA-A100")), max_size=1
    )
    tolerations = st.sampled_from(((), (Toleration(GPU, "Exists"),)))
    return st.builds(
        Pod,
        namespace=st.just(namespace),
        name=st.just(name),
        phase=st.sampled_from(("Pending", "Pending", "Running", "Succeeded", "Failed")),
        node_name=st.sampled_from(BOUND_TO),
        created_at=st.sampled_from((None, 100.0, 900.0)),
        requests=resources(positive=True),
        tolerations=tolerations,
        node_selector=selector.map(MappingProxyType),
        scheduling_gates=st.sampled_from(((), ("example.com/gate",))),
        scheduled_reason=st.sampled_from(("", "Unschedulable")),
        deleting=st.booleans(),
    )


def quotas(namespace: str, name: str) -> st.SearchStrategy[Quota]:
    amounts = st.dictionaries(st.sampled_from((GPU, MIG)), st.integers(0, 8), max_size=2)
    return st.builds(
        Quota,
        namespace=st.just(namespace),
        name=st.just(name),
        hard=amounts.map(MappingProxyType),
        used=amounts.map(MappingProxyType),
        scoped=st.booleans(),
    )


# One strategy per identity, built once (a flatmap would build one per draw: ten times slower).
node_values = st.one_of([st.tuples(st.just(n), nodes(n)) for n in NODE_NAMES])
pod_values = st.one_of(
    [st.tuples(st.just(f"{ns}/{n}"), pods(ns, n)) for ns in NAMESPACES for n in POD_NAMES]
)
quota_values = st.one_of(
    [st.tuples(st.just(f"{ns}/{n}"), quotas(ns, n)) for ns in NAMESPACES for n in QUOTA_NAMES]
)
events = st.sampled_from(("ADDED", "MODIFIED", "DELETED", "DROPPED"))


class Watch:
    """One resource's watch as the cluster command wires it: events go through
    `ListWatch._apply` (its per-event path) into `HeldObjects`; `held` is what the watch
    holds, `model` what it should hold, kept by the test itself."""

    def __init__(self, name: str) -> None:
        self.held: HeldObjects[Any] = HeldObjects()
        self.list_watch: ListWatch[Any] = ListWatch(
            name, _no_request, _parse, self.held.publish, store=self.held.store
        )
        self.items: dict[str, Any] = {}
        self.model: dict[str, Any] = {}
        self.relist({})

    def event(self, kind: str, key: str, value: Any) -> None:
        """DROPPED: a MODIFIED event that parses to None (a pod that ended, as `_pod` drops)."""
        dropped = kind == "DROPPED"
        obj = {"metadata": {"resourceVersion": "7"}, "key": key}
        obj["value"] = None if dropped else value
        event = Event("MODIFIED" if dropped else kind, obj, "7")
        self.list_watch._apply(self.items, event, "6")
        if kind in ("DELETED", "DROPPED"):
            self.model.pop(key, None)
        else:
            self.model[key] = value

    def relist(self, items: dict[str, Any]) -> None:
        self.items = dict(items)
        self.held.publish(self.items)
        self.model = dict(items)


def _no_request(**_: Any) -> Any:
    raise AssertionError("the machine applies events itself")


def _parse(obj: Mapping[str, Any]) -> tuple[str, Any]:
    return obj["key"], obj["value"]


class ViewMachine(RuleBasedStateMachine):
    """Random events, relists and cycles; every cycle's view is checked (`check_view`)."""

    view_class: type[IncrementalView] = IncrementalView

    def __init__(self) -> None:
        super().__init__()
        self.watches = {r: Watch(r) for r in ("nodes", "pods", "resourcequotas")}
        self.view = self.view_class(DEFAULT_SETTINGS)

    @rule(kind=events, item=node_values)
    def node_event(self, kind: str, item: tuple[str, Node]) -> None:
        self.watches["nodes"].event(kind, *item)

    @rule(kind=events, item=pod_values)
    def pod_event(self, kind: str, item: tuple[str, Pod]) -> None:
        self.watches["pods"].event(kind, *item)

    @rule(kind=events, item=quota_values)
    def quota_event(self, kind: str, item: tuple[str, Quota]) -> None:
        self.watches["resourcequotas"].event(kind, *item)

    @rule(items=st.lists(node_values, max_size=3))
    def relist_nodes(self, items: list[tuple[str, Node]]) -> None:
        self.watches["nodes"].relist(dict(items))

    @rule(items=st.lists(pod_values, max_size=6))
    def relist_pods(self, items: list[tuple[str, Pod]]) -> None:
        self.watches["pods"].relist(dict(items))

    @rule(items=st.lists(quota_values, max_size=3))
    def relist_quotas(self, items: list[tuple[str, Quota]]) -> None:
        self.watches["resourcequotas"].relist(dict(items))

    def teardown(self) -> None:
        self.cycle()

    @rule()
    def cycle(self) -> None:
        taken = {name: watch.held.take() for name, watch in self.watches.items()}
        for name, watch in self.watches.items():
            assert Counter(map(id, taken[name].values)) == Counter(map(id, watch.model.values()))
            assert set(taken[name].held) == set(watch.model)
        view = self.view.update(taken["nodes"], taken["pods"], taken["resourcequotas"])
        self.last_view = view
        models = {name: tuple(watch.model.values()) for name, watch in self.watches.items()}
        check_view(view, models["nodes"], models["pods"], models["resourcequotas"])


def check_view(
    view: ClusterView, nodes: tuple[Node, ...], pods: tuple[Pod, ...], quotas: tuple[Quota, ...]
) -> None:
    """`view` is what `ClusterView.build` makes of these objects, in every figure a reader
    reads, and renders the same families."""
    built = ClusterView.build(nodes, pods, quotas, DEFAULT_SETTINGS)
    assert list(view.nodes) == list(built.nodes)  # in name order
    for name, state in view.nodes.items():
        expected = built.nodes[name]
        assert state.node is expected.node
        assert dict(state.allocated) == dict(expected.allocated), name
        assert dict(state.free) == dict(expected.free), name
        assert dict(state.gpus) == dict(expected.gpus), name
        assert (state.product, state.gpu_node) == (expected.product, expected.gpu_node), name
    assert dict(view.advertised) == dict(built.advertised)
    assert Counter(map(id, view.pods)) == Counter(map(id, built.pods))
    assert {ns: ids(q) for ns, q in view.quotas.items()} == {
        ns: ids(q) for ns, q in built.quotas.items()
    }
    waiting = [p for p in pods if p.unscheduled and DEFAULT_SETTINGS.gpu_part(p.requests)]
    assert ids(view.pending_gpu_pods()) == ids(built.pending_gpu_pods()) == ids(waiting)
    assert families(view) == families(built)
    # verdicts with their evidence, node by node: what the checks lent by the last cycle's
    # view (ClusterView.carried) must not change
    for pod in waiting:
        assert verdict(classify(view, pod)) == verdict(classify(built, pod)), pod.name
    assert node_capacity(view) == node_capacity(built)


def verdict(found: Classification) -> tuple[Any, ...]:
    return (found.reason, found.summary, found.nodes, found.fits, found.open_free, found.quota)


def ids(objects: Any) -> Counter[int]:
    return Counter(map(id, objects))


def families(view: ClusterView) -> list[Any]:
    return list(cluster_families(ClusterState(view, {}, NOW)))


RUN = settings(
    max_examples=250,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


# A mutant only has to be caught: no shrinking, the first failure is enough.
FIND = settings(RUN, phases=[Phase.generate], report_multiple_bugs=False)


def test_the_incremental_view_equals_a_full_build_over_random_events() -> None:
    run_state_machine_as_test(ViewMachine, settings=RUN)


class ForgetsNodeDeletes(IncrementalView):
    def _node(self, old: Node | None, new: Node | None) -> None:
        if new is not None:
            super()._node(old, new)


class KeepsOldPods(IncrementalView):
    def _pod(self, pod: Pod | None, sign: int) -> None:
        if sign > 0:
            super()._pod(pod, sign)


class IgnoresRelists(IncrementalView):
    def update(self, nodes: Taken[Node], pods: Taken[Pod], quotas: Taken[Quota]) -> ClusterView:
        if self._lists is None:
            return super().update(nodes, pods, quotas)
        lists = (nodes.lists, pods.lists, quotas.lists)
        self._lists = lists
        return super().update(nodes, pods, quotas)


class SkipsNodeStates(IncrementalView):
    """Node states made only when the node itself changes, not when its pods do."""

    def _charge(self, node_name: str, requests: Mapping[str, int], sign: int) -> None:
        super()._charge(node_name, requests, sign)
        self._dirty.discard(node_name)


@pytest.mark.parametrize(
    "mutant", [ForgetsNodeDeletes, KeepsOldPods, IgnoresRelists, SkipsNodeStates]
)
def test_the_property_catches_a_broken_incremental_update(mutant: type[IncrementalView]) -> None:
    machine = type(f"{mutant.__name__}Machine", (ViewMachine,), {"view_class": mutant})
    with pytest.raises((AssertionError, LookupError)):  # a figure differs, or a state is missing
        run_state_machine_as_test(machine, settings=FIND)


def _lends_any_check(
    view: ClusterView, pod: Pod, earlier: object, requested: Mapping[str, int]
) -> tuple[Any, ...]:
    """The last cycle's check of a node taken over even where the node's state changed."""
    lent = {c.node: c for c in earlier.nodes} if isinstance(earlier, Classification) else {}
    labels = view.settings.gpu_type_labels
    return tuple(
        lent.get(name) or check_node(pod, state, requested, labels)
        for name, state in view.nodes.items()
        if state.gpu_node or not requested
    )


def _lends_any_rows(view: ClusterView, name: str, state: Any) -> tuple[Any, ...]:
    """The first rows ever made for a node name, whatever its state since."""
    return _FIRST_ROWS.setdefault(name, _NODE_ROWS(view, name, state))


_FIRST_ROWS: dict[str, tuple[Any, ...]] = {}
# the modules, not the functions of the same names that the package exports
classifying = importlib.import_module("kube_gpu_exporter.exporter.cluster.classify")
capacity = importlib.import_module("kube_gpu_exporter.exporter.cluster.capacity")
_NODE_ROWS = capacity._node_rows


def bind_beside_a_waiting_pod() -> None:
    """A GPU pod waits and fits on gpu-a; then another binds there and takes most of its
    GPUs: the second cycle's verdict and capacity rows must follow gpu-a's new state, not
    what the first cycle's view lends."""
    machine = ViewMachine()
    allocatable = MappingProxyType({GPU: 8, "cpu": 2000, "pods": 3})
    node = Node(name="gpu-a", allocatable=allocatable, ready=True)
    machine.node_event("ADDED", ("gpu-a", node))
    waiting = Pod("team-a", "p0", requests=MappingProxyType({GPU: 4}), created_at=100.0)
    machine.pod_event("ADDED", ("team-a/p0", waiting))
    machine.cycle()
    bound = Pod("team-a", "p1", phase="Running", node_name="gpu-a")
    bound = dataclasses.replace(bound, requests=MappingProxyType({GPU: 6}))
    machine.pod_event("ADDED", ("team-a/p1", bound))
    machine.cycle()
    view = machine.last_view
    assert [(r.node, r.allocated, r.free) for r in node_capacity(view)] == [("gpu-a", 6, 2)]
    assert classify(view, waiting).reason is Reason.INSUFFICIENT_GPUS


def test_a_node_that_changed_between_cycles_is_checked_again() -> None:
    bind_beside_a_waiting_pod()


@pytest.mark.parametrize(
    ("module", "name", "broken"),
    [(classifying, "_checks", _lends_any_check), (capacity, "_node_rows", _lends_any_rows)],
    ids=["checks lent across a state change", "capacity rows kept across a state change"],
)
def test_the_property_catches_what_a_view_lends_its_next_cycle_wrongly(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, broken: Any
) -> None:
    _FIRST_ROWS.clear()
    monkeypatch.setattr(module, name, broken)
    with pytest.raises(AssertionError):
        bind_beside_a_waiting_pod()


def test_events_are_not_relists_and_a_relist_voids_the_changes() -> None:
    held: HeldObjects[int] = HeldObjects()
    items: dict[str, int] = {}
    held.publish(items)
    for key, value in (("a", 1), ("b", 2), ("a", 3), ("b", None), ("c", 4)):
        held.store(items, key, value)
        held.publish(items)  # as ListWatch does after each event
    taken = held.take()
    assert taken.lists == 1  # events are not lists: the loop freezes the heap once per list
    assert dict(taken.changes) == {"a": (None, 3), "c": (None, 4)}  # b came and went
    assert held.take().changes == {}
    held.store(items, "a", 5)
    held.publish({"z": 9})  # a relist
    taken = held.take()
    assert (taken.lists, dict(taken.held), taken.changes) == (2, {"z": 9}, {})


def test_relists_rebuild_and_events_do_not() -> None:
    machine = ViewMachine()
    pods = machine.watches["pods"]
    machine.cycle()
    for n in range(20):
        pods.event("ADDED", f"team-a/p{n}", Pod("team-a", f"p{n}", node_name="gpu-a"))
        machine.cycle()
    assert machine.view.rebuilds == 1
    pods.relist(dict(pods.model))
    machine.cycle()
    assert machine.view.rebuilds == 2


@pytest.fixture
def switching_often() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch between almost any two bytecodes
    yield
    sys.setswitchinterval(interval)


def test_views_taken_while_a_watch_thread_applies_events_are_consistent(
    switching_often: None,
) -> None:
    """Every view equals a build of the very objects it was taken with, whatever the watch
    thread was doing meanwhile."""
    nodes = {name: Node(name, allocatable=MappingProxyType({GPU: 8})) for name in NODE_NAMES}
    machine = ViewMachine()
    machine.watches["nodes"].relist(nodes)
    held = machine.watches["pods"].held
    done = threading.Event()

    def watch() -> None:
        items = held.items
        assert isinstance(items, dict)
        for n in range(20_000):
            key = f"team-a/p{n % 50}"
            pod = Pod("team-a", key[7:], node_name=BOUND_TO[n % len(BOUND_TO)],
                      requests=MappingProxyType({GPU: 1 + n % 3}))  # fmt: skip
            held.store(items, key, None if n % 7 == 0 else pod)
            held.publish(items)
        done.set()

    thread = threading.Thread(target=watch)
    thread.start()
    view = IncrementalView(DEFAULT_SETTINGS)
    cycles = 0
    while not done.is_set() or cycles < 2:
        taken = {name: watch.held.take() for name, watch in machine.watches.items()}
        built = view.update(taken["nodes"], taken["pods"], taken["resourcequotas"])
        allocated = {name: dict(state.allocated) for name, state in built.nodes.items()}
        expected = ClusterView.build(taken["nodes"].values, taken["pods"].values)
        assert allocated == {name: dict(s.allocated) for name, s in expected.nodes.items()}
        cycles += 1
    thread.join()
