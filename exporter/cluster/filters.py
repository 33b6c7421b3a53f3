"""The scheduler's node filters, re-evaluated: taints against tolerations, and the node
selector and required node affinity against a node's labels and name.

Events say why a pod waits in words that change between Kubernetes versions ("untolerated
taint(s)", "didn't match Pod's node affinity/selector"); evaluating the filters ourselves
gives the same answer on every version and says which taint or label excluded which node.
The semantics follow kube-scheduler's TaintToleration and NodeAffinity plugins (and
component-helpers' node selector): only NoSchedule and NoExecute taints filter; selector
terms are ORed, a term's requirements ANDed, and a term with no requirement matches nothing.

Requirements on a GPU-type label (settings.gpu_type_labels) are told apart from the others,
so that "asks for an A100 where only H100s are free" is not reported as a generic affinity.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

from kube_gpu_exporter.exporter.cluster.fields import SHARED
from kube_gpu_exporter.exporter.cluster.objects import (
    Node,
    Pod,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)

NODE_NAME_FIELD: Final = "metadata.name"  # the only field matchFields may name
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_GO_INTEGER: Final = re.compile(r"[+-]?[0-9]+")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ToleratesTaint: the effect matches (or is empty), the key matches (an empty
    key matches every key), and Exists takes any value where Equal needs the same one."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator == "Equal" and toleration.value == taint.value


def untolerated(
    node: Node, tolerations: Iterable[Toleration], *, running: bool = True
) -> tuple[Taint, ...]:
    """The node's filtering taints (the cordon's included) that no toleration covers:
    the node's own tuple when none is covered, a shared one otherwise (kept per check, as
    `_shared_check`). `running`: a node not Ready counts as tainted `not-ready` until it
    carries the taint (would a pod run there?); else only what it carries counts, as the
    scheduler reads it (would the pod be bound there?)."""
    taints = node.running_taints if running else node.effective_taints
    if not taints:
        return ()
    tolerations = tuple(tolerations)
    left = tuple(
        taint
        for taint in taints
        if not any(tolerates(toleration, taint) for toleration in tolerations)
    )
    if len(left) == len(taints):
        return taints
    return _shared_taints(left) if left else ()


@functools.lru_cache(maxsize=SHARED)
def _shared_taints(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
    return taints


def requirement_matches(requirement: Requirement, value: str | None) -> bool:
    """One requirement against the label's value (None: the node has no such label)."""
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        have, bound = go_integer(value), go_integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def go_integer(text: str) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads it, which Kubernetes' Gt and Lt
    use for the label and the bound alike: ASCII digits with an optional sign, in int64;
    else None (never matches). Python's int() also takes `1_0`, ` 5` and other digits."""
    if not _GO_INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if INT64_MIN <= number <= INT64_MAX else None


def _field_matches(requirement: Requirement, node: Node) -> bool:
    if requirement.key != NODE_NAME_FIELD or requirement.operator not in ("In", "NotIn"):
        return False
    return requirement_matches(requirement, node.name)


def _term_failures(term: SelectorTerm, node: Node, skip: Collection[str]) -> list[Requirement]:
    """The requirements of `term` the node fails; requirements on `skip` keys count as met."""
    if not term.match_expressions and not term.match_fields:
        return [Requirement("", "Empty")]  # an empty term matches no node
    failed = [
        req
        for req in term.match_expressions
        if req.key not in skip and not requirement_matches(req, node.labels.get(req.key))
    ]
    failed += [req for req in term.match_fields if not _field_matches(req, node)]
    return failed


@dataclass(frozen=True)
class SelectorCheck:
    """What a node fails of a pod's node selector and required affinity, as readable lines:
    `gpu_type` the requirements on GPU-type labels, `other` the rest."""

    gpu_type: tuple[str, ...] = ()
    other: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.gpu_type and not self.other


PASSED: Final = SelectorCheck()


def check_selectors(pod: Pod, node: Node, type_labels: Collection[str]) -> SelectorCheck:
    """The pod's nodeSelector and required node affinity against the node.

    The node fails the GPU type when the type requirements alone exclude it, and fails the
    other affinity when the rest alone excludes it. Terms are ORed, so a node may pass each
    part and still fail the whole (one term wants the type, another the zone): that counts
    as the other affinity, since no GPU type fixes it.
    """
    if not pod.node_selector and pod.affinity is None:
        return PASSED
    gpu_type: list[str] = []
    other: list[str] = []
    for key, wanted in pod.node_selector.items():
        have = node.labels.get(key)
        if have != wanted:
            (gpu_type if key in type_labels else other).append(f"{key}={wanted}{_has(have)}")
    if pod.affinity is not None and not _any_term(pod.affinity, node, ()):
        all_keys = {req.key for term in pod.affinity for req in term.match_expressions}
        other_keys = all_keys - set(type_labels)
        type_fails = not _any_term(pod.affinity, node, other_keys)
        other_fails = not _any_term(pod.affinity, node, type_labels)
        failed = [req for term in pod.affinity for req in _term_failures(term, node, ())]
        for req in dict.fromkeys(failed):  # unique, in order
            line = f"{_requirement(req)}{_has(_value(req, node))}"
            if type_fails and req.key in type_labels:
                gpu_type.append(line)
            elif other_fails or (not type_fails and req.key not in type_labels):
                # a node that only the GPU type excludes fails no other requirement (a
                # requirement of a term for another node, a pin by name, is not its failure)
                other.append(line)
        if not gpu_type and not other:  # no term, or terms that each pass only a part
            other.append("no required node-affinity term matches as a whole")
    if not gpu_type and not other:
        return PASSED
    return _shared_check(tuple(gpu_type), tuple(other))


@functools.lru_cache(maxsize=SHARED)
def _shared_check(gpu_type: tuple[str, ...], other: tuple[str, ...]) -> SelectorCheck:
    """One value per distinct failure: a pod checked against thousands of nodes of another
    GPU type fails each with the same lines, and classification keeps every check until the
    cycle ends (placement.py's NodeCheck)."""
    return SelectorCheck(gpu_type, other)


def _any_term(terms: Iterable[SelectorTerm], node: Node, skip: Collection[str]) -> bool:
    return any(not _term_failures(term, node, skip) for term in terms)


def _value(requirement: Requirement, node: Node) -> str | None:
    if requirement.key == NODE_NAME_FIELD:
        return node.name
    return node.labels.get(requirement.key)


def _requirement(requirement: Requirement) -> str:
    if requirement.operator == "Empty":
        return "an empty node-affinity term (matches no node)"
    if requirement.operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        return f"an invalid requirement on {requirement.key or '(no key)'}"
    return str(requirement)


def _has(value: str | None) -> str:
    return " (node: unset)" if value is None else f" (node: {value})"
