"""The cluster view: GPU capacity as the scheduler sees it, and why GPU pods wait.

Pure functions over slim values of Nodes, Pods and ResourceQuotas; nothing here talks to
the API except `explain/api.py` (one read) and `watches.py` (the `cluster` command's
list/watches, with `transitions.py` counting what they see go by). The flow:

    parse_node / parse_pod / parse_quota   API JSON → Node, Pod, Quota (objects.py)
    ClusterView.build(nodes, pods, quotas) what every node has allocated and free (view.py)
    classify(view, pod)                    one Reason with its evidence (classify.py)
    node_capacity(view), product_capacity(view)   free GPUs, largest schedulable request,
                                           fragmentation (capacity.py)
    quota_checks(quotas, requests)         what a GPU quota leaves (quota.py)

`explain/` is the `kube-gpu-exporter explain` command built on them.
"""

from kube_gpu_exporter.exporter.catalog.cluster import PENDING_REASONS, Reason
from kube_gpu_exporter.exporter.cluster.capacity import (
    NodeCapacity,
    ProductCapacity,
    eligible,
    fragmentation_index,
    node_capacity,
    product_capacity,
)
from kube_gpu_exporter.exporter.cluster.classify import Classification, classify
from kube_gpu_exporter.exporter.cluster.objects import (
    Node,
    Pod,
    Quota,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from kube_gpu_exporter.exporter.cluster.parse import (
    effective_requests,
    parse_node,
    parse_pod,
    parse_quota,
)
from kube_gpu_exporter.exporter.cluster.placement import Filter, NodeCheck, check_node
from kube_gpu_exporter.exporter.cluster.quota import QuotaCheck, quota_checks
from kube_gpu_exporter.exporter.cluster.settings import (
    DEFAULT_SETTINGS,
    ClusterSettings,
)
from kube_gpu_exporter.exporter.cluster.view import ClusterView, NodeState

__all__ = [
    "DEFAULT_SETTINGS",
    "PENDING_REASONS",
    "Classification",
    "ClusterSettings",
    "ClusterView",
    "Filter",
    "Node",
    "NodeCapacity",
    "NodeCheck",
    "NodeState",
    "Pod",
    "ProductCapacity",
    "Quota",
    "QuotaCheck",
    "Reason",
    "Requirement",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "check_node",
    "classify",
    "effective_requests",
    "eligible",
    "fragmentation_index",
    "node_capacity",
    "parse_node",
    "parse_pod",
    "parse_quota",
    "product_capacity",
    "quota_checks",
]
