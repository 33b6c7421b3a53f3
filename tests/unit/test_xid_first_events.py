"""Xid counters without zeros served in advance: what `serve` serves by default, the Xid
watch's start that lets the alerts tell a first event from an old one, and the dashboards and
the report counting first events as the alerts do (rules/xid_query.py). The alerts' own cases
(a counter appearing at 1 fires, a restart alone does not) are promtool's, generated from
rules/alerts/xid_events.py."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.report.period import parse_since
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.grafana.dashboards import build_all
from kube_gpu_exporter.rules.config import Config
from support import samples, values

NODE = """
driver_version: "550.54.15"
devices:
  - uuid: GPU-aaaaaaaa-0000-4000-8000-000000000000
    timeline: [{at: 0, xid: [13, 79, 79]}]
  - uuid: GPU-bbbbbbbb-0000-4000-8000-000000000000
"""
STARTED = 1_790_000_000.0


def served(*flags: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The body `serve --simulate` renders with `flags`, started at STARTED."""
    args = build_parser().parse_args(["serve", "--simulate", "scenario.yaml", *flags])
    sampler = SimulatedSampler(
        Scenario.parse(NODE),
        clock=lambda: 0.0,
        xid_codes=args.xid_codes,
        wall_clock=lambda: STARTED,
    )
    return samples(CollectionLoop(sampler, 10).cycle().body("", False)[0])


def test_by_default_a_counter_exists_only_from_its_first_event() -> None:
    """16 codes at 0 on every GPU were 128 of an 8-GPU node's 849 series."""
    body = served()
    xids = {labels for name, labels in body if name == c.XID_ERRORS.name}
    assert {(dict(x)["gpu"], dict(x)["xid"]) for x in xids} == {("0", "13"), ("0", "79")}
    assert values(body, c.XID_ERRORS.name, gpu="0", xid="79") == [2]


def test_the_flag_still_serves_the_codes_it_names_at_zero() -> None:
    body = served("--collector.xid-codes=48,79")
    assert values(body, c.XID_ERRORS.name, gpu="1", xid="48") == [0]
    assert values(body, c.XID_ERRORS.name, gpu="1", xid="79") == [0]
    assert values(body, c.XID_ERRORS.name, gpu="0", xid="79") == [2]
    assert values(body, c.XID_ERRORS.name, gpu="1", xid="13") == []


def test_the_xid_watch_start_is_served() -> None:
    """What the alerts compare with time(): when the counts began."""
    assert values(served(), c.XID_WATCH_START.name) == [STARTED]


def test_every_dashboard_xid_query_counts_first_events() -> None:
    """A counter born at 1 has no increase(): each Xid panel reads the watch's start too."""
    exprs = [
        target.expr
        for dashboard in build_all(Config())
        for panel in dashboard.panels()
        for target in panel.targets
        if c.XID_ERRORS.name in target.expr
    ]
    assert len(exprs) >= 3  # the cluster, node and workload dashboards' Xid panels
    for expr in exprs:
        assert f"{c.XID_WATCH_START.name}{{" in expr, expr
        assert "< $__rate_interval_ms / 1000" in expr and "offset $__rate_interval" in expr


def test_the_report_fills_the_rate_interval_in_milliseconds_too() -> None:
    """The Xid query's `time() - start < $__rate_interval_ms / 1000`: the shorter variable
    is a prefix of the longer, and filling it first gave `604800s_ms`."""
    period = parse_since("7d", now=0)
    expr = "x[$__rate_interval] offset $__rate_interval and time() - s < $__rate_interval_ms / 1000"
    assert period.over_period(expr) == (
        "x[604800s] offset 604800s and time() - s < 604800000 / 1000"
    )
    assert period.charted("y < $__rate_interval_ms") == "y < 3615000"
