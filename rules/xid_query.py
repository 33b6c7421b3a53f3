"""Xid events within a window, per device and code: the query the Xid alerts and the
dashboards share, and its form over a whole period for the report.

The exporter serves a code's counter from its first event, at 1, and no zeros in advance
(16 codes × 8 GPUs were 128 constant series on every 8-GPU node). `increase()` over a series'
first samples is 0, so a first event needs two more arms, both keyed on
`kube_gpu_exporter_xid_watch_start_timestamp_seconds`, the Unix time the exporter began
counting (its start, or NVML's re-initialisation):

1. `increase(x[w]) > 0 or x - x offset w > 0` (`promql.rose`): a counter that rose within
   the window, for the whole window on both Prometheus generations; a reset (a restarted
   exporter's counter, back from 3 to 1) counts what came after it.
2. `x > 0 and on (node) time() - start < w`: counting began within the window, so every
   count is an event within it. A first Xid right after a restart or a reboot is caught even
   when Prometheus has nothing of the exporter from before (the scrapes failed while the node
   rebooted), and a Prometheus with empty storage sees only what the exporters counted
   within the window.
3. `(x > 0 unless x offset w) and on (node) start offset w`: the series did not exist w ago
   in a body that Prometheus did scrape then (the start series is in every body, so its
   presence w ago says the exporter was scraped then): a counter born within the window.

What is not caught is what nobody can know: after a gap in the data longer than the window
(Prometheus down, scrapes failing) on an exporter that kept counting, a counter born or
risen during the gap is not an event within the window, and an old counter seen again is not
one either; both are silent, where a naive `x unless x offset w` fired for every old counter.
The exporter's clock and Prometheus' must agree to well within the window (NTP does).
"""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.promql import Query, rose


def xid_events(q: Query, window: str, seconds: str, *matchers: str) -> str:
    """The three arms over the Xid counters selected by `matchers`, one series per device and
    code where an Xid came within `window` (`seconds`: the same window as a number, which
    PromQL needs beside `time()`). Each arm is already `> 0`: an `or` keeps the left value of a
    series, so a 0 from arm 1 would hide arms 2 and 3. The value is the events counted (arm
    1's rise, else the counter)."""
    counter = q.sel(c.XID_ERRORS, *matchers)
    start = q.sel(c.XID_WATCH_START)
    on = q.on(q.node)
    return (
        f"{rose(counter, window)}\n"
        "or\n"
        f"  {counter} > 0 and {on} time() - {start} < {seconds}\n"
        "or\n"
        f"  ({counter} > 0 unless {counter} offset {window})\n"
        f"    and {on} {start} offset {window}"
    )


def xid_events_over(q: Query, period: str, seconds: str, *matchers: str) -> str:
    """The Xid events of a whole period, per device and code, read at its end (the report).

    The alerts' instant arms need the series still there at the end; a report must also
    count a GPU that vanished within the period. So every arm reads ranges, and a series
    takes the largest of: its rise within the period (resets: what followed), its highest
    count if it was born within the period while Prometheus saw the exporter at the start,
    and its highest count if every exporter seen within the period began counting within
    it. A period with gaps or restarts may count a few events short, never old ones."""
    counter = q.sel(c.XID_ERRORS, *matchers)
    start = q.sel(c.XID_WATCH_START)
    on = q.on(q.node)
    risen = f"increase({counter}[{period}])"
    highest = f"max_over_time({counter}[{period}])"
    born = f"({highest} unless {counter} offset {period}) and {on} {start} offset {period}"
    fresh = f"{highest} and {on} min_over_time({start}[{period}]) > time() - {seconds}"
    either = f"({risen} > ({born}) or ({born}) or {risen})"
    return f"({either} > ({fresh}) or ({fresh}) or {either}) > 0"
