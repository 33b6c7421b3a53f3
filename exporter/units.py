"""Human-friendly sizes and durations ("80GiB", "90s") used by flags and scenario files, and
the TCP port numbers the flags take."""

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


def parse_port(value: str) -> int:
    """`19400` → 19400; a ValueError that says why otherwise ("port 99999 out of range")."""
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"not a port number: {value[:20]!r}")
    if len(value) > 5 or int(value) > 65535:
        shown = value if len(value) <= 12 else value[:11] + "…"
        raise ValueError(f"port {shown} out of range 0–65535")
    return int(value)
