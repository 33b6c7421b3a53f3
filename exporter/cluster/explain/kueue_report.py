"""`explain` for Kueue: what a person reads of a queued Job or Workload.

The queue it waits in (LocalQueue → ClusterQueue, cohort), the queue's quota per flavor of
each resource the pod sets ask (nominal, borrowing limit, used, what the cohort has unused
that the queue may borrow, what it may take now), Kueue's own conditions on the Workload,
its position where the visibility API says it, then the two halves of the verdict: the
flavor Kueue would assign (or why none) and, per pod set, explain's node check of the pod as
that flavor lets it go (report.py's lines); last, the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kube_gpu_exporter.exporter.cluster.explain.kueue_api import Position
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import WorkloadState
from kube_gpu_exporter.exporter.cluster.explain.kueue_quota import PodSet
from kube_gpu_exporter.exporter.cluster.explain.kueue_verdict import LIMITS, KueueVerdict
from kube_gpu_exporter.exporter.cluster.explain.report import FAIL, OK, Style, render
from kube_gpu_exporter.exporter.cluster.quantities import show
from kube_gpu_exporter.exporter.cluster.view import ClusterView

NOT_SERVED = "position: unknown (visibility API not served)"


def render_kueue(
    what: str,
    local_queue: str,
    pod_sets: Sequence[PodSet],
    verdict: KueueVerdict,
    view: ClusterView,
    *,
    state: WorkloadState | None,
    position: Position | None,
    predicted: bool,
    colour: bool = False,
) -> str:
    style = Style(colour)
    cq = verdict.cluster_queue
    queue = f"LocalQueue {local_queue} → ClusterQueue {cq.name if cq else '(none)'}"
    if cq is not None and cq.cohort:
        queue += f" (cohort {cq.cohort})"
    lines = [f"{what}: {queue}"]
    for pod_set in pod_sets:
        asks = ", ".join(f"{r} {show(r, n)}" for r, n in sorted(pod_set.pod.requests.items()))
        lines.append(f"  pod set {pod_set.name}: {pod_set.count} × ({asks or 'nothing'})")
    lines += ["", *_quota_table(verdict, pod_sets), ""]
    lines += _state(state, predicted)
    if not predicted and state is not None and not state.has("QuotaReserved"):
        lines.append(f"  {_position(position)}")
    lines.append("")
    assignment = verdict.assignment
    if verdict.admitted and state is not None:
        given = _flavors(state.flavors)
        lines.append(f"  quota   {style(OK, OK)}    admitted by Kueue in {given}")
    elif assignment.fits:
        borrow = " (borrowing from the cohort)" if assignment.borrows else ""
        given = _flavors(assignment.flavors)
        lines.append(f"  quota   {style(OK, OK)}    Kueue would assign {given}{borrow}")
    else:
        lines.append(f"  quota   {style(FAIL, FAIL)}  {assignment.message}")
    for fit in verdict.fits:
        lines.append("")
        if fit.refusal:
            lines.append(f"  nodes   {style(FAIL, FAIL)}  refused by admission: {fit.refusal}")
            continue
        if fit.pod is None or fit.result is None:  # an admitted Job whose pods are all bound
            mark = OK if fit.fits else FAIL
            lines.append(f"  pods    {style(mark, mark)}    {fit.placeable} of {fit.count} bound")
            continue
        body = render(view, fit.pod, fit.result, admitted=True, colour=colour)
        lines += ["  " + line if line else "" for line in body.splitlines()[2:-3]]
        if fit.result.reason is None:
            mark = OK if fit.fits else FAIL
            lines.append(
                f"  nodes   {style(mark, mark)}  {min(fit.placeable, fit.count)} of "
                f"{fit.count} pods fit the nodes at once"
            )
    lines += ["", _verdict(verdict, style, predicted)]
    return "\n".join(lines) + "\n"


def _quota_table(verdict: KueueVerdict, pod_sets: Sequence[PodSet]) -> list[str]:
    asked = {r for p in pod_sets for r in p.total}
    rows = [("FLAVOR", "RESOURCE", "NOMINAL", "BORROW LIMIT", "USED", "COHORT UNUSED", "FREE NOW")]
    for (flavor, resource), room in verdict.rooms.items():
        if resource not in asked:
            continue
        limit = room.limit
        rows.append(
            (
                flavor,
                resource,
                show(resource, limit.nominal),
                "-" if limit.borrowing_limit is None else show(resource, limit.borrowing_limit),
                show(resource, room.used),
                show(resource, room.lendable)
                if verdict.cluster_queue and verdict.cluster_queue.cohort
                else "-",
                show(resource, max(0, room.available)),
            )
        )
    if len(rows) == 1:
        return ["  no quota for what the pod sets ask"]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows
    ]


def _state(state: WorkloadState | None, predicted: bool) -> list[str]:
    if predicted or state is None:
        return ["  workload: none yet (judged as Kueue would on submission)"]
    lines = [f"  workload {state.namespace}/{state.name}:"]
    shown = False
    for kind in ("QuotaReserved", "Admitted", "Evicted", "Preempted", "Finished"):
        condition = state.conditions.get(kind)
        if condition is None:
            continue
        shown = True
        why = f" {condition.reason}" if condition.reason else ""
        said = f": {condition.message}" if condition.message else ""
        lines.append(f"    {kind}={condition.status}{why}{said}")
    if not shown:
        lines.append("    no condition yet (Kueue has not evaluated it)")
    return lines


def _position(position: Position | None) -> str:
    if position is None:
        return NOT_SERVED
    if position.local_queue is None and position.cluster_queue is None:
        return "position: not among the pending workloads the visibility API lists"
    return (
        f"position: {position.local_queue} in its LocalQueue, "
        f"{position.cluster_queue} in its ClusterQueue (0 is next)"
    )


def _flavors(flavors: Sequence[Mapping[str, str]]) -> str:
    seen = {f"{flavor} for {resource}": None for c in flavors for resource, flavor in c.items()}
    return ", ".join(seen) or "no flavor (nothing asked)"


def _verdict(verdict: KueueVerdict, style: Style, predicted: bool) -> str:
    limits = f"\n  not judged: {', '.join(LIMITS)}"
    if verdict.schedules:
        head = "would be admitted and scheduled" if not verdict.admitted else "admitted; pods fit"
        return style(head, "bold") + limits
    if not verdict.quota:
        stated = verdict.stated
        head = "will not be admitted now: " + verdict.assignment.message
        if stated:
            head = "will not be admitted without preemption: " + verdict.assignment.message
            return style(head, "bold") + f"\n  the queue may preempt ({stated[0]}): not judged"
        return style(head, "bold") + limits
    reasons = [
        f.refusal
        or (str(f.result.reason) if f.result and f.result.reason else "")
        or f"only {f.placeable} of its {f.count} pods fit the nodes at once"
        for f in verdict.fits
        if not f.fits
    ]
    head = "admitted by quota, but its pods will not schedule: " + "; ".join(
        reasons or ["no pod set judged"]
    )
    return style(head, "bold") + limits
