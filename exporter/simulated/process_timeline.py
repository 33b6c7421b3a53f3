"""A scenario's compute processes over time, ramped by pid as readings are (timeline.py):
a keyframe's `processes` replace the list, or, with `ramp: true`, each process moves towards
its later values, so a process's memory climbs with its device's. Written against what it
reads of the scenario's models (protocols), which import this module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

P = TypeVar("P", bound="Ramped")


class Ramped(Protocol):
    pid: int
    used_memory_bytes: int
    sm_utilization: float

    def model_copy(self: P, *, update: dict[str, Any]) -> P: ...


class Frame(Protocol[P]):
    at: float
    ramp: bool
    processes: list[P] | None


def processes_at(base: Sequence[P], frames: Sequence[Frame[P]], t: float) -> tuple[P, ...]:
    """The compute processes at time t, keyed as readings are: the last keyframe's list, or,
    when the next keyframe that lists processes ramps, each process in both lists on its way
    to the later values (by pid), so a process's memory climbs with its device's. A process
    only in the earlier list stays until that keyframe; one only in the later list starts at
    it."""
    prev_t, prev = 0.0, base
    for frame in frames:
        if frame.processes is None:
            continue
        if frame.at <= t:
            prev_t, prev = frame.at, frame.processes
            continue
        if frame.ramp and frame.at > prev_t:
            share = (t - prev_t) / (frame.at - prev_t)
            later = {p.pid: p for p in frame.processes}
            return tuple(_between(p, later.get(p.pid), share) for p in prev)
        break
    return tuple(prev)


def _between(process: P, later: P | None, share: float) -> P:
    """`process` moved `share` of the way to `later` (memory in whole bytes, as NVML's)."""
    if later is None:
        return process
    memory = process.used_memory_bytes
    sm = process.sm_utilization
    return process.model_copy(
        update={
            "used_memory_bytes": int(memory + (later.used_memory_bytes - memory) * share),
            "sm_utilization": sm + (later.sm_utilization - sm) * share,
        }
    )
