"""`explain POD` for a pod Kueue has a say in: the Workload it belongs to.

A pod belongs to a Workload as the cluster view ties them (kueue_view.py): its controller
owner is one of the Workload's owners (the Job Kueue queued), or the pod itself is (plain
pods: Kueue makes a Workload per pod, owned by it). A pending pod that only Kueue's
scheduling gates hold waits for its Workload's admission, so "gated" alone would hide the
answer: command.py then prints `held_line` and the Workload's own report (kueue_command.py).
A pending pod of a Workload Kueue has admitted has had its quota: `admitted_line` says so
above the node check, so the node is plainly what it waits for.

Kueue may be absent, or the user may not be allowed to list Workloads: the pod is then
explained as any other pod (the lookup answers None, never an error of its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_api import GROUP, KueueReader
from kube_gpu_exporter.exporter.cluster.explain.kueue_objects import workload_state
from kube_gpu_exporter.exporter.cluster.kueue_fit import held_by_kueue
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.input_errors import InputError


def workload_of(pod: Pod, workloads: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The Workload the pod belongs to (see the module docstring), None when none does."""
    mine = {uid for uid in (pod.owner_uid, pod.uid) if uid}
    if not mine:
        return None
    for workload in workloads:
        state = workload_state(workload)
        if state.namespace == pod.namespace and mine.intersection(state.owner_uids):
            return workload
    return None


def held(pod: Pod) -> bool:
    """Gated by Kueue's gates alone (`admission`, and beside it on v0.17 `topology`)."""
    return held_by_kueue(pod)


def find(reader: ApiReader, pod: Pod) -> Mapping[str, Any] | None:
    """The pod's Workload as the API server lists them now; None without Kueue, without
    leave to list Workloads, or when none is the pod's."""
    kueue = KueueReader(reader)
    try:
        if not kueue.served():
            return None
        path = f"{GROUP}/{kueue.version}/namespaces/{quote(pod.namespace, safe='')}/workloads"
        return workload_of(pod, reader.items("Kueue Workloads", path))
    except InputError:
        return None  # not Kueue's to explain: the pod's own answer stands


def name(workload: Mapping[str, Any]) -> str:
    return workload_state(workload).name


def held_line(pod: Pod, workload: Mapping[str, Any]) -> str:
    state = workload_state(workload)
    gates = ", ".join(pod.scheduling_gates)
    return (
        f"pod {pod.namespace}/{pod.name} is held by Kueue ({gates}) until it admits the pod's "
        f"Workload {state.namespace}/{state.name}:"
    )


def admitted_line(workload: Mapping[str, Any] | None) -> str:
    """One line for a pending pod whose Workload Kueue has admitted; "" otherwise."""
    if workload is None:
        return ""
    state = workload_state(workload)
    if not state.has("Admitted"):
        return ""
    return (
        f"Kueue admitted its Workload {state.namespace}/{state.name} in ClusterQueue "
        f"{state.cluster_queue or '(unknown)'}: the quota is granted, the nodes are what it "
        "waits for\n"
    )
