"""A scenario's readings over time: each keyframe holds its values until the next one, or,
with `ramp: true`, the values move linearly from the previous keyframe to it; energy is the
integral of the power curve and each clock-event duration counter grows while its reason is
active, so the counters never go backwards, as a driver's do not.

Apart from the scenario's schema (scenario.py), which it reads through the few attributes a
keyframe has: the schema is what a file may say, this is what it means at time t.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from kube_gpu_exporter.exporter.readings_table import (
    CLOCK_EVENT_DURATIONS,
    CLOCK_EVENTS,
    POWER,
    READINGS,
    Kind,
    ScenarioField,
)

# The values a scenario may set under `readings:`, from the readings table.
FIELDS: dict[str, ScenarioField] = {f.name: f for row in READINGS for f in row.fields}
NUMERIC = [name for name, value in FIELDS.items() if value.kind is not Kind.REASONS]
CLOCK_EVENTS_KEY = CLOCK_EVENTS.fields[0].name
_DEFAULTS: dict[str, Any] = {name: value.default for name, value in FIELDS.items()}
_POWER = POWER.fields[0].name  # energy is the integral of its curve
# clock-event reason → the scenario value of its duration counter
_DURATIONS = {v.label: v.state for v in CLOCK_EVENT_DURATIONS.values}


class Frame(Protocol):
    """A keyframe (of a GPU or of a MIG instance): its time, ramp and readings (None: held)."""

    @property
    def at(self) -> float: ...
    @property
    def ramp(self) -> bool: ...
    @property
    def readings(self) -> Any: ...


def number(name: str, value: Any) -> float:
    """Counts and bytes stay integers (NVML's are), the rest are floats."""
    return float(value) if FIELDS[name].kind is Kind.NUMBER else int(value)


def value_at(key: str, base: Any, frames: Iterable[Frame], t: float) -> Any:
    """A reading at time t: the last keyframe's value, or a ramp towards the next one; `base`
    holds the readings before the first keyframe (None: the table's default)."""
    prev_t, prev_v = 0.0, getattr(base, key)
    if prev_v is None:
        prev_v = _DEFAULTS[key]
    for frame in frames:
        value = getattr(frame.readings, key)
        if value is None:
            continue
        if frame.at <= t:
            prev_t, prev_v = frame.at, value
            continue
        if frame.ramp and key in NUMERIC and frame.at > prev_t:
            share = (t - prev_t) / (frame.at - prev_t)
            return prev_v + (value - prev_v) * share
        break
    return prev_v


def energy_at(joules: float, base: Any, frames: Sequence[Frame], t: float) -> float:
    """Energy from `joules` at 0 as the integral of the power curve up to t."""
    changes = (f.at for f in frames if getattr(f.readings, _POWER) is not None)
    points = [p for p in sorted({0.0, t, *changes}) if p <= t]
    for left, right in itertools.pairwise(points):
        a = value_at(_POWER, base, frames, left)
        b = value_at(_POWER, base, frames, right - 1e-9)
        joules += (a + b) / 2 * (right - left)
    return joules


def throttled_seconds(base: Any, frames: Sequence[Frame], t: float) -> dict[str, float]:
    """Each duration counter's value: its own scenario value plus the time its clock-event
    reason was active up to t, so a throttling timeline drives the counter as a driver would."""
    changes = (f.at for f in frames if getattr(f.readings, CLOCK_EVENTS_KEY) is not None)
    points = [p for p in sorted({0.0, t, *changes}) if p <= t]
    active: dict[str, float] = dict.fromkeys(_DURATIONS, 0.0)
    for left, right in itertools.pairwise(points):
        for reason in value_at(CLOCK_EVENTS_KEY, base, frames, left):
            if reason in active:
                active[reason] += right - left
    return {
        state: value_at(state, base, frames, t) + active[reason]
        for reason, state in _DURATIONS.items()
    }
