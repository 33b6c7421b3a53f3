"""What the Xid alerts share: one alert per action of NVIDIA's Xid catalog —
GPUXidApplicationErrors (restart the application, workloads group), GPUXidErrors (reset the
GPU), GPUXidRebootRequired, GPUXidWorkflow and GPUXidInvestigate (devices group) — watch the
same counter for different code lists, so their settings, expression, promtool case and runbook
table are written once here. Their default lists come from the catalog's table
(exporter/catalog/xid_catalog.csv); rules/xid_actions.py warns where a thresholds file's lists
contradict it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import XID_MEANINGS
from kube_gpu_exporter.rules import xid_query
from kube_gpu_exporter.rules.alert_text import AlertText, device, label
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    edges,
    later,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Xid, duration_seconds
from kube_gpu_exporter.rules.settings.view import ConfigView

XID_NEW_SERIES = (
    "The exporter serves a code's counter from its first event, at 1, with no zeros in advance; "
    "the rule also counts a counter born within the window, and every count of an exporter "
    "that began counting within it "
    "(`kube_gpu_exporter_xid_watch_start_timestamp_seconds`: its start, or NVML's "
    "re-initialisation). An exporter restart alone fires nothing, a first Xid after a restart "
    "or a reboot fires, and a gap in the data or a Prometheus starting with empty storage does "
    "not make old events look new."
)


XidList = Annotated[tuple[Xid, ...], Field(min_length=1)]


class XidAlert(AlertSettings):
    for_: Duration = Field(default="0m", alias="for")
    window: Duration = "10m"
    xids: XidList


def codes(xids: tuple[int, ...]) -> str:
    """`13, 31, 43` as alert and runbook text."""
    return ", ".join(map(str, xids))


def xid_events(q: Query, a: XidAlert) -> str:
    """Per device and code, the watched Xids that came within the window (rules/xid_query.py:
    a rise, a counter born in the window, or any count of an exporter that began counting in
    it)."""
    codes_matcher = f'xid=~"{"|".join(str(x) for x in a.xids)}"'
    seconds = f"{duration_seconds(a.window):.15g}"  # 600, 5400, 1209600: never 1.2e+06
    events = xid_query.xid_events(q, a.window, seconds, codes_matcher)
    return agg("max", (*q.device_display, "xid"), f"\n{events}\n")


def rule(kind: str, advice: str) -> Callable[[XidAlert, Query], AlertText]:
    """The rule of the Xid alert for `kind` Xids: the events, and a description that says
    which Xid, on which device, against which list, then `advice`."""

    def build(a: XidAlert, q: Query) -> AlertText:
        return AlertText(
            xid_events(q, a),
            f"{device(q)} reported Xid {label('xid')} in the last {a.window} ({kind} "
            f"Xids: {codes(a.xids)}). {advice}",
        )

    return build


def counters(q: Query) -> str:
    """The runbook's query: the device's Xid counters (events per code since the exporter
    began counting, `kube_gpu_exporter_xid_watch_start_timestamp_seconds`)."""
    return q.sel(c.XID_ERRORS, 'uuid="<uuid>"')


def table(xids: tuple[int, ...]) -> str:
    """The runbook's table of what each watched code means."""
    rows = [f"| {x} | {XID_MEANINGS.get(x, 'see NVIDIA’s Xid catalog')} |" for x in xids]
    return "| Xid | meaning |\n|---|---|\n" + "\n".join(rows)


def other_xid(cfg: ConfigView, own: XidAlert) -> int:
    """An Xid not in `own`'s list, for a series that must not fire: the first one another Xid
    alert watches (so each list is tested against the others), else 999."""
    alerts = cfg.alerts
    settings = (getattr(alerts, name) for name in type(alerts).model_fields)
    others = (x for a in settings if isinstance(a, XidAlert) and a is not own for x in a.xids)
    return next(x for x in (*others, 999) if x not in own.xids)


def xid_case(a: XidAlert, w: World) -> Case:
    """No zeros served: a counter appears at its first event, at 1. Node a has counted since
    long ago; b restarts (continuous scrapes), c reboots (no data, then a restarted exporter),
    d is out of sight for longer than the window (no data, same exporter), e began counting
    exactly a window before the last check.

    Must fire: an old counter rising again every minute (a0), the first event of a counter
    that appears with value 1 (a1), a new Xid right after a restart (b1: a reset, and counting
    began within the window) and after a reboot Prometheus saw nothing of (c1: only the
    watch's start says it is new). Must not: an old event (a2), another list's code (a3), a
    counter served at 0 (`--collector.xid-codes`) on a GPU discovered late (a6) or after a
    restart (b4), a restart or reboot without a new Xid (b0, c0), an old count seen again
    after a gap longer than the window (d0, which `x unless x offset w` alone fired for), and
    a first event on an exporter that began counting exactly a window ago (e0: `time() -
    start < window` is strict)."""
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10  # every node has counted for longer than the window by then
    first = start + 1  # the minute every counter that must fire first rises
    last = first + held  # the check on the far edge of `for`, counted from `first`
    end = first + max(held, span) + 10  # samples up to this minute
    x = {"xid": str(a.xids[0])}
    other = {"xid": str(other_xid(w.q.config, a))}
    single = held + 1 < span  # a single event stays in the window long enough to outlast `for`

    def rest(minute: int, value: float) -> str:
        """`value` from `minute` to the end."""
        return steady(value, end - minute)

    def dev(node: str, gpu: int, values: str, **labels: str) -> Series:
        return s(c.XID_ERRORS, w.dev(node, gpu, **(labels or x)), values)

    restart = first - 1  # node b's restart and node c's exporter start
    series = [
        s(c.XID_WATCH_START, w.node("a"), rest(0, 0)),
        dev("a", 0, f"1+0x{first - 1} 2+1x{end - first}"),
        dev("a", 2, rest(0, 1)),
        dev("a", 3, later(first, f"1+1x{end - first}"), **other),
        s(c.XID_WATCH_START, w.node("b"), f"0+0x{restart - 1} {rest(restart, restart * 60)}"),
        dev("b", 0, f"3+0x{restart - 1} stale"),
        dev("b", 4, f"3+0x{restart - 1} {rest(restart, 0)}"),
        s(c.XID_WATCH_START, w.node("c"), f"0+0x1 _x{first - 2} {rest(first, restart * 60)}"),
        dev("c", 0, "1+0x1"),
        s(c.XID_WATCH_START, w.node("d"), f"0+0x1 _x{first - 3} {rest(first - 1, 0)}"),
        dev("d", 0, f"2+0x1 _x{first - 3} {rest(first - 1, 2)}"),
    ]
    rising = Firing(w.dev_out("a", 0, **x), 0)
    firing = [rising]
    ends: tuple[Check, ...] = ()
    if single:
        begun = last - held  # node e's first scrape: its counter holds for `for` at `last`
        began = last * 60 - duration_seconds(a.window)  # node e's start: a window before `last`
        series += [
            dev("a", 1, later(first, rest(first, 1))),
            dev("a", 4, f"1+0x{first - 1} {rest(first, 2)}"),
            dev("a", 6, later(first, rest(first, 0))),
            dev("b", 1, f"2+0x{restart - 1} stale {rest(first, 1)}"),
            dev("c", 1, later(first, rest(first, 1))),
            s(c.XID_WATCH_START, w.node("e"), later(begun, rest(begun, began))),
            dev("e", 0, later(begun, rest(begun, 1))),
        ]
        fresh = [
            Firing(w.dev_out(node, gpu, **x), 0) for node, gpu in (("a", 1), ("a", 4), ("b", 1))
        ]
        firing += [*fresh, Firing(w.dev_out("c", 1, **x), 0)]
        # The window's far edge: the events at `first` fire to its last minute and not one
        # more, on both Prometheus generations (c1's exporter began counting a minute early).
        ends = (Check(first + span - 1, (rising, *fresh)), Check(first + span, (rising,)))
    # Nothing before any event; then both edges of `for`, counted from `first`.
    return Case(tuple(series), (Check(start - 1, ()), *edges(a.for_, tuple(firing), first), *ends))
