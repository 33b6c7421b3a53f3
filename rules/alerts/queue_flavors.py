"""Kueue alerts, second part (of group kube-gpu-exporter.scheduling): a ResourceFlavor that
gives GPU quota no node can serve.

Kueue admits a workload against a flavor's quota and only then does the scheduler look for a
node: a flavor whose node labels or taints match no GPU node (a typo, a node pool renamed or
scaled away) admits workloads whose pods can never run. The cluster view counts, per flavor
and GPU resource, the nodes its workloads could land on; a known 0 against quota is the fault.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster, label, query_list, row
from kube_gpu_exporter.rules.alerts.queues import CQ, GPU
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import Case, Firing, World, edges, minutes, s, steady
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration
from kube_gpu_exporter.rules.spec import AlertSpec

FLAVOR = ("flavor", "resource")


class FlavorCannotFitAlert(AlertSettings):
    """Nodes come and go (autoscaling, upgrades), so the default `for` waits out a rollout."""

    for_: Duration = Field(default="15m", alias="for")


def _flavor_rule(a: FlavorCannotFitAlert, q: Query) -> AlertText:
    by = (*q.cluster, *FLAVOR)
    quota = agg("max", by, f"{q.view(k.QUEUE_NOMINAL)} > 0")
    nodes = agg("max", by, q.view(k.FLAVOR_NODES))
    queues = query_list(
        agg("max", (CQ,), q.view(k.QUEUE_NOMINAL, *(f"{key}=%q" for key in by)) + " > 0"),
        by,
        CQ,
        f" {row(CQ)}",
        " (ClusterQueues{})",
    )
    return AlertText(
        f"{quota}\n  and {q.on(by)}\n{nodes} == 0",
        f"ResourceFlavor {label('flavor')}{in_cluster(q)} gives a quota of "
        f"{label('resource')} (up to {{{{ $value | humanize }}}}){queues}, but for {a.for_} "
        "no node could run its workloads (none has the resource allocatable, its node labels "
        "and only taints it tolerates): workloads Kueue admits to it will never start.",
    )


def _flavor_case(a: FlavorCannotFitAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    mig = "nvidia.com/mig-1g.10gb"
    quotas = (  # cluster queue, flavor, resource, nominal quota
        ("cq-a", "h100", GPU, 8),
        ("cq-b", "h100", GPU, 4),
        ("cq-a", "a100", GPU, 4),
        ("cq-c", "l4", GPU, 0),  # borrow-only: no quota of its own here
        ("cq-c", "spot", GPU, 8),
        ("cq-a", "h100", mig, 7),
    )
    nodes = (  # flavor, resource, nodes its workloads could land on (spot: absent, unknown)
        ("h100", GPU, 0),
        ("a100", GPU, 2),
        ("l4", GPU, 0),
        ("h100", mig, 3),
    )
    series = [
        s(k.QUEUE_NOMINAL, w.view(cluster_queue=cq, flavor=f, resource=r), steady(v, n))
        for cq, f, r, v in quotas
    ]
    series += [s(k.FLAVOR_NODES, w.view(flavor=f, resource=r), steady(v, n)) for f, r, v in nodes]
    rows = ({CQ: "cq-a"}, {CQ: "cq-b"})
    firing = (Firing(w.view_out(flavor="h100", resource=GPU), 8, rows),)
    return Case(tuple(series), edges(a.for_, firing))


def _flavor_runbook(a: FlavorCannotFitAlert, q: Query) -> Runbook:
    flavor = 'flavor="<flavor>"'
    return Runbook(
        meaning=(
            f"For {a.for_}, a ResourceFlavor has given some ClusterQueue a nominal quota of a "
            "GPU resource, while the cluster view counts no node its workloads could land on: "
            "no Ready node carries all of the flavor's `nodeLabels`, has the resource "
            "allocatable, and has only taints the flavor's tolerations allow. Kueue admits "
            "against quota, not nodes: it will go on admitting workloads to this flavor, "
            "whose pods then stay Pending."
        ),
        impact=(
            "Every workload admitted to the flavor holds quota and never runs; workloads that "
            "would fit another flavor of the queue may be assigned this one first (Kueue "
            "tries a resource group's flavors in order)."
        ),
        diagnosis="\n\n".join(
            (
                "The flavor's quota per queue and the nodes counted for it:",
                promql(q.view(k.QUEUE_NOMINAL, flavor), q.view(k.FLAVOR_NODES, flavor)),
                "The flavor's node labels and taints against the GPU nodes':",
                sh(
                    "kubectl get resourceflavor <flavor> -o yaml",
                    "kubectl get nodes -l nvidia.com/gpu.present=true --show-labels",
                    "kubectl describe nodes | grep -A3 -i taints",
                    "kube-gpu-exporter explain job/<name> -n <namespace>",
                ),
            )
        ),
        mitigation=(
            "Make the flavor match the nodes meant for it: fix a `nodeLabels` typo or a label "
            "the node pool no longer sets (the GPU product label changes with the hardware), "
            "add the toleration a new taint needs, or bring the node pool back (a scaled-to-"
            "zero pool whose autoscaler does not know the flavor). If the flavor is retired, "
            "remove it from the ClusterQueues' resource groups."
        ),
    )


KUBE_GPU_FLAVOR_CANNOT_FIT = AlertSpec(
    name="KubeGpuFlavorCannotFit",
    summary="A ResourceFlavor has GPU quota but no node its workloads could run on.",
    settings=FlavorCannotFitAlert,
    rule=_flavor_rule,
    cases=_flavor_case,
    runbook=_flavor_runbook,
)

SPECS = (KUBE_GPU_FLAVOR_CANNOT_FIT,)
