"""The scheduler's filters re-evaluated: taints against tolerations, node selectors and
required node affinity, with GPU-type requirements told apart from the rest."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.cluster import Node, Pod, Requirement, SelectorTerm, Taint
from kube_gpu_exporter.exporter.cluster import Toleration as T
from kube_gpu_exporter.exporter.cluster.filters import (
    check_selectors,
    requirement_matches,
    tolerates,
    untolerated,
)
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_GPU_TYPE_LABELS

GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")
TYPES = DEFAULT_GPU_TYPE_LABELS
PRODUCT = "nvidia.com/gpu.product"


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (T("nvidia.com/gpu", "Exists"), GPU, True),
        (T("nvidia.com/gpu", "Exists", effect="NoSchedule"), GPU, True),
        (T("nvidia.com/gpu", "Exists", effect="NoExecute"), GPU, False),
        (T("nvidia.com/gpu", "Equal", "present"), GPU, True),
        (T("nvidia.com/gpu", "Equal", "absent"), GPU, False),
        (T("nvidia.com/gpu", "Equal", ""), Taint("nvidia.com/gpu", "", "NoSchedule"), True),
        (T("other", "Exists"), GPU, False),
        (T("", "Exists"), GPU, True),  # an empty key with Exists tolerates everything
        (T("", "Exists", effect="NoExecute"), GPU, False),
        (T("nvidia.com/gpu", "Gt", "1"), GPU, False),  # an operator it does not know
    ],
)
def test_tolerations(toleration: T, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_only_filtering_taints_count_and_a_cordon_taints_too() -> None:
    node = Node(
        "n",
        taints=(GPU, Taint("soft", "", "PreferNoSchedule"), Taint("gone", "", "NoExecute")),
        unschedulable=True,
    )
    assert [str(t) for t in untolerated(node, [T("nvidia.com/gpu", "Exists")])] == [
        "gone:NoExecute",
        "node.kubernetes.io/unschedulable:NoSchedule",
    ]
    assert untolerated(node, [T("", "Exists")]) == ()


def test_a_node_not_ready_carries_only_the_taints_it_has() -> None:
    """The scheduler reads taints, not the Ready condition: a node whose Ready is False or
    Unknown (no kubelet heartbeat) is excluded by the `not-ready` or `unreachable` taints
    its node lifecycle controller sets, and until it sets them it takes pods."""
    bare = Node("n", ready=False)
    assert untolerated(bare, [], running=False) == ()
    unreachable = Taint("node.kubernetes.io/unreachable", "", "NoSchedule")
    lost = Node("n", taints=(unreachable,), ready=False)
    for running in (False, True):
        assert untolerated(lost, [], running=running) == (unreachable,)
        tolerating = [T("node.kubernetes.io/not-ready", "Exists")]
        assert untolerated(lost, tolerating, running=running) == (unreachable,)
    # would a pod run there: not before a kubelet makes it Ready
    assert [t.key for t in untolerated(bare, [])] == ["node.kubernetes.io/not-ready"]


@pytest.mark.parametrize(
    ("operator", "values", "label", "expected"),
    [
        ("In", ("a", "b"), "b", True),
        ("In", ("a",), None, False),
        ("NotIn", ("a",), None, True),
        ("NotIn", ("a",), "a", False),
        ("Exists", (), "", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("Gt", ("4",), "8", True),
        ("Gt", ("8",), "8", False),
        ("Lt", ("8",), "4", True),
        ("Lt", ("8",), "x", False),
        ("Gt", ("1", "2"), "8", False),
        # Go's strconv.ParseInt(v, 10, 64), for the label and the bound alike
        ("Gt", ("5",), "1_0", False),
        ("Lt", ("50",), "1_0", False),
        ("Gt", ("9",), "010", True),
        ("Gt", ("1",), "0x10", False),
        ("Gt", ("1",), " 5", False),
        ("Gt", ("1",), "５", False),  # a digit, but not an ASCII one
        ("Lt", ("+5",), "4", True),
        ("Gt", ("-3",), "0", True),
        ("Gt", ("1_0",), "20", False),
        ("Gt", ("1",), "9223372036854775808", False),  # past int64
        ("Gt", ("1",), "9223372036854775807", True),
        ("Invalid", (), "a", False),
    ],
)
def test_requirements(
    operator: str, values: tuple[str, ...], label: str | None, expected: bool
) -> None:
    assert requirement_matches(Requirement("k", operator, values), label) is expected


def node(name: str = "n1", **labels: str) -> Node:
    return Node(name, labels={k.replace("_", "."): v for k, v in labels.items()})


def pod(selector: dict[str, str] | None = None, *terms: SelectorTerm) -> Pod:
    return Pod("ml", "p", node_selector=selector or {}, affinity=terms or None)


def expr(key: str, operator: str, *values: str) -> SelectorTerm:
    return SelectorTerm(match_expressions=(Requirement(key, operator, values),))


def test_terms_are_ored_and_their_requirements_anded() -> None:
    both = SelectorTerm(
        match_expressions=(Requirement("zone", "In", ("a",)), Requirement("disk", "Exists"))
    )
    target = node(zone="a", disk="ssd")
    assert check_selectors(pod(None, both), target, TYPES).passed
    assert not check_selectors(pod(None, both), node(zone="a"), TYPES).passed
    assert check_selectors(pod(None, expr("zone", "In", "b"), both), target, TYPES).passed


def test_match_fields_name_the_node() -> None:
    by_name = SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),))
    assert check_selectors(pod(None, by_name), node("n1"), TYPES).passed
    assert check_selectors(pod(None, by_name), node("n2"), TYPES).other == (
        "metadata.name In (n1) (node: n2)",
    )
    by_label = SelectorTerm(match_fields=(Requirement("metadata.labels", "In", ("x",)),))
    assert not check_selectors(pod(None, by_label), node("n1"), TYPES).passed


def test_an_empty_term_or_an_empty_term_list_matches_no_node() -> None:
    assert not check_selectors(pod(None, SelectorTerm()), node(), TYPES).passed
    assert not check_selectors(Pod("ml", "p", affinity=()), node(), TYPES).passed


def test_gpu_type_requirements_are_told_apart() -> None:
    h100 = node(**{"nvidia_com/gpu_product": "H100", "zone": "a"})
    assert dict(h100.labels) == {PRODUCT: "H100", "zone": "a"}
    wants = pod({PRODUCT: "A100", "zone": "a"})
    assert check_selectors(wants, h100, TYPES).gpu_type == (f"{PRODUCT}=A100 (node: H100)",)
    assert check_selectors(wants, h100, TYPES).other == ()
    wants = pod(None, SelectorTerm(
        match_expressions=(Requirement(PRODUCT, "In", ("A100",)), Requirement("zone", "In", ("b",)))
    ))  # fmt: skip
    check = check_selectors(wants, h100, TYPES)
    assert check.gpu_type == (f"{PRODUCT} In (A100) (node: H100)",)
    assert check.other == ("zone In (b) (node: a)",)


def test_terms_that_each_pass_a_part_but_not_the_whole_blame_the_other_affinity() -> None:
    """(A100 in zone a) or (H100 in zone b) on an H100 in zone a: no GPU type fixes it."""

    def term(product: str, zone: str) -> SelectorTerm:
        return SelectorTerm(
            match_expressions=(
                Requirement(PRODUCT, "In", (product,)),
                Requirement("zone", "In", (zone,)),
            )
        )

    h100_a = Node("n", labels={PRODUCT: "H100", "zone": "a"})
    check = check_selectors(pod(None, term("A100", "a"), term("H100", "b")), h100_a, TYPES)
    assert check.gpu_type == () and check.other == ("zone In (b) (node: a)",)
