"""The Kueue part of one cycle's view: what the watches hold of Kueue, joined with the pods
and nodes of the cluster view into what the Kueue series say.

- the waiting Workloads by queue and reason (kueue_fit.py's one reason each), the GPUs they
  ask and the oldest's creation;
- per ResourceFlavor and GPU resource, the nodes its pods could be bound to that advertise
  the resource (kueue_objects.py's `flavor_nodes`): the resources any ClusterQueue has quota
  of in the flavor, and those the nodes advertise;
- each ClusterQueue with GPU quota and its cohort; admissions and preemptions so far (0 for
  a queue with none yet, so that a rate starts from its first one);
- the GPU pods of admitted Workloads with their queues, and for pods only Kueue's admission
  gate holds, their Workload's reason in place of `gated`.

A pod belongs to a Workload when its controller owner is one of the Workload's owners (the
Job Kueue made it for), or when the pod itself is (plain pods: Kueue makes a Workload per
pod, or per pod group, owned by the pods). Matching walks every pod once a cycle, and only
while some GPU Workload is held.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kube_gpu_exporter.exporter.cluster.kueue_fit import EmptyNodes, kueue_gated, workload_reason
from kube_gpu_exporter.exporter.cluster.kueue_objects import Flavor, Queue, flavor_nodes
from kube_gpu_exporter.exporter.cluster.kueue_workloads import Workload
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.view import ClusterView

# (cluster_queue, namespace, local_queue, reason) → (workloads, GPUs asked, the oldest's
# creation time or None)
Pending = dict[tuple[str, str, str, str], tuple[int, int, float | None]]


@dataclass(frozen=True)
class KueueObjects:
    """What the Kueue watches hold at one moment (empty where Kueue is not served)."""

    workloads: Mapping[str, Workload] = field(default_factory=dict)
    local_queues: Mapping[str, str] = field(default_factory=dict)  # ns/name → ClusterQueue
    queues: Mapping[str, Queue] = field(default_factory=dict)
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    cohorts: Mapping[str, str] = field(default_factory=dict)  # name → parent
    admissions: Mapping[str, int] = field(default_factory=dict)
    preemptions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class KueueView:
    """What the Kueue series of one cycle say (see the module docstring)."""

    pending: Pending
    quotas: dict[tuple[str, str, str], tuple[int, int | None, int | None]]
    flavor_nodes: dict[tuple[str, str], int]
    queue_cohorts: dict[str, str]
    admissions: dict[str, int]
    preemptions: dict[str, int]
    queue_pods: tuple[tuple[str, str, str, str], ...]  # (namespace, pod, cq, local queue)
    pod_reasons: dict[tuple[str, str], str]  # (namespace, pod) → its Workload's reason


def pods_by_workload(
    pods: Iterable[Pod], workloads: Mapping[str, Workload]
) -> dict[str, list[Pod]]:
    """The pods (not ended) of each Workload, by its namespace/name key."""
    owners = {uid: key for key, workload in workloads.items() for uid in workload.owners}
    found: dict[str, list[Pod]] = defaultdict(list)
    if not owners:
        return found
    owner_of = owners.get  # one loop over every pod: kept to two lookups each
    for pod in pods:
        key = owner_of(pod.owner_uid) or owner_of(pod.uid)
        if key is not None and not pod.terminated:
            found[key].append(pod)
    return found


class KueueJudge:
    """Makes the `KueueView` of each cycle; keeps the empty-node states between cycles."""

    def __init__(self) -> None:
        self._empty = EmptyNodes()
        self._counted: tuple[tuple[object, ...], dict[tuple[str, str], int]] = ((), {})

    def judge(self, view: ClusterView, kueue: KueueObjects) -> KueueView:
        workloads = kueue.workloads
        pods = pods_by_workload(view.pods, workloads) if workloads else {}
        empty = None
        counts: Counter[tuple[str, str, str, str]] = Counter()
        gpus: Counter[tuple[str, str, str, str]] = Counter()
        oldest: dict[tuple[str, str, str, str], float] = {}
        pod_reasons: dict[tuple[str, str], str] = {}
        queue_pods = []
        for key, workload in workloads.items():
            own = pods.get(key, [])
            queue_name = workload.cluster_queue or kueue.local_queues.get(
                f"{workload.namespace}/{workload.local_queue}", ""
            )
            if workload.admitted:
                queue_pods += [
                    (pod.namespace, pod.name, queue_name, workload.local_queue)
                    for pod in own
                    if view.gpu_requests(pod)
                ]
            if empty is None and not (workload.reserved or workload.admitted):
                empty = self._empty.view(view)
            reason = workload_reason(
                view, empty or view, workload, own, kueue.queues.get(queue_name), kueue.flavors
            )
            if reason is None:
                continue
            series = (queue_name, workload.namespace, workload.local_queue, reason)
            counts[series] += 1
            gpus[series] += workload.gpus
            if workload.created is not None:
                oldest[series] = min(workload.created, oldest.get(series, workload.created))
            if reason:
                pod_reasons.update(((p.namespace, p.name), reason) for p in own if kueue_gated(p))
        return KueueView(
            pending={s: (n, gpus[s], oldest.get(s)) for s, n in counts.items()},
            quotas={
                (name, q.flavor, q.resource): (q.nominal, q.borrowing_limit, q.used)
                for name, queue in kueue.queues.items()
                for q in queue.quotas
            },
            flavor_nodes=self._flavor_nodes(view, kueue),
            queue_cohorts={name: queue.cohort for name, queue in kueue.queues.items()},
            admissions={q: kueue.admissions.get(q, 0) for q in {*kueue.queues, *kueue.admissions}},
            preemptions={
                q: kueue.preemptions.get(q, 0) for q in {*kueue.queues, *kueue.preemptions}
            },
            queue_pods=tuple(sorted(queue_pods)),
            pod_reasons=pod_reasons,
        )

    def _flavor_nodes(self, view: ClusterView, kueue: KueueObjects) -> dict[tuple[str, str], int]:
        """Counted again only when a node, a flavor or the resources to count changed: the
        same node objects (the view keeps them while they do not change) count alike."""
        resources = {name: set(view.advertised) for name in kueue.flavors}
        for queue in kueue.queues.values():
            for quota in queue.quotas:
                if quota.flavor in resources:
                    resources[quota.flavor].add(quota.resource)
        nodes = tuple(state.node for state in view.nodes.values())
        key = (nodes, tuple(kueue.flavors.values()), tuple(map(sorted, resources.values())))
        if key != self._counted[0]:
            self._counted = (key, flavor_nodes(kueue.flavors.values(), nodes, resources))
        return self._counted[1]
