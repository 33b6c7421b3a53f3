"""Defensive readers of the API's JSON: every field may be missing or of the wrong type.

An object from the API server is well-formed, but a manifest given to `explain -f` is
whatever a person wrote, and a watch must survive one odd object among fifty thousand. Each
reader returns a safe empty value for what it cannot read instead of raising.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.objects import (
    NO_LABELS,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
MAX_ITEMS: Final = 1000  # entries read of one list (taints, tolerations, terms, containers)


def is_mapping(value: Any) -> bool:
    """isinstance(value, Mapping), with JSON's dict checked first: the ABC check is slow, and
    a watch asks it a few dozen times per pod."""
    return isinstance(value, (dict, Mapping))


def mapping(value: Any) -> Mapping[str, Any]:
    return value if is_mapping(value) else _EMPTY


def entries(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list (others skipped), at most MAX_ITEMS of them."""
    if not isinstance(value, list):
        return []
    return [item for item in value[:MAX_ITEMS] if is_mapping(item)]


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def interned(value: Any) -> str:
    """A string that repeats across objects (phases, label keys, reasons), stored once."""
    return sys.intern(value) if isinstance(value, str) else ""


def timestamp(value: Any) -> float | None:
    """An RFC 3339 time ("2024-05-01T10:00:00Z") → Unix seconds; None if it is not one."""
    if not isinstance(value, str) or not 10 <= len(value) <= 40:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def string_map(value: Any) -> Mapping[str, str]:
    """Labels or a node selector: string keys to string values, anything else left out."""
    if not is_mapping(value) or not value:
        return NO_LABELS
    return MappingProxyType(
        {sys.intern(k): v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    )


def condition(conditions: Any, kind: str) -> Mapping[str, Any]:
    """The condition of type `kind` in a status's `conditions`, or an empty mapping."""
    return next((c for c in entries(conditions) if c.get("type") == kind), _EMPTY)


def taints(value: Any) -> tuple[Taint, ...]:
    return tuple(
        Taint(interned(t["key"]), text(t.get("value")), interned(t.get("effect")))
        for t in entries(value)
        if isinstance(t.get("key"), str)
    )


def tolerations(value: Any) -> tuple[Toleration, ...]:
    """The tolerations, one tuple shared by every pod that has the same ones."""
    return _shared_tolerations(
        tuple(
            (
                interned(t.get("key")),
                interned(t.get("operator")) or "Equal",
                text(t.get("value")),
                interned(t.get("effect")),
            )
            for t in entries(value)
        )
    )


SHARED: Final = 4096  # distinct toleration sets or request sizes kept for sharing


@functools.lru_cache(maxsize=SHARED)
def _shared_tolerations(each: tuple[tuple[str, str, str, str], ...]) -> tuple[Toleration, ...]:
    """A cluster's pods repeat a few toleration sets (their workloads' templates); the frozen
    values are shared rather than held once per pod: 3 tolerations were ~300 bytes a pod."""
    return tuple(Toleration(*values) for values in each)


def selector_terms(value: Any) -> tuple[SelectorTerm, ...]:
    """Required node-affinity terms. A term the API would refuse still becomes a term: an
    unreadable requirement matches no node, so a broken affinity never widens placement."""
    return tuple(
        SelectorTerm(
            match_expressions=_requirements(term.get("matchExpressions")),
            match_fields=_requirements(term.get("matchFields")),
        )
        for term in entries(value)
    )


INVALID: Final = Requirement("", "Invalid")  # matches no node (filters.requirement_matches)
# The operators the API accepts and how many values each takes: (fewest, most).
_VALUES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {"In": (1, MAX_ITEMS), "NotIn": (1, MAX_ITEMS), "Exists": (0, 0), "DoesNotExist": (0, 0),
     "Gt": (1, 1), "Lt": (1, 1)}
)  # fmt: skip


def _requirements(value: Any) -> tuple[Requirement, ...]:
    if value is not None and not isinstance(value, list):
        return (INVALID,)
    return tuple(_requirement(item) for item in (value or [])[:MAX_ITEMS])


def _requirement(item: Any) -> Requirement:
    """One requirement as the API would accept it: a key, a known operator and as many string
    values as it takes. Anything else is INVALID rather than read in part: a NotIn without its
    unreadable value, or a DoesNotExist on a key that is not a string, would match more nodes
    than the pod's author meant."""
    if not isinstance(item, Mapping):
        return INVALID
    key, operator, values = item.get("key"), item.get("operator"), item.get("values")
    values = [] if values is None else values
    if not (isinstance(key, str) and key and isinstance(operator, str) and operator in _VALUES):
        return INVALID
    fewest, most = _VALUES[operator]
    if not isinstance(values, list) or not fewest <= len(values) <= most:
        return INVALID
    if not all(isinstance(v, str) for v in values):
        return INVALID
    return Requirement(interned(key), interned(operator), tuple(values))


# A value no label has (`<` is not allowed in label values): what an unreadable entry of a
# pod's nodeSelector asks for, so that it matches no node.
UNREADABLE: Final = "<unreadable>"


def node_selector(value: Any) -> Mapping[str, str]:
    """A pod's nodeSelector. Absent or empty, it selects every node; one the API would refuse
    (not a mapping, a key or value not a string) keeps every entry, the unreadable ones asking
    for UNREADABLE, so that a broken selector never widens placement."""
    if value is None:
        return NO_LABELS
    if not is_mapping(value):
        return MappingProxyType({"nodeSelector": UNREADABLE})
    if not value:
        return NO_LABELS
    return MappingProxyType(
        {
            sys.intern(k) if isinstance(k, str) else f"nodeSelector[{k!r}]"[:80]: (
                v if isinstance(v, str) else UNREADABLE
            )
            for k, v in list(value.items())[:MAX_ITEMS]
        }
    )
