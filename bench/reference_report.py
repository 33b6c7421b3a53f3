"""Ours against the reference server in the wrk tables: ratios and the target verdict.

The reference (bench/reference.py) serves the bytes ours served, in the same run, to the same
wrk load. Ours ÷ the reference is what our server adds to what the machine costs; a target the
reference misses as well is out of reach on this machine with either server, and the verdict
says so in words rather than leaving a bare "missed" to be read as ours alone.
"""

from __future__ import annotations

from wrk import WrkResult

LABEL = "Go net/http, the same bytes"


def ratio(ours: float, reference: float) -> str:
    return f"{ours / reference:.2f}×" if reference else "—"


def ratios(ours: WrkResult, reference: WrkResult) -> tuple[str, str, str]:
    """p50, p99 and req/s, ours ÷ the reference (latency: above 1 is slower; req/s: below 1)."""
    return (
        ratio(ours.p50_ms, reference.p50_ms),
        ratio(ours.p99_ms, reference.p99_ms),
        ratio(ours.requests_per_second, reference.requests_per_second),
    )


def verdict(encoding: str, ours: WrkResult, reference: WrkResult, target_ms: float) -> str:
    """One encoding's p99 against the target and against the reference, in words."""
    figures = f"ours {ours.p99_ms:.2f} ms, the reference {reference.p99_ms:.2f} ms"
    times = ratio(ours.p99_ms, reference.p99_ms)
    if ours.p99_ms < target_ms and reference.p99_ms < target_ms:
        return f"{encoding} met by both ({figures})"
    if ours.p99_ms < target_ms:
        return f"{encoding} met by ours and missed by the reference ({figures})"
    if reference.p99_ms < target_ms:
        return f"{encoding} **missed** by ours alone ({figures}; ours {times} its p99)"
    return (
        f"{encoding} **missed** by ours and by the reference too ({figures}): this machine "
        f"misses it with Go's net/http as well; ours is {times} the reference's p99"
    )


def target_line(target_ms: float, pairs: list[tuple[str, WrkResult, WrkResult]]) -> str:
    """`p99 < N ms`: each (encoding, ours, reference) judged against target and reference."""
    judged = "; ".join(verdict(name, ours, ref, target_ms) for name, ours, ref in pairs)
    return f"Target p99 < {target_ms:g} ms, ours beside the reference: {judged}."
