"""What the cluster view is told rather than reads from the API: which resources are GPUs,
which node labels name a GPU type, and the tolerations a standard GPU pod carries.

The defaults follow the NVIDIA device plugin and GPU feature discovery (GFD); every one can
be changed, because clusters rename resources (`nvidia.com/gpu-h100`), label GPU types their
own way (`gpu-type=a100`) and taint GPU nodes with their own keys.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from kube_gpu_exporter.exporter.cluster.objects import Toleration
from kube_gpu_exporter.exporter.cluster.quantities import CPU, MEMORY
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS

PRODUCT_LABEL: Final = "nvidia.com/gpu.product"  # GFD: e.g. NVIDIA-H100-80GB-HBM3
# Node labels whose value names the GPU model: a pod selecting on one of them asks for a GPU
# type, and a node excluded by one is "the wrong GPU", not "the wrong node".
DEFAULT_GPU_TYPE_LABELS: Final = (
    PRODUCT_LABEL,
    "nvidia.com/gpu.family",  # GFD: hopper, ampere
    "nvidia.com/gpu.machine",  # GFD: the machine type, e.g. DGX-H100
    "cloud.google.com/gke-accelerator",  # GKE: nvidia-h100-80gb
    "k8s.amazonaws.com/accelerator",  # EKS (older AMIs): nvidia-tesla-v100
)
# Labels that mark a node as a GPU node even when it advertises no GPU (a device plugin that
# is down, or not yet started): the evidence for `not_advertised`.
GPU_NODE_LABELS: Final = (
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.count",
    PRODUCT_LABEL,
    "cloud.google.com/gke-accelerator",
)
# The GPU Operator and most managed node pools taint GPU nodes nvidia.com/gpu:NoSchedule.
DEFAULT_STANDARD_TOLERATIONS: Final = (
    Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
)
# The smallest pod worth placing: a node without this much CPU and memory left cannot take
# a GPU pod, whatever its free GPUs.
DEFAULT_MINIMAL_POD: Final[Mapping[str, int]] = MappingProxyType({CPU: 100, MEMORY: 128 << 20})


@dataclass(frozen=True)
class ClusterSettings:
    """How the view reads the cluster (see the module docstring for the defaults' sources).

    - `gpu_resources`: shell patterns of the extended resources that are GPUs;
    - `gpu_type_labels`: node label keys whose value is a GPU type;
    - `product_label`: the label capacity is grouped by (`gpu_product` in metrics);
    - `standard_tolerations`: what a typical GPU pod tolerates, for "could schedule now";
    - `minimal_pod`: CPU (millicores) and memory (bytes) a node must still have to count.
    """

    gpu_resources: tuple[str, ...] = DEFAULT_RESOURCE_PATTERNS
    gpu_type_labels: tuple[str, ...] = DEFAULT_GPU_TYPE_LABELS
    product_label: str = PRODUCT_LABEL
    standard_tolerations: tuple[Toleration, ...] = DEFAULT_STANDARD_TOLERATIONS
    minimal_pod: Mapping[str, int] = field(default_factory=lambda: DEFAULT_MINIMAL_POD, hash=False)

    def is_gpu_resource(self, name: str) -> bool:
        return _matches(name, self.gpu_resources)

    def gpu_part(self, resources: Mapping[str, int]) -> dict[str, int]:
        """The GPU resources of a resource list (requests or allocatable), zeros included."""
        return {name: amount for name, amount in resources.items() if self.is_gpu_resource(name)}


@functools.lru_cache(maxsize=4096)
def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Cached: every pod and node asks the same few names again and again."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


DEFAULT_SETTINGS: Final = ClusterSettings()
