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
    later,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration, Xid
from kube_gpu_exporter.rules.settings.view import ConfigView

XID_NEW_SERIES = (
    "The exporter creates an Xid's counter at its first event, so the rule also counts a "
    "counter that did not exist a window ago. One consequence: a Prometheus starting with "
    "empty storage sees every existing Xid counter as new and fires once for each."
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
    """Xid counters that rose within the window, including a counter that first appeared in it.

    The exporter creates an Xid's counter at the first event, at 1: `increase()` over a
    series' first sample is 0, so a lone first event would never alert on its own. The
    `unless … offset` arm catches a series that did not exist a window ago.
    """
    counter = q.sel(c.XID_ERRORS, f'xid=~"{"|".join(str(x) for x in a.xids)}"')
    window = a.window
    events = (
        f"  increase({counter}[{window}]) > 0\nor\n  ({counter} unless {counter} offset {window})"
    )
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
    """Keeps failing (a counter rising every minute), newly failing (a counter that appears
    at 1 and stays: only the `unless … offset` arm sees it), an old event (flat since long
    before the window) and a rising Xid of the other list."""
    held, span = minutes(a.for_), minutes(a.window)
    start = span + 10
    at = start + held + 2
    n = at + 10
    x = {"xid": str(a.xids[0])}
    series = [
        s(c.XID_ERRORS, w.dev("a", 0, **x), later(start, f"1+1x{n}")),
        s(c.XID_ERRORS, w.dev("a", 2, **x), steady(1, at + n)),
        s(c.XID_ERRORS, w.dev("a", 3, xid=str(other_xid(w.q.config, a))), later(start, f"1+1x{n}")),
    ]
    firing = [Firing(w.dev_out("a", 0, **x), 0)]
    if held + 1 < span:
        series.append(s(c.XID_ERRORS, w.dev("a", 1, **x), later(at - held - 1, steady(1, n))))
        firing.append(Firing(w.dev_out("a", 1, **x), 0))
    checks = [Check(start - 1, ()), Check(at, tuple(firing))]
    return Case(tuple(series), tuple(checks))
