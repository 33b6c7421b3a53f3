"""Attribution and capacity metrics: which container holds which device, and what is free.

Pod series carry the device's identity labels plus `namespace`, `pod` and `container`; node
series describe the node's capacity by resource name.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.catalog.metric import Metric, MetricType, Scope

G, C = MetricType.GAUGE, MetricType.COUNTER
P, N, D = Scope.POD, Scope.NODE, Scope.DEVICE

# The DRA driver whose claims name NVIDIA devices; its unmapped claims are counted under
# resource="dra/<driver>".
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"

ALLOCATION_INFO = Metric(
    "nvidia_gpu_allocation_info",
    G,
    "",
    "1 per device allocated to a container, from the kubelet's pod-resources API.",
    P,
    ("resource", "sharing"),
)
POD_UTILIZATION = Metric(
    "nvidia_gpu_pod_utilization_ratio",
    G,
    "ratio",
    "The container's share of device time: the device's utilization when it holds a whole GPU "
    "alone, its MIG instance's GPM engine activity (Hopper+), the SM utilization of its own "
    "processes on a shared device.",
    P,
)
POD_MEMORY_USED = Metric(
    "nvidia_gpu_pod_memory_used_bytes",
    G,
    "bytes",
    "Framebuffer the container uses: the device's when it holds it alone, its own processes' "
    "on a shared device.",
    P,
)
NODE_DRIVER_GPUS = Metric(
    "nvidia_gpu_node_driver_gpus", G, "", "Whole GPUs the NVIDIA driver sees on the node.", N
)
NODE_PCI_GPUS = Metric(
    "nvidia_gpu_node_pci_gpus",
    G,
    "",
    "NVIDIA GPUs on the node's PCI bus (vendor 0x10de, display/3D controller class), whether or "
    "not the driver initialised them.",
    N,
)
NODE_ADVERTISED = Metric(
    "nvidia_gpu_node_advertised_devices",
    G,
    "",
    "Devices the kubelet advertises as allocatable, by resource name (device plugin or DRA).",
    N,
    ("resource",),
)
NODE_ALLOCATED = Metric(
    "nvidia_gpu_node_allocated_devices",
    G,
    "",
    "Devices allocated to running containers, by resource name.",
    N,
    ("resource",),
)
KUBELET_ALLOCATABLE = Metric(
    "nvidia_gpu_kubelet_allocatable",
    G,
    "",
    "1 where the kubelet offers the device for allocation (pod-resources "
    "GetAllocatableResources lists an id of it), 0 where it lists none: its device plugin "
    "marked it Unhealthy, or no plugin serves it. Absent where the kubelet cannot say and on "
    "a GPU in MIG mode (its instances are the devices).",
    D,
)
NODE_FREE_GPUS = Metric(
    "nvidia_gpu_node_free_gpus",
    G,
    "",
    "Whole GPUs on which nothing is allocated (no container, MIG instance or replica).",
    N,
)
