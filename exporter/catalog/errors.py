"""Every `kind` of kube_gpu_exporter_collection_errors_total, listed once.

Kinds are pre-created at 0 so that `rate()` and `increase()` work from the first scrape, and
the troubleshooting guide and alerts name them, so each source's list lives here rather than
beside the code that counts it. The NVML codes are nvml.h's `nvmlReturn_t` values (a unit
test holds them equal to pynvml's constants); the catalog itself never loads NVML.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, get_args

# NVML return code → kind; any other code of a failed reading counts as "other".
NVML_ERROR_KINDS: Final[Mapping[int, str]] = MappingProxyType(
    {
        15: "gpu_is_lost",  # NVML_ERROR_GPU_IS_LOST
        999: "unknown",  # NVML_ERROR_UNKNOWN
        10: "timeout",  # NVML_ERROR_TIMEOUT
        4: "no_permission",  # NVML_ERROR_NO_PERMISSION
        16: "reset_required",  # NVML_ERROR_RESET_REQUIRED
        # Session-level codes answered by one reading while the rest of NVML answers: that
        # reading is absent; the session is re-initialised ("init") only when every device
        # or a node-wide call answers one (nvml/sampler.py).
        1: "session",  # NVML_ERROR_UNINITIALIZED
        9: "session",  # NVML_ERROR_DRIVER_NOT_LOADED
        18: "session",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        12: "session",  # NVML_ERROR_LIBRARY_NOT_FOUND
    }
)

# A collection cycle that has not finished within --collector.stall-timeout: an NVML call
# that does not return. Counted once per stall; NVML is reported down until the call returns.
STALLED_ERROR_KIND: Final = "stalled"

# The collection loop's own kinds: NVML could not start ("init"), a reading failed (by NVML
# code), a cycle stalled, or a cycle raised ("other").
COLLECTION_ERROR_KINDS: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(("init", *NVML_ERROR_KINDS.values(), STALLED_ERROR_KIND, "other"))
)

# A failed call to the kubelet's pod-resources API, counted as `pod_resources_<kind>`;
# `allocatable_refused`: GetAllocatableResources alone refused, for another reason than an old
# kubelet's (the allocations are still good, the advertised counts unknown).
PodResourcesErrorKind = Literal[
    "unavailable", "timeout", "too_large", "rate_limited", "allocatable_refused", "other"
]
POD_RESOURCES_ERROR_KINDS: Final[tuple[PodResourcesErrorKind, ...]] = get_args(
    PodResourcesErrorKind
)

# A failed list or watch of the API server, counted as `kubernetes_<kind>` (pods) and
# `kubernetes_resourceslices_<kind>` (ResourceSlices).
KUBERNETES_ERROR_KINDS: Final[tuple[str, ...]] = (
    "gone",
    "server_error",
    "timeout",
    "connection",
    "other",
)

# A failed read or write of the exporter's own Node by --health.node-conditions or
# --health.node-taint, counted as `node_health_<kind>`: refused by RBAC (403), no such Node
# (404), the taints changed under every retry (409), a 5xx or 429, a timeout, no connection,
# anything else. Counted once per attempt; attempts back off while they fail.
NODE_HEALTH_ERROR_KINDS: Final[tuple[str, ...]] = (
    "forbidden",
    "not_found",
    "conflict",
    "server_error",
    "timeout",
    "connection",
    "other",
)

# The PCI device list under --path.sysfs could not be read (nvidia_gpu_node_pci_gpus is then
# absent): counted once per cycle, and present at 0 only while that reading is on.
SYSFS_ERROR_KIND: Final = "sysfs"
