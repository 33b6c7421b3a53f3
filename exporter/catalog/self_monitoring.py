"""The exporter's own health: is NVML answering, is the kubelet, how fresh is the data.

These are what `KubeGpuExporter*` alerts and the troubleshooting guide read first: a device
series that is absent means little until these say whether the exporter could look.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.metric import Metric, MetricType, Scope

G, C = MetricType.GAUGE, MetricType.COUNTER
X = Scope.EXPORTER

BUILD_INFO = Metric(
    "kube_gpu_exporter_build_info",
    G,
    "",
    'Version of the exporter, and simulated="true" when it serves a scenario\'s invented '
    "readings instead of NVML's (serve --simulate); always 1.",
    X,
    ("version", "simulated"),
)
NVML_UP = Metric(
    "kube_gpu_exporter_nvml_up", G, "", "1 if NVML is initialised and answering, 0 if not.", X
)
COLLECTION_DURATION = Metric(
    "kube_gpu_exporter_collection_duration_seconds",
    G,
    "seconds",
    "Wall time of the collection cycle that produced these metrics.",
    X,
)
LAST_SUCCESS = Metric(
    "kube_gpu_exporter_last_collection_success_timestamp_seconds",
    G,
    "seconds",
    "Unix time of the last collection cycle in which NVML answered.",
    X,
)
XID_WATCH_START = Metric(
    "kube_gpu_exporter_xid_watch_start_timestamp_seconds",
    G,
    "seconds",
    "Unix time the exporter began counting Xid events (its start, or NVML's re-initialisation): "
    "nvidia_gpu_xid_errors_total counts from then. Absent while no Xid events are watched.",
    X,
)
HOST_PID_NAMESPACE = Metric(
    "kube_gpu_exporter_host_pid_namespace",
    G,
    "",
    "1 if the exporter shares the host's PID namespace (hostPID), so NVML lists every "
    "container's processes; 0 if NVML lists only its own namespace's (none of the workloads').",
    X,
)
COLLECTIONS = Metric(
    "kube_gpu_exporter_collections_total", C, "", "Collection cycles completed.", X
)
POD_RESOURCES_UP = Metric(
    "kube_gpu_exporter_pod_resources_up",
    G,
    "",
    "1 if the last call to the kubelet's pod-resources API succeeded, 0 if not.",
    X,
)
POD_RESOURCES_LAST_SUCCESS = Metric(
    "kube_gpu_exporter_pod_resources_last_success_timestamp_seconds",
    G,
    "seconds",
    "Unix time of the last successful pod-resources List.",
    X,
)
UNMAPPED_DEVICES = Metric(
    "kube_gpu_exporter_unmapped_device_ids",
    G,
    "",
    "Device ids the kubelet reports that match no NVML device, by resource name.",
    X,
    ("resource",),
)
KUBERNETES_API_UP = Metric(
    "kube_gpu_exporter_kubernetes_api_up",
    G,
    "",
    "1 if the watches of this node's pods and ResourceSlices are established, 0 if not "
    "(absent when disabled).",
    X,
)
COLLECTION_ERRORS = Metric(
    "kube_gpu_exporter_collection_errors_total",
    C,
    "",
    "Errors met while collecting, by kind (NVML error name, or init).",
    X,
    ("kind",),
)
