"""The demo's queued Job: Kueue's objects in the demo's API server, so that the cluster view
shows a GPU workload waiting in a queue and the dashboard's "Queues (Kueue)" row has data.

The ml team's ClusterQueue gives it 8 H100s (a flavor on the story's H100 nodes; it may
borrow 8 more from its cohort) and Kueue counts them all in use; the team's next Job,
ml/llm-eval (one pod of 8 GPUs), was queued 70 minutes ago and Kueue keeps it suspended for
want of quota: no pod exists, so only its Workload says it waits (kube_gpu_pending_workloads,
reason Pending), and KubeGpuWorkloadPendingTooLong fires. An empty H100 node could run it,
so the view keeps Kueue's reason rather than a node-fit one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from kube_gpu_exporter.demo.kube_api import KubeApiServer
from kube_gpu_exporter.demo.kube_api.cluster_objects import H100, PRODUCT
from kube_gpu_exporter.demo.kube_api.kueue_objects import (
    GPU,
    make_cluster_queue,
    make_local_queue,
    make_resource_flavor,
    make_workload,
)

KUEUE_VERSIONS = ("v1beta2",)  # what the demo's API server serves of kueue.x-k8s.io
NAMESPACE, LOCAL_QUEUE, CLUSTER_QUEUE, FLAVOR = "ml", "ml-batch", "ml-cq", "h100"
QUEUED_JOB = "llm-eval"
QUOTA_GPUS = 8
QUEUED_MINUTES = 70  # past KubeGpuWorkloadPendingTooLong's hour
MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    f"in flavor {FLAVOR}, {QUOTA_GPUS} more needed"
)


def populate_queues(api: KubeApiServer, now: datetime | None = None) -> None:
    """Put the flavor, the queues and the queued Job's Workload into `api`
    (made with `kueue_versions=KUEUE_VERSIONS`)."""
    now = now or datetime.now(UTC)

    def at(minutes_ago: int) -> str:
        return (now - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")

    api.put_kueue("resourceflavors", make_resource_flavor(FLAVOR, {PRODUCT: H100}))
    quota = [(FLAVOR, GPU, QUOTA_GPUS, QUOTA_GPUS)]
    queue = make_cluster_queue(
        CLUSTER_QUEUE, quota, used={(FLAVOR, GPU): QUOTA_GPUS}, cohort="research-and-ml"
    )
    api.put_kueue("clusterqueues", queue)
    api.put_kueue("localqueues", make_local_queue(LOCAL_QUEUE, NAMESPACE, CLUSTER_QUEUE))
    queued = make_workload(
        f"job-{QUEUED_JOB}-7f3a9",
        NAMESPACE,
        LOCAL_QUEUE,
        gpus_each=QUOTA_GPUS,
        created=at(QUEUED_MINUTES),
        waiting=("Pending", MESSAGE),
        owner=(QUEUED_JOB, str(uuid.uuid4())),
    )
    api.put_kueue("workloads", queued)
