"""`explain job/NAME | workload/NAME [-n NS]` and `explain -f job.yaml` for a Job queued by
Kueue (its `kueue.x-k8s.io/queue-name` label): the queue, its quota, Kueue's conditions and
the verdict of kueue_verdict.py, printed by kueue_report.py.

A Job or Workload Kueue has not admitted is judged as Kueue would judge it now, a manifest as
if submitted now; one it has admitted is shown with its pods (those not bound judged by
explain's node check). Where the cluster has no Kueue, or the Job names no queue, one note
line says so and the Job's pod template is explained as `-f` explains a pod. Exit status as
explain's: 0 admitted (or would be) and the pods fit, 1 not, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final
from urllib.parse import quote

from kube_gpu_exporter.exporter.cluster import fields
from kube_gpu_exporter.exporter.cluster.classify import classify
from kube_gpu_exporter.exporter.cluster.explain.admission import admit
from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_api import KueueReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import (
    pod_sets_of_job,
    pod_sets_of_workload,
    queue_name,
    workload_state,
)
from kube_gpu_exporter.exporter.cluster.explain.kueue_report import render_kueue
from kube_gpu_exporter.exporter.cluster.explain.kueue_verdict import (
    NodeFit,
    judge,
    node_fits,
    placeable,
)
from kube_gpu_exporter.exporter.cluster.explain.manifest import as_written
from kube_gpu_exporter.exporter.cluster.explain.report import render, render_refused
from kube_gpu_exporter.exporter.cluster.parse import parse_pod
from kube_gpu_exporter.exporter.cluster.view import ClusterView
from kube_gpu_exporter.exporter.input_errors import InputError

PROG: Final = "kube-gpu-exporter"
EXIT_SCHEDULES, EXIT_WAITS = 0, 1
KINDS: Final = {"job/": "job", "jobs/": "job", "workload/": "workload", "workloads/": "workload"}
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"


def target(args: argparse.Namespace) -> tuple[str, Any] | None:
    """("job" | "workload", name), or ("manifest", the Job) for `-f` with a queued Job; None
    for what explain's pod path handles (a pod name, any other manifest)."""
    if args.pod:
        for prefix, kind in KINDS.items():
            if str(args.pod).startswith(prefix) and "/" not in args.pod[len(prefix) :]:
                return kind, args.pod[len(prefix) :]
        return None
    if not args.filename:
        return None
    from kube_gpu_exporter.exporter.cluster.explain.manifest import MAX_DOCUMENTS
    from kube_gpu_exporter.exporter.input_yaml import parse_yaml_all, read_input

    label = f"manifest {args.filename}"
    try:
        documents = parse_yaml_all(read_input(args.filename, label), label, MAX_DOCUMENTS)
    except InputError:
        return None  # said by the pod path, which reads it again
    for document in documents:
        if isinstance(document, Mapping) and document.get("kind") == "Job" and queue_name(document):
            return "manifest", document
    return None


def run(
    args: argparse.Namespace,
    kind: str,
    subject: Any,
    reader: ApiReader,
    namespace: str,
    colour: bool,
) -> int:
    """Explain and print; InputError (exit 2) is the caller's to say."""
    kueue = KueueReader(reader)
    workload: Mapping[str, Any] | None = None
    job: Mapping[str, Any] | None = None
    if kind == "manifest":
        metadata = fields.mapping(subject.get("metadata"))
        job_ns = fields.text(metadata.get("namespace")) or namespace
        if args.namespace and job_ns != args.namespace:
            raise InputError(
                f"the manifest's namespace {job_ns} does not match -n {args.namespace}"
            )
        job = {**subject, "metadata": {**metadata, "namespace": job_ns}}
        namespace = job_ns
    elif kind == "job":
        job = kueue.job(namespace, subject)
    else:
        workload = kueue.workload(namespace, subject)
    local_queue = queue_name(job) if job is not None else _spec(workload).get("queueName")
    served = kueue.served()
    if job is not None and (not served or not local_queue):
        if local_queue:
            print(
                f"{PROG}: note: the Job names LocalQueue {local_queue} but the cluster serves no "
                "kueue.x-k8s.io API (no Kueue): its pod template is judged alone",
                file=sys.stderr,
            )
        return _plain(reader, job, namespace, colour)
    local_queue = str(local_queue or "")
    read = kueue.read(namespace, local_queue)
    if job is not None and kind == "job":
        uid = fields.mapping(job.get("metadata")).get("uid")
        workload = next(
            (w for w in read.workloads if uid and uid in workload_state(w).owner_uids), None
        )
    state = workload_state(workload) if workload is not None else None
    pod_sets = (
        pod_sets_of_workload(workload) if workload is not None else pod_sets_of_job(job or {})
    )
    templates = _templates(workload, job)
    what = f"job {namespace}/{_name(job)}" if job is not None else f"workload {namespace}/{subject}"
    if state is not None and state.has("Finished"):
        print(f"{what} has finished; nothing to admit or schedule")
        return EXIT_SCHEDULES
    skip = f"{state.namespace}/{state.name}" if state is not None else ""
    verdict = judge(read, local_queue, pod_sets, skip)
    cluster = reader.cluster(namespace)
    view = ClusterView.build(cluster.nodes, cluster.pods, cluster.quotas, reader.settings)
    position = None
    if state is not None and state.has("QuotaReserved"):
        fits = _running(reader, view, namespace, workload, pod_sets) or node_fits(
            reader, view, read, templates, pod_sets, state.flavors
        )
        verdict = replace(verdict, admitted=True, fits=fits)
    elif verdict.assignment.fits:
        fits = node_fits(reader, view, read, templates, pod_sets, verdict.assignment.flavors)
        verdict = replace(verdict, fits=fits)
    if state is not None and not state.has("QuotaReserved"):
        position = kueue.position(namespace, local_queue, state.name)
    sys.stdout.write(
        render_kueue(
            what,
            local_queue,
            pod_sets,
            verdict,
            view,
            state=state,
            position=position,
            predicted=state is None,
            colour=colour,
        )
    )
    return EXIT_SCHEDULES if verdict.schedules else EXIT_WAITS


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return fields.mapping((obj or {}).get("spec"))


def _name(obj: Mapping[str, Any] | None) -> str:
    return fields.text(fields.mapping((obj or {}).get("metadata")).get("name"))


def _templates(
    workload: Mapping[str, Any] | None, job: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    if workload is not None:
        return [
            fields.mapping(p.get("template"))
            for p in fields.entries(_spec(workload).get("podSets"))
        ]
    return [fields.mapping(_spec(job).get("template"))]


def _running(
    reader: ApiReader,
    view: ClusterView,
    namespace: str,
    workload: Mapping[str, Any] | None,
    pod_sets: Any,
) -> tuple[NodeFit, ...]:
    """An admitted Workload's Job's pods: bound ones count as placed; the first one not bound
    is judged by explain's node check. None listed yet: () (the caller judges the template)."""
    owners = fields.entries(fields.mapping((workload or {}).get("metadata")).get("ownerReferences"))
    job = next((fields.text(o.get("name")) for o in owners if o.get("kind") == "Job"), "")
    count = sum(p.count for p in pod_sets)
    if not job:
        return ()
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
    selector = f"{JOB_NAME_LABEL}={job}"
    listed = map(parse_pod, reader.items("the Job's pods", path, label_selector=selector))
    pods = [p for p in listed if p is not None and not p.terminated]
    if not pods:
        return ()
    bound = sum(1 for p in pods if p.node_name)
    waiting = next((p for p in pods if not p.node_name), None)
    if waiting is None:
        return (NodeFit(None, None, count, bound),)
    result = classify(view, waiting, admitted=True)
    return (NodeFit(waiting, result, count, bound + placeable(result, view.settings)),)


def _plain(reader: ApiReader, job: Mapping[str, Any], namespace: str, colour: bool) -> int:
    """The Job's pod template explained as `explain -f` explains a pod."""
    template = fields.mapping(_spec(job).get("template"))
    meta = fields.mapping(template.get("metadata"))
    manifest = {
        **template,
        "metadata": {**meta, "name": _name(job) or "manifest", "namespace": namespace},
        "status": {},
    }
    label = f"job {namespace}/{_name(job)}"
    pod = as_written(manifest, label)
    admission = admit(reader, manifest, label)
    if admission.refusal:
        sys.stdout.write(
            render_refused(pod, admission.refusal, quota=admission.quota, colour=colour)
        )
        return EXIT_WAITS
    if admission.pod is not None:
        pod = parse_pod(admission.pod) or pod
    cluster = reader.cluster(namespace)
    view = ClusterView.build(cluster.nodes, cluster.pods, cluster.quotas, reader.settings)
    result = classify(view, pod, admitted=admission.pod is not None)
    sys.stdout.write(render(view, pod, result, admitted=False, colour=colour))
    return EXIT_SCHEDULES if result.schedulable else EXIT_WAITS
