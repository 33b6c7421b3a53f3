"""A Kubernetes API server over real HTTP (list, watch, faults) and the objects it serves:
the demo's cluster, and the tests' stand-in for kube-apiserver."""

from kube_gpu_exporter.demo.kube_api.objects import (
    EVENTS,
    EVENTS_PATH,
    NODE,
    NODES_PATH,
    PODS_PATH,
    QUOTAS_PATH,
    SLICES_PATH,
    make_event,
    make_pod,
    make_slice,
    status_object,
    write_kubeconfig,
)
from kube_gpu_exporter.demo.kube_api.server import KubeApiServer
from kube_gpu_exporter.demo.kube_api.store import Request

__all__ = [
    "EVENTS",
    "EVENTS_PATH",
    "NODE",
    "NODES_PATH",
    "PODS_PATH",
    "QUOTAS_PATH",
    "SLICES_PATH",
    "KubeApiServer",
    "Request",
    "make_event",
    "make_pod",
    "make_slice",
    "status_object",
    "write_kubeconfig",
]
