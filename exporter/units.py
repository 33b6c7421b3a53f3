"""Human-friendly sizes and durations ("80GiB", "90s") used by flags and scenario files, the
bounded integers (ports, counts, codes) the flags take, and listen addresses ("[::1]:9400"),
split as Go's net.SplitHostPort splits them: every command that listens parses them here.

A value of the right shape but out of bounds ("-5s", "0" for a port, "99999") is told apart
from one of the wrong shape, so the message names the actual problem ("port 99999 out of range
1–65535") instead of repeating the expected format.
"""

from __future__ import annotations

import ipaddress
import math
import re
from decimal import Decimal

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


class OutOfRange(ValueError):
    """A value of the right shape beyond its bounds: the bounds are the message."""


def parse_size(value: str) -> int:
    """`80GiB`, `512 MiB` or a plain number of bytes → bytes."""
    match = re.fullmatch(r"\s*(-?)\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(3).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r} (use bytes or e.g. '80GiB')")
    if match.group(1):
        raise ValueError(f"negative size: {value!r}")
    # Decimal, not float: "9" * 400 is a whole number of bytes (too many for its caller's
    # bounds, which say so), not infinity, which int() cannot take.
    return int(Decimal(match.group(2)) * _SIZE_UNITS[match.group(3).lower()])


def parse_duration(value: str) -> float:
    """`90`, `90s`, `1.5m`, `2h`, `500ms` → seconds."""
    match = re.fullmatch(r"\s*(-?)\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|)\s*", value)
    if not match:
        raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '90s', '5m')")
    if match.group(1):
        raise ValueError(f"negative duration: {value!r}")
    seconds = float(match.group(2)) * _DURATION_UNITS[match.group(3)]
    if not math.isfinite(seconds):  # float("9" * 400) is infinity
        raise OutOfRange(f"duration {_shown(value)} out of range")
    return seconds


def parse_int(value: str, lowest: int, highest: int, what: str = "") -> int:
    """A whole number from `lowest` to `highest`; a ValueError that says which it broke:
    "not a whole number: 'x'", or "port 0 out of range 1–65535" (`what` names the value)."""
    if not _INTEGER.fullmatch(value):
        raise ValueError(f"not a whole number: {value[:20]!r}")
    digits = value.lstrip("-").lstrip("0") or "0"
    # Compared by length first: int() refuses more than 4,300 digits.
    number = int(value) if len(digits) <= len(str(highest)) else None
    if number is None or not lowest <= number <= highest:
        shown = _shown(value)
        raise OutOfRange(f"{what + ' ' if what else ''}{shown} out of range {lowest}–{highest}")
    return number


def _shown(value: str) -> str:
    """A long number cut to 12 characters for a message."""
    return value if len(value) <= 12 else value[:11] + "…"


# A DNS name (RFC 1123 labels; `_` too, as some resolvers allow): letters, digits, `-`, `_`.
_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)"
    r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)


class NotAnAddress(ValueError):
    """A listen address of the wrong shape; the message says what is wrong with it."""


def parse_host(host: str) -> str:
    """An IPv4 or IPv6 address (no brackets) or a host name; "" means every address."""
    if host == "":
        return host
    try:
        ipaddress.ip_address(host)  # IPv6 with a zone (fe80::1%eth0) too
        return host
    except ValueError:
        pass
    if ":" in host:
        raise NotAnAddress(f"not an IPv6 address: {host[:64]!r}")
    if re.fullmatch(r"[0-9.]+", host) or not _HOST_NAME.fullmatch(host):
        raise NotAnAddress(f"not an IP address or host name: {host[:64]!r}")
    return host


def parse_listen_address(value: str) -> tuple[str, int]:
    """`host:port`, `:port` or `[ipv6]:port` → (host, port), split as Go's net.SplitHostPort
    splits them (an IPv6 address must be in brackets, brackets must pair); the host is then
    checked (parse_host) and the port is 1–65535 (parse_port). NotAnAddress for a wrong shape,
    OutOfRange for a port beyond its bounds."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise NotAnAddress("missing ']' after the IPv6 address")
        host, rest = value[1:end], value[end + 1 :]
        if not rest.startswith(":"):
            raise NotAnAddress("(use host:port, an IPv6 address as [::1]:port)")
        if "[" in host or "]" in rest:
            raise NotAnAddress("unbalanced brackets")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise NotAnAddress(f"not an IPv6 address in brackets: {host[:64]!r}") from None
        port_text = rest[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise NotAnAddress("(use host:port)")
        if "[" in host or "]" in host:
            raise NotAnAddress("unbalanced brackets")
        if ":" in host:
            raise NotAnAddress("too many colons: write an IPv6 address in brackets, [::1]:port")
        parse_host(host)
    try:
        port = parse_port(port_text)
    except OutOfRange:
        raise
    except ValueError:
        raise NotAnAddress("(use host:port)") from None
    return host, port


def parse_port(value: str) -> int:
    """`19400` → 19400; a ValueError that says why otherwise ("port 99999 out of range").
    Port 0 (any free port) is refused too: Prometheus must know where to scrape."""
    return parse_int(value, 1, MAX_PORT, "port")
