"""What the two Xid alerts share: GPUXidErrors (hardware, devices group) and
GPUXidApplicationErrors (the program's fault, workloads group) watch the same counter for
different code lists, so their settings, expression, promtool case and runbook table are
written once here. Their default lists come from the catalog's Xid table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import XID_MEANINGS
from kube_gpu_exporter.rules.alert_text import AlertText, device, label
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    World,
    edges,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Xid
from kube_gpu_exporter.rules.settings.view import ConfigView

XID_NEW_SERIES = (
    "The exporter serves the counter of every watched code at 0 from its start "
    "(`--collector.xid-codes`, the alerts' default codes), so `increase()` sees a first event, "
    "an exporter restart shows as a counter reset, and a gap in the data or a Prometheus "
    "starting with empty storage does not make old events look new."
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
    """Xid counters that rose within the window.

    The exporter serves the watched codes' counters at 0 from its start, so `increase()` alone
    sees a first event and a restart is a reset. (An `unless … offset` arm for counters born at
    1 fired for every old counter after any gap in the data: gone.)
    """
    counter = q.sel(c.XID_ERRORS, f'xid=~"{"|".join(str(x) for x in a.xids)}"')
    return agg("max", (*q.device_display, "xid"), f"increase({counter}[{a.window}])") + " > 0"


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


def increase(q: Query, a: XidAlert) -> str:
    """The runbook's query: the device's Xid events within the window."""
    return "increase(" + q.sel(c.XID_ERRORS, 'uuid="<uuid>"') + f"[{a.window}])"


def table(xids: tuple[int, ...]) -> str:
    """The runbook's table of what each watched code means."""
    rows = [f"| {x} | {XID_MEANINGS.get(x, 'see NVIDIA’s Xid catalog')} |" for x in xids]
    return "| Xid | meaning |\n|---|---|\n" + "\n".join(rows)


def other_xid(cfg: ConfigView, own: XidAlert) -> int:
    """An Xid not in `own`'s list, for a series that must not fire: the first one the other
    Xid alert watches (so each list is tested against the other), else 999."""
    alerts = cfg.alerts
    settings = (getattr(alerts, name) for name in type(alerts).model_fields)
    others = (x for a in settings if isinstance(a, XidAlert) and a is not own for x in a.xids)
    return next(x for x in (*others, 999) if x not in own.xids)


def xid_case(a: XidAlert, w: World) -> Case:
    """Counters served at 0 from the start. Keeps failing (rising every minute), a first event
    (0, then 1), a real Xid after an exporter restart (1, reset to 0, 1 again), an old event
    across a gap in the data (flat, then no samples, then the same value: must not fire), an
    old event (flat) and a rising Xid of the other list."""
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10
    at = start + held + 2
    n = at + 10
    x = {"xid": str(a.xids[0])}
    first = start + 1  # the minute every counter that must fire first rises (GPU 0's too)
    series = [
        s(c.XID_ERRORS, w.dev("a", 0, **x), f"0+0x{start} 1+1x{n}"),
        s(c.XID_ERRORS, w.dev("a", 2, **x), steady(1, at + n)),
        s(c.XID_ERRORS, w.dev("a", 3, xid=str(other_xid(w.q.config, a))), f"0+0x{start} 1+1x{n}"),
        # one old Xid, then no data for longer than the window, then the same count again
        s(c.XID_ERRORS, w.dev("a", 5, **x), f"2+0x{start - span - 5} _x{span + 2} 2+0x{n}"),
    ]
    firing = [Firing(w.dev_out("a", 0, **x), 0)]
    if held + 1 < span:  # a single event stays in the window long enough to outlast `for`
        series += [
            s(c.XID_ERRORS, w.dev("a", 1, **x), f"0+0x{first - 1} 1+0x{n}"),
            # restarted exporter: 1 before, back to 0 at the restart, then the same Xid again
            s(c.XID_ERRORS, w.dev("a", 4, **x), f"1+0x{first - 4} 0+0x2 1+0x{n}"),
        ]
        firing += [Firing(w.dev_out("a", 1, **x), 0), Firing(w.dev_out("a", 4, **x), 0)]
    # Nothing before any event; then both edges of `for`, counted from `first`.
    return Case(tuple(series), (Check(start - 1, ()), *edges(a.for_, tuple(firing), first)))
