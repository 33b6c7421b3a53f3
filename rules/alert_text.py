"""What an alert says: its expression and its templated description, and the template pieces
descriptions are written with.

Descriptions are Go templates that Prometheus renders per alert (rules/templates.py renders the
same subset for the promtool tests), so the pieces here are the only `{{ … }}` forms in them
besides `$value` with a humanize function.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.rules.promql import Query


@dataclass(frozen=True, slots=True)
class AlertText:
    """What an alert's rule builder returns; the name, summary, `for` and severity come from
    its spec and settings."""

    expr: str
    description: str


def label(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def where(q: Query) -> str:
    """`on <node>` (and `in cluster <cluster>` when multi-cluster), as alert text."""
    text = f"on {label(q.node_label)}"
    return text + (f" in cluster {label(q.cluster[0])}" if q.cluster else "")


def device(q: Query) -> str:
    return f"GPU {label('gpu')} ({label('uuid')}) {where(q)}"
