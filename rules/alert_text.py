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
    return f"GPU {label('gpu')} ({label('uuid')}) {where(q)}"
