"""`explain`'s output: what a person reads in a terminal.

Three blocks: one check per line (gates, preemption, quota, device plugin, taints, GPU type,
affinity, GPU fit, CPU/memory) with `ok`, `FAIL` (the check behind the verdict) or `note`
(it excludes some nodes, but is not why the pod waits); the GPU nodes with what excludes
each; and the verdict. Columns are aligned, lines short; colour only where `colour` says
(the command decides: a TTY, and NO_COLOR unset).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Final

from kube_gpu_exporter.exporter.catalog.cluster import Reason
from kube_gpu_exporter.exporter.cluster.classify import Classification
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.placement import Filter, NodeCheck
from kube_gpu_exporter.exporter.cluster.quantities import show
from kube_gpu_exporter.exporter.cluster.view import ClusterView

OK, FAIL, NOTE = "ok", "FAIL", "note"
FITS: Final = "fits"
SHOWN_NODES: Final = 20
_COLOURS: Final = {OK: "32", FAIL: "1;31", NOTE: "33", "bold": "1", "dim": "2"}
# The check each reason blames.
_CHECK_OF: Final = {
    Reason.GATED: "gates",
    Reason.AWAITING_PREEMPTION: "preemption",
    Reason.QUOTA_EXCEEDED: "quota",
    Reason.NOT_ADVERTISED: "device plugin",
    Reason.FRAGMENTED: "gpu fit",
    Reason.INSUFFICIENT_GPUS: "gpu fit",
    Reason.TAINT_NOT_TOLERATED: "taints",
    Reason.GPU_TYPE_UNAVAILABLE: "gpu type",
    Reason.AFFINITY_UNMATCHED: "affinity",
    Reason.OTHER: "cpu/memory",
}


_Why = Callable[[NodeCheck], str]  # what to say of a node a check excludes


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


class Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, kind: str) -> str:
        code = _COLOURS.get(kind)
        return f"\033[{code}m{text}\033[0m" if self.colour and code else text


def render(
    view: ClusterView,
    pod: Pod,
    result: Classification,
    *,
    admitted: bool,
    colour: bool = False,
    all_nodes: bool = False,
    unchecked: Sequence[str] = (),
    preempting: Sequence[str] = (),
) -> str:
    """The checks, the node table and the verdict. `unchecked`: what the scheduler weighs
    and explain does not judge (limits.py), `preempting`: the nodes where the pod fits once
    lower-priority pods are preempted; both named in a manifest's verdict."""
    style = Style(colour)
    lines = [_header(pod, result, admitted), ""]
    checks = _checks(view, pod, result, admitted)
    width = max(len(c.name) for c in checks)
    for check in checks:
        status = style(check.status.ljust(4), check.status)
        lines.append(f"  {check.name.ljust(width)}  {status}  {check.detail}")
    lines += ["", *_node_table(result, style, all_nodes), ""]
    lines.append(verdict(pod, result, admitted, style, unchecked, preempting))
    return "\n".join(lines) + "\n"


def verdict(
    pod: Pod,
    result: Classification,
    admitted: bool,
    style: Style,
    unchecked: Sequence[str] = (),
    preempting: Sequence[str] = (),
) -> str:
    """Two lines: the outcome (and the reason), then the evidence; a third names what the
    outcome leaves unjudged."""
    if result.reason is None:
        if admitted:
            return style("would schedule now", "bold") + (
                f"\n  {result.summary}\n  it still waits: held by what explain does not check "
                "(pod affinity, topology spread, volumes, DRA claims), or being bound"
            )
        if unchecked:
            held = "would schedule, unless what explain does not check holds it: "
            held += ", ".join(unchecked)
            return style(held, "bold") + f"\n  {result.summary}"
        return style("would schedule", "bold") + f"\n  {result.summary}"
    # what explain does not check only excludes more nodes: it never changes "will not"
    more = f"\n  not checked: {', '.join(unchecked)}" if unchecked and not admitted else ""
    if preempting and not admitted:
        return style(f"will not schedule without preemption: {result.reason}", "bold") + (
            f"\n  {result.summary}\n  it may preempt lower-priority pods on {_names(preempting)}"
            f": explain does not judge preemption{more}"
        )
    return style(f"will not schedule: {result.reason}", "bold") + f"\n  {result.summary}{more}"


def render_refused(pod: Pod, message: str, *, quota: bool, colour: bool = False) -> str:
    """A manifest the API server's admission refuses: its message verbatim."""
    style = Style(colour)
    outcome = (
        f"will not schedule: {Reason.QUOTA_EXCEEDED}"
        if quota
        else "will not be created: refused by the API server's admission"
    )
    return f"{_header(pod, None, False)}\n\n{style(outcome, 'bold')}\n  {message}\n"


def render_bound(pod: Pod, known: bool, colour: bool = False) -> str:
    """A manifest whose spec.nodeName binds it: no scheduler acts, the node's kubelet admits
    the pod or rejects it (which explain does not judge)."""
    style = Style(colour)
    node = pod.node_name
    outcome = f"not for the scheduler: spec.nodeName binds it to {node}"
    if known:
        why = f"the kubelet on {node} admits or rejects it; explain does not judge the kubelet"
    else:
        why = f"no node {node} in the cluster: the pod would wait for one of that name"
    return f"{_header(pod, None, False)}\n\n{style(outcome, 'bold')}\n  {why}\n"


def _header(pod: Pod, result: Classification | None, admitted: bool) -> str:
    first = result.requested if result is not None else {}
    wants = ", ".join(
        f"{name} {show(name, amount)}"
        for name, amount in sorted(pod.requests.items(), key=lambda i: (i[0] not in first, i[0]))
    )
    if not admitted:
        state = "not created yet"
    elif pod.created_at is not None:
        state = f"{pod.phase} for {_age(time.time() - pod.created_at)}"
    else:
        state = pod.phase
    return f"pod {pod.namespace}/{pod.name} ({state}) requests {wants or 'nothing'}"


def _checks(view: ClusterView, pod: Pod, result: Classification, admitted: bool) -> list[Check]:
    nodes = result.nodes
    failing = _CHECK_OF.get(result.reason) if result.reason is not None else None
    if result.reason is Reason.OTHER and not any(c.blocked_by is Filter.RESOURCES for c in nodes):
        failing = None

    def status(name: str, excluded: Sequence[NodeCheck]) -> str:
        return FAIL if failing == name else NOTE if excluded else OK

    gates = ", ".join(pod.scheduling_gates)
    found = [
        Check("gates", status("gates", ()), f"held by {gates}" if gates else "none"),
        Check(
            "preemption",
            status("preemption", ()),
            f"nominated to {pod.nominated_node}; preempted pods are leaving"
            if pod.nominated_node
            else "no nominated node",
        ),
        _quota_check(pod, result, admitted, failing),
        _plugin_check(view, result, failing),
    ]
    tainted = [c for c in nodes if Filter.TAINTS in c.failed]
    found.append(
        Check("taints", status("taints", tainted), _excluding(tainted, _taints) or "tolerated")
    )
    typed = [c for c in nodes if Filter.GPU_TYPE in c.failed]
    other = [c for c in nodes if Filter.AFFINITY in c.failed]
    asked = bool(pod.node_selector) or pod.affinity is not None
    type_asked = _asks_type(pod, view.settings.gpu_type_labels)
    found.append(
        Check(
            "gpu type",
            status("gpu type", typed),
            _excluding(typed, _typed) or ("matches" if type_asked else "none asked"),
        )
    )
    found.append(
        Check(
            "affinity",
            status("affinity", other),
            _excluding(other, _other) or ("matches" if asked else "none"),
        )
    )
    found.append(_fit_check(result, failing))
    short = [c for c in nodes if Filter.RESOURCES in c.failed]
    found.append(
        Check("cpu/memory", status("cpu/memory", short), _excluding(short, _short) or "fits")
    )
    if pod.has_claims:
        found.append(Check("dra claims", NOTE, "not evaluated (allocated by the DRA plugin)"))
    return found


def _asks_type(pod: Pod, type_labels: Sequence[str]) -> bool:
    """Whether the pod's selector or affinity names a GPU-type label at all."""
    keys = set(pod.node_selector)
    for term in pod.affinity or ():
        keys.update(req.key for req in term.match_expressions)
    return bool(keys.intersection(type_labels))


def _quota_check(pod: Pod, result: Classification, admitted: bool, failing: str | None) -> Check:
    if not result.quota:
        return Check("quota", OK, f"no GPU quota in namespace {pod.namespace}")
    if admitted:  # admission charged the pod when it was created
        detail = "; ".join(
            f"{c.quota}: {c.resource} {c.used_text} of {c.hard} used, "
            f"this pod's {c.requested} included"
            for c in result.quota
        )
    else:
        detail = "; ".join(map(str, result.quota))
    return Check("quota", FAIL if failing == "quota" else OK, detail)


def _plugin_check(view: ClusterView, result: Classification, failing: str | None) -> Check:
    parts = []
    for resource in result.requested:
        having = [c for c in result.nodes if c.gpu_allocatable.get(resource, 0) > 0]
        total = sum(c.gpu_allocatable[resource] for c in having)
        parts.append(f"{resource} {total} on {len(having)} of {_count(result.nodes, 'GPU node')}")
    missing = [c for c in result.nodes if not c.advertises]
    grouped: dict[str, list[str]] = {}
    for check in missing:
        grouped.setdefault(view.nodes[check.node].advertising(), []).append(check.node)
    parts += [f"{_names(nodes)} {what}" for what, nodes in grouped.items()]
    status = FAIL if failing == "device plugin" else NOTE if missing else OK
    return Check("device plugin", status, "; ".join(parts) or "no GPU requested")


def _count(items: Sized, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _fit_check(result: Classification, failing: str | None) -> Check:
    if not result.requested:
        return Check("gpu fit", OK, "no GPU requested")
    roomy = [c for c in result.nodes if c.gpu_room]
    wanted = ", ".join(f"{n} {r}" for r, n in result.requested.items())
    free = ", ".join(
        f"{n}" if len(result.open_free) == 1 else f"{n} {r}" for r, n in result.open_free.items()
    )
    usable = [c for c in result.nodes if c.open]
    where = f"{free} free on the {_count(usable, 'node')} the pod may use"
    if roomy:
        detail = f"{len(roomy)} of {_count(result.nodes, 'node')} with {wanted} free; {where}"
    else:
        detail = f"no node has {wanted} free; {where}"
    status = FAIL if failing == "gpu fit" else OK if roomy else NOTE
    return Check("gpu fit", status, detail)


def _excluding(checks: Sequence[NodeCheck], why: _Why) -> str:
    if not checks:
        return ""
    grouped: dict[str, list[str]] = {}
    for check in checks:
        grouped.setdefault(why(check), []).append(check.node)
    return "excludes " + "; ".join(f"{_names(n)}: {w}" for w, n in grouped.items())


def _taints(check: NodeCheck) -> str:
    return ", ".join(map(str, check.untolerated))


def _typed(check: NodeCheck) -> str:
    return ", ".join(check.selectors.gpu_type)


def _other(check: NodeCheck) -> str:
    return ", ".join(check.selectors.other)


def _short(check: NodeCheck) -> str:
    return ", ".join(map(str, check.short))


def _node_table(result: Classification, style: Style, all_nodes: bool) -> list[str]:
    if not result.nodes:
        return ["no GPU node in the cluster" if result.requested else "no node in the cluster"]
    ordered = sorted(result.nodes, key=lambda c: (not c.fits, -sum(c.gpu_free.values()), c.node))
    shown = ordered if all_nodes else ordered[:SHOWN_NODES]
    rows = [("NODE", "PRODUCT", "GPU FREE", "RESULT")]
    for check in shown:
        free = ", ".join(
            f"{check.gpu_free.get(r, 0)}/{check.gpu_allocatable.get(r, 0)}"
            for r in result.requested
        )
        rows.append((check.node, check.product or "-", free or "-", _excluded_by(check)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for number, row in enumerate(rows):
        text = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3]))
        last = style(row[3], "dim" if not number else OK if row[3] == FITS else "")
        lines.append("  " + (style(text, "dim") if not number else text) + "  " + last)
    if len(ordered) > len(shown):
        lines.append(f"  ... and {len(ordered) - len(shown)} more nodes (--all-nodes lists them)")
    return lines


def _excluded_by(check: NodeCheck) -> str:
    reasons = []
    if check.untolerated:
        reasons.append("taint " + _taints(check))
    if check.selectors.gpu_type:
        reasons.append("gpu type " + _typed(check))
    if check.selectors.other:
        reasons.append("selector " + _other(check))
    if not check.advertises:
        reasons.append("advertises no " + ", ".join(check.gpu_requested))
    elif not check.gpu_room:
        reasons.append("too few free GPUs")
    if check.short:
        reasons.append(_short(check))
    return "; ".join(reasons) or FITS


def _names(names: Iterable[str], limit: int = 3) -> str:
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
