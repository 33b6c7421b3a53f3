"""What an alert says: its expression and its templated description, and the template pieces
descriptions are written with.

Descriptions are Go templates that Prometheus renders per alert (rules/templates.py renders the
same subset for the promtool tests), so the pieces here are the only `{{ … }}` forms in them
besides `$value` with a humanize function.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.promql import POD_LABELS, Query, agg


@dataclass(frozen=True, slots=True)
class AlertText:
    """What an alert's rule builder returns; the name, summary, `for` and severity come from
    its spec and settings."""

    expr: str
    description: str


def label(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def in_cluster(q: Query) -> str:
    """` in cluster <cluster>` when multi-cluster and the alert carries the label — not when
    the cluster is an external label added after evaluation, which would print an empty
    "in cluster " (kubernetes-mixin's `with` idiom)."""
    if not q.cluster:
        return ""
    return f"{{{{ with $labels.{q.cluster[0]} }}}} in cluster {{{{ . }}}}{{{{ end }}}}"


def where(q: Query) -> str:
    """`on <node>` (and `in cluster <cluster>` when it has one), as alert text."""
    return f"on {label(q.node_label)}{in_cluster(q)}"


def device(q: Query) -> str:
    """`GPU 0 (GPU-…) on node-a, held by ns/pod,` — the holders only where there are any."""
    return f"GPU {label('gpu')} ({label('uuid')}) {where(q)}{holders(q)}"


def go_string(text: str) -> str:
    """`text` as a Go template string literal: a line break in it (a selector may span lines)
    is written `\\n`, since Go's template lexer ends a literal at one."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r") + '"'


def query_list(expr: str, keys: tuple[str, ...], sort_by: str, item: str, around: str) -> str:
    """A block that lists what `expr` returns for this alert, sorted by `sort_by`: `expr`
    holds one `%q` per label in `keys`, filled with the alert's own values; `item` is written
    once per result (with `{{ .Labels.NAME }}`), inside `around`'s `{}`; nothing at all when
    the query returns nothing. rules/templates.py renders it for the promtool expectations."""
    args = " ".join(f"$labels.{k}" for k in keys)
    before, after = around.split("{}")
    return (
        f"{{{{ with query (printf {go_string(expr)} {args}) | sortByLabel {go_string(sort_by)} }}}}"
        f"{before}{{{{ range . }}}}{item}{{{{ end }}}}{after}{{{{ end }}}}"
    )


def row(name: str) -> str:
    """A label of one result inside a `query_list` item."""
    return f"{{{{ .Labels.{name} }}}}"


def holders(q: Query) -> str:
    """`, held by ns/pod ns/pod,` naming every pod allocated to the alert's device (nothing
    when none is): the alert's labels name a holder only when there is exactly one."""
    expr = agg("max", POD_LABELS, q.sel(c.ALLOCATION_INFO, *(f"{k}=%q" for k in q.device)))
    return query_list(expr, q.device, "pod", f" {row('namespace')}/{row('pod')}", ", held by{},")
