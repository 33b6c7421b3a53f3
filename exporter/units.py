"""Human-friendly sizes and durations ("80GiB", "90s") used by flags and scenario files, and
the bounded integers (ports, counts, codes) the flags take.

A value of the right shape but out of bounds ("-5s", "0" for a port, "99999") is told apart
from one of the wrong shape, so the message names the actual problem ("port 99999 out of range
1–65535") instead of repeating the expected format.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_INTEGER = re.compile(r"-?[0-9]+")
MAX_PORT = 65535


def parse_size(value: str) -> int:
    """`80GiB`, `512 MiB` or a plain number of bytes → bytes."""
    match = re.fullmatch(r"\s*(-?)\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(3).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r} (use bytes or e.g. '80GiB')")
    if match.group(1):
        raise ValueError(f"negative size: {value!r}")
    return int(float(match.group(2)) * _SIZE_UNITS[match.group(3).lower()])


def parse_duration(value: str) -> float:
    """`90`, `90s`, `1.5m`, `2h`, `500ms` → seconds."""
    match = re.fullmatch(r"\s*(-?)\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|)\s*", value)
    if not match:
        raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '90s', '5m')")
    if match.group(1):
        raise ValueError(f"negative duration: {value!r}")
    return float(match.group(2)) * _DURATION_UNITS[match.group(3)]


class OutOfRange(ValueError):
    """A value of the right shape beyond its bounds: the bounds are the message."""


def parse_int(value: str, lowest: int, highest: int, what: str = "") -> int:
    """A whole number from `lowest` to `highest`; a ValueError that says which it broke:
    "not a whole number: 'x'", or "port 0 out of range 1–65535" (`what` names the value)."""
    if not _INTEGER.fullmatch(value):
        raise ValueError(f"not a whole number: {value[:20]!r}")
    digits = value.lstrip("-").lstrip("0") or "0"
    # Compared by length first: int() refuses more than 4,300 digits.
    number = int(value) if len(digits) <= len(str(highest)) else None
    if number is None or not lowest <= number <= highest:
        shown = value if len(value) <= 12 else value[:11] + "…"
        raise OutOfRange(f"{what + ' ' if what else ''}{shown} out of range {lowest}–{highest}")
    return number


def parse_port(value: str) -> int:
    """`19400` → 19400; a ValueError that says why otherwise ("port 99999 out of range").
    Port 0 (any free port) is refused too: Prometheus must know where to scrape."""
    return parse_int(value, 1, MAX_PORT, "port")
