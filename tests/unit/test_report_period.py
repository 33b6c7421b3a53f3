"""The report's period: `--since` parsing, chart steps, and the PromQL that makes GPU-hours."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.report.period import parse_since


@pytest.mark.parametrize(
    ("since", "seconds", "step", "resolution"),
    [
        ("7d", 604800, 3600, 300),  # 168 points: the first readable step over 2016 s
        ("1w", 604800, 3600, 300),
        ("24h", 86400, 300, 300),
        ("6h", 21600, 120, 120),
        ("1h30m", 5400, 30, 60),
    ],
)
def test_steps_follow_the_period(since: str, seconds: int, step: int, resolution: int) -> None:
    period = parse_since(since, now=1_000_000_000)
    assert (period.seconds, period.step, period.resolution) == (seconds, step, resolution)
    assert period.start == 1_000_000_000 - seconds
    assert period.seconds / period.step <= 300


@pytest.mark.parametrize(
    ("since", "says"),
    [
        ("7", "not a duration"),
        ("seven days", "not a duration"),
        ("-1d", "not a duration"),
        ("0", "shorter than 2m"),
        ("0d", "shorter than 2m"),
        ("90s", "shorter than 2m"),
        ("2y", "longer than 400d"),
    ],
)
def test_bad_since_is_one_line(since: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as caught:
        parse_since(since)
    assert "\n" not in str(caught.value)


def test_gpu_hours_count_absent_time_as_zero() -> None:
    """The mean over a fixed grid divided by the grid's own point count, times the hours."""
    expr = parse_since("6h", now=0).gpu_hours("x")
    assert expr == (
        "sum_over_time((x)[21600s:120s]) / scalar(count_over_time(vector(1)[21600s:120s])) * 6"
    )


def test_rate_interval_is_filled_like_grafana_fills_it() -> None:
    period = parse_since("7d", now=0)
    assert period.over_period("increase(x[$__rate_interval])") == "increase(x[604800s])"
    assert period.charted("rate(x[$__rate_interval])") == "rate(x[3615s])"
