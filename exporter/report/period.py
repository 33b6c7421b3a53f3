"""The period a report covers: its end, its length, the step of its charts and the resolution
its GPU-hours are integrated at, and the PromQL that turns a series into GPU-hours.

Why GPU-hours are a subquery mean and not `sum_over_time(x[7d]) * interval / 3600`: the
recorded series are written every rule evaluation interval, which the report cannot know, and
an `avg_over_time(x[7d])` averages only the samples that exist, so a namespace that held GPUs
for one day of seven would read as holding them all week. Sampling the series on a fixed grid
(`x[7d:5m]`) reads a missing series as missing points; summing the grid and dividing by the
grid's own point count (`count_over_time(vector(1)[7d:5m])`) gives the mean over the whole
period with absent time counted as 0, whether the subquery's range is closed (Prometheus 2) or
left-open (Prometheus 3) — the same construction as the hourly idle-hours recording rule.
Times the period's hours, that is GPU-hours.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from kube_gpu_exporter.exporter.input_errors import InputError, quoted
from kube_gpu_exporter.rules.settings.values import Duration, duration_seconds

POINTS = 300  # about this many points per chart line
# Chart steps people read: a step is the first of these at least period / POINTS long.
NICE_STEPS = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MIN_RESOLUTION, MAX_RESOLUTION = 60, 300  # GPU-hours grid: within the 5m lookback
MIN_PERIOD = 120  # two GPU-hours grid points at the finest resolution
MAX_PERIOD = 400 * 86400  # longer than Prometheus keeps data almost anywhere
RATE_INTERVAL = "$__rate_interval"  # Grafana's variable in the dashboards' rate queries
RATE_INTERVAL_MS = "$__rate_interval_ms"  # the same in milliseconds (the Xid queries' time())

_DURATION = TypeAdapter(Duration)


@dataclass(frozen=True)
class Period:
    """`seconds` up to `end` (Unix time); charts every `step`, GPU-hours every `resolution`."""

    since: str  # as given: "7d"
    seconds: int
    end: float

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def step(self) -> int:
        wanted = self.seconds / POINTS
        return next((s for s in NICE_STEPS if s >= wanted), NICE_STEPS[-1])

    @property
    def resolution(self) -> int:
        return max(MIN_RESOLUTION, min(self.step, MAX_RESOLUTION))

    @property
    def range(self) -> str:
        """The period as a PromQL range: `604800s`."""
        return f"{self.seconds}s"

    def grid(self, expr: str) -> str:
        """`expr` sampled over the period at the GPU-hours resolution: a subquery."""
        return f"({expr})[{self.range}:{self.resolution}s]"

    def mean(self, expr: str) -> str:
        """The mean of `expr` over the whole period, absent points counted as 0."""
        points = f"scalar(count_over_time(vector(1)[{self.range}:{self.resolution}s]))"
        return f"sum_over_time({self.grid(expr)}) / {points}"

    def gpu_hours(self, expr: str) -> str:
        """GPU-hours of a GPU-count series over the period (see the module docstring)."""
        return f"{self.mean(expr)} * {self.hours:g}"

    def over_period(self, expr: str) -> str:
        """A dashboard query's `rate(x[$__rate_interval])` as one window over the whole
        period, as Grafana fills the variable for an instant query over the time range: a
        rate becomes the period's average, an increase its total."""
        return fill_rate_interval(expr, self.seconds)

    def charted(self, expr: str) -> str:
        """A dashboard query with `$__rate_interval` filled as Grafana would for the chart's
        step: at least four 15-second scrapes, at least one step plus a scrape."""
        return fill_rate_interval(expr, max(60, self.step + 15))


def fill_rate_interval(expr: str, seconds: int) -> str:
    """`$__rate_interval` as `<seconds>s` and `$__rate_interval_ms` as milliseconds (the
    longer name first: the shorter is its prefix)."""
    return expr.replace(RATE_INTERVAL_MS, str(seconds * 1000)).replace(RATE_INTERVAL, f"{seconds}s")


def parse_since(value: str, now: float | None = None) -> Period:
    """`--since 7d` (a Prometheus duration) → the period ending now; one line if it is not."""
    try:
        _DURATION.validate_python(value)
    except ValidationError:
        raise InputError(
            f"--since {quoted(value)}: not a duration; use a Prometheus duration such as "
            "7d, 24h or 1w"
        ) from None
    seconds = math.ceil(duration_seconds(value))
    if seconds < MIN_PERIOD:
        raise InputError(f"--since {value}: shorter than 2m; a report needs a longer period")
    if seconds > MAX_PERIOD:
        raise InputError(f"--since {value}: longer than 400d")
    return Period(value, seconds, time.time() if now is None else now)
