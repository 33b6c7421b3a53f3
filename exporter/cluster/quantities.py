"""Kubernetes resource quantities ("15900m", "64Gi", "1e3", 8) as the scheduler counts them.

The scheduler compares CPU in millicores and every other resource in whole units rounded up
(`Quantity.MilliValue()` / `Value()`), so quantities are kept as ints in those units: exact
sums with no float drift, and a GPU count is just an int. A quantity that does not parse is
`None` to the caller, who counts it as absent: a malformed object must never raise, and an
unreadable request is better left out than guessed.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any, Final

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
MILLI_RESOURCES: Final = frozenset({CPU})
MAX_VALUE: Final = 2**63 - 1  # Kubernetes' own bound (int64); a bigger value is capped
MAX_TEXT: Final = 64  # characters: a real quantity is short; a long one is garbage

_QUANTITY: Final = re.compile(
    r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?"
)
_FACTORS: Final = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(1 << 10), "Mi": Decimal(1 << 20), "Gi": Decimal(1 << 30),
    "Ti": Decimal(1 << 40), "Pi": Decimal(1 << 50), "Ei": Decimal(1 << 60),
}  # fmt: skip

Resources = Mapping[str, int]
EMPTY: Final[Resources] = MappingProxyType({})


def parse_quantity(value: Any, resource: str = "") -> int | None:
    """`value` (a string, or a number as YAML gives it) in `resource`'s scheduler units:
    millicores for cpu, whole units rounded up otherwise. Negative values count as 0; None
    when it is not a quantity at all."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        return None
    return _parse_text(value, resource in MILLI_RESOURCES)


@functools.lru_cache(maxsize=8192)
def _parse_text(value: str, milli: bool) -> int | None:
    """Cached: a cluster's fifty thousand pods request the same few dozen quantities."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number) * (Decimal(10) ** int(exponent) if exponent else _FACTORS[suffix])
    except (InvalidOperation, ArithmeticError):
        return None
    if milli:
        amount *= 1000
    if amount <= 0:
        return 0
    if amount >= MAX_VALUE:
        return MAX_VALUE
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def parse_resources(value: Any) -> dict[str, int]:
    """A resource list (`{"cpu": "2", "nvidia.com/gpu": 1}`) → name → units; entries that are
    not quantities are left out. Names are interned: the same few repeat over every pod."""
    if not isinstance(value, (dict, Mapping)):  # dict first: the ABC check is slow
        return {}
    parsed: dict[str, int] = {}
    for name, raw in value.items():
        if isinstance(name, str) and name:
            amount = parse_quantity(raw, name)
            if amount is not None:
                parsed[sys.intern(name)] = amount
    return parsed


def add(total: dict[str, int], more: Resources) -> dict[str, int]:
    """`total` += `more`, per resource (in place; returned for chaining)."""
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount
    return total


def maximum(first: Resources, second: Resources) -> dict[str, int]:
    """The per-resource maximum of two resource lists."""
    merged = dict(first)
    for name, amount in second.items():
        merged[name] = max(merged.get(name, 0), amount)
    return merged


def total(lists: Iterable[Resources]) -> dict[str, int]:
    summed: dict[str, int] = {}
    for item in lists:
        add(summed, item)
    return summed


def frozen(resources: Mapping[str, int], keep_zero: bool = False) -> Resources:
    """A read-only view, without the zero entries unless `keep_zero`: a request of 0 asks
    for nothing, but an allocatable or a quota of 0 is a fact (a device plugin that stopped
    advertising, a namespace allowed no GPU)."""
    kept = {k: v for k, v in resources.items() if keep_zero or v > 0}
    return MappingProxyType(kept) if kept else EMPTY


def show(resource: str, amount: int) -> str:
    """An amount as a person reads it: cpu in cores or millicores, memory in binary units."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY or resource.startswith(("hugepages-", "ephemeral-storage")):
        for suffix, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix}"
            if amount >= factor * 10:
                return f"{amount / factor:.1f}{suffix}"
    return str(amount)
