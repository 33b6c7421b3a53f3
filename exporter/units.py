"""Human-friendly sizes and durations ("80GiB", "90s") used by flags and scenario files."""

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


def parse_size(value: str) -> int:
    """`80GiB`, `512 MiB` or a plain number of bytes → bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r} (use bytes or e.g. '80GiB')")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_duration(value: str) -> float:
    """`90`, `90s`, `1.5m`, `2h`, `500ms` → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|)\s*", value)
    if not match:
        raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '90s', '5m')")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
