"""The cluster view's own health (group kube-gpu-exporter.exporter): the scheduling alerts
read only its series, so where Prometheus cannot scrape it, or its watches of the API server
fail, they are blind and this alert speaks instead.
"""

from __future__ import annotations

from pydantic import Field

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.rules.alert_text import AlertText, in_cluster
from kube_gpu_exporter.rules.promql import Query, agg
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Firing,
    Series,
    World,
    edges,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import Runbook, promql, sh
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration
from kube_gpu_exporter.rules.spec import AlertSpec

TARGET = "kube-gpu-exporter-cluster:19401"


class ClusterViewDownAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")


def _rule(a: ClusterViewDownAlert, q: Query) -> AlertText:
    watch = agg("min", (*q.cluster, "resource"), q.view(k.WATCH_UP))
    return AlertText(
        f"{q.view_up()} == 0\nor\n{watch} == 0",
        f"For {a.for_} the cluster view{in_cluster(q)} has not been scraped, or its watch of "
        f"{{{{ with $labels.resource }}}}{{{{ . }}}}{{{{ end }}}} has failed: "
        "GPUPodPendingTooLong, GPUFragmentation, GPUQuotaExhausted, GPUPreemptionRate and "
        "the Kueue alerts (KubeGpuWorkloadPendingTooLong, KubeGpuFlavorCannotFit, "
        "KubeGpuQueueQuotaExhaustedWhileIdle) cannot fire meanwhile.",
    )


def _case(a: ClusterViewDownAlert, w: World) -> Case:
    n = minutes(a.for_) + 10
    series = (
        Series("up", w.view(instance=TARGET), steady(0, n)),
        s(k.WATCH_UP, w.view(instance=TARGET, resource="pods"), steady(0, n)),
        s(k.WATCH_UP, w.view(instance=TARGET, resource="nodes"), steady(1, n)),
    )
    firing = (
        Firing(w.view(instance=TARGET), 0),
        Firing(w.view_out(resource="pods"), 0),
    )
    return Case(series, edges(a.for_, firing))


def _runbook(a: ClusterViewDownAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"For {a.for_}, either Prometheus has failed to scrape `kube-gpu-exporter "
            "cluster` (`up == 0`), or the view cannot list and watch one resource of the API "
            "server (`kube_gpu_cluster_watch_up == 0`, the `resource` label says which): it "
            "then serves what it last saw of it, which grows stale."
        ),
        impact=(
            "The scheduling and Kueue alerts and the dashboard's 'why GPU pods wait' and "
            "'Queues (Kueue)' rows are blind or stale: pending GPU pods and workloads, quota "
            "refusals and preemptions go unreported."
        ),
        diagnosis="\n\n".join(
            (
                promql(q.view_up(), q.view(k.WATCH_UP), q.view(k.WATCH_ERRORS)),
                "`kube_gpu_cluster_watch_errors_total`'s `kind` tells a connection or "
                "timeout problem from the API server refusing (`server_error`: often RBAC).",
                sh(
                    "kubectl -n kube-gpu-exporter get pods -l app.kubernetes.io/component=cluster",
                    "kubectl -n kube-gpu-exporter logs deploy/kube-gpu-exporter-cluster --tail=50",
                    "kubectl auth can-i watch pods --all-namespaces "
                    "--as=system:serviceaccount:kube-gpu-exporter:kube-gpu-exporter-cluster",
                ),
            )
        ),
        mitigation=(
            "A watch refused with 403: re-apply the generated "
            "ClusterRole (deploy/cluster.yaml), which grants list/watch on pods, nodes, "
            "resourcequotas and events (and get on pods, for explain). OOM-killed: raise the "
            "Deployment's memory limit "
            "(the view holds about 2 KiB per active pod). Not scraped: check the "
            "ServiceMonitor in deploy/cluster.yaml is applied and selected by Prometheus."
        ),
    )


KUBE_GPU_CLUSTER_VIEW_DOWN = AlertSpec(
    name="KubeGpuClusterViewDown",
    summary="The cluster view is not scraped or cannot watch the API server.",
    settings=ClusterViewDownAlert,
    rule=_rule,
    cases=_case,
    runbook=_runbook,
)

SPECS = (KUBE_GPU_CLUSTER_VIEW_DOWN,)
