"""A Kubernetes API server over real HTTP (list, watch, faults) and the objects it serves:
the demo's cluster, and the tests' stand-in for kube-apiserver."""

from kube_gpu_exporter.demo.kube_api.objects import (
    NODE,
    NODES_PATH,
    PODS_PATH,
    QUOTAS_PATH,
    SLICES_PATH,
    make_pod,
    make_slice,
    status_object,
    write_kubeconfig,
)
from kube_gpu_exporter.demo.kube_api.server import KubeApiServer, Request

__all__ = [
    "NODE",
    "NODES_PATH",
    "PODS_PATH",
    "QUOTAS_PATH",
    "SLICES_PATH",
    "KubeApiServer",
    "Request",
    "make_pod",
    "make_slice",
    "status_object",
    "write_kubeconfig",
]
