"""A flag value of the right shape but out of bounds is told so: the one line names the bound
it broke (a port out of 1–65535, a negative or zero duration, a count below its least), not
the format it already has. Every command that takes such flags is tried; a wrong shape still
gets the format. The CLI runs in-process (inprocess_cli.py): parsing is what is tested.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from inprocess_cli import assert_one_line, offline_cli, run_cli

# What a message about the shape says; none of it belongs in a message about a bound.
SHAPE_WORDS = ("use host:port", "not a duration", "not a whole number", "not a comma-separated")

OUT_OF_RANGE = [
    # serve
    (["serve", "--web.listen-address=:99999"], "port 99999 out of range 1–65535"),
    (["serve", "--web.listen-address=:0"], "port 0 out of range 1–65535"),
    (["serve", "--web.listen-address=:-1"], "port -1 out of range 1–65535"),
    (["serve", "--web.listen-address=[::1]:65536"], "port 65536 out of range 1–65535"),
    (["serve", "--web.listen-address=127.0.0.1:" + "9" * 5000], "out of range 1–65535"),
    (["serve", "--web.max-requests=-1"], "-1 out of range 0–1000000"),
    (["serve", "--web.max-connections=0"], "0 out of range 1–1000000"),
    (["serve", "--web.max-connections=" + "9" * 5000], "out of range 1–1000000"),
    (["serve", "--web.idle-timeout=-5s"], "negative duration: '-5s'"),
    (["serve", "--web.write-timeout=0"], "must be positive: '0'"),
    (["serve", "--web.read-header-timeout=25h"], "must be at most 24h"),
    (["serve", "--collector.interval=0s"], "must be positive: '0s'"),
    (["serve", "--collector.interval=-1m"], "negative duration: '-1m'"),
    (["serve", "--collector.interval=50ms"], "must be at least 100ms"),
    (["serve", "--collector.stall-timeout=-30s"], "negative duration"),
    (["serve", "--kubelet.interval=0"], "must be positive"),
    (["serve", "--kubelet.timeout=-0.5s"], "negative duration"),
    (["serve", "--collector.xid-codes=0"], "Xid code 0 out of range 1–9999"),
    (["serve", "--collector.xid-codes=48,-79"], "Xid code -79 out of range 1–9999"),
    # cluster
    (["cluster", "--web.listen-address=:70000"], "port 70000 out of range 1–65535"),
    (["cluster", "--web.listen-address=[::]:0"], "port 0 out of range 1–65535"),
    (["cluster", "--cluster.interval=-15s"], "negative duration: '-15s'"),
    (["cluster", "--cluster.interval=0"], "must be positive"),
    (["cluster", "--web.max-connections=-3"], "-3 out of range 1–1000000"),
    # demo: its ports
    (["demo", "--port.prometheus=0"], "port 0 out of range 1–65535"),
    (["demo", "--port.exporter=-1"], "port -1 out of range 1–65535"),
    (["demo", "--port.alerts=70000"], "port 70000 out of range 1–65535"),
    (["demo", "--port.cluster=" + "1" * 400], "out of range 1–65535"),
]

WRONG_SHAPE = [
    (["serve", "--web.listen-address=:http"], "(use host:port)"),
    (["serve", "--web.listen-address=19400"], "(use host:port)"),
    (["cluster", "--web.listen-address=:1e3"], "(use host:port)"),
    (["serve", "--collector.interval=often"], "not a duration"),
    (["serve", "--web.max-requests=many"], "not a whole number"),
    (["serve", "--collector.xid-codes=48;79"], "not a comma-separated list of Xid codes"),
    (["demo", "--port.alertmanager=http"], "not a whole number"),
]


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli():
        yield


@pytest.mark.parametrize(("argv", "expected"), OUT_OF_RANGE, ids=lambda v: str(v)[:40])
def test_out_of_range_values_name_the_bound(argv: list[str], expected: str) -> None:
    line = assert_one_line(*run_cli(argv), expected)
    flag = argv[1].split("=")[0]
    assert flag in line, line
    assert not any(word in line for word in SHAPE_WORDS), line


@pytest.mark.parametrize(("argv", "expected"), WRONG_SHAPE, ids=lambda v: str(v)[:40])
def test_wrong_shapes_still_get_the_format(argv: list[str], expected: str) -> None:
    assert_one_line(*run_cli(argv), expected)
