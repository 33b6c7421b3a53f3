"""The action a GPU needs now, from what NVML says of it: one series per asking reading.

The driver's recovery action (R570+), a pending row remapping and a failed one each answer
"what must be done to this GPU" in their own terms; nvidia_gpu_action_required puts them in the
words of NVIDIA's Xid catalog (reset_gpu, reboot, ...) so that one query, one dashboard panel or
one node condition reads them all. "Nothing" is said only where the recovery action was read
and is NONE; where NVML cannot say, the GPU has no series at all: unknown, never healthy.

Xids are not a source here: the exporter counts them since it began watching and cannot tell
when their action was taken; the Xid alerts read them over a window (docs/xid-catalog.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kube_gpu_exporter.exporter import catalog as c

# nvmlGpuRecoveryAction_t (NVML_GPU_RECOVERY_ACTION_*) → the action, in the Xid catalog's words
# where it has them; 0 (NONE) is "nothing needed".
RECOVERY_ACTIONS: Final[Mapping[int, str]] = {
    1: "reset_gpu",  # GPU_RESET
    2: "reboot",  # NODE_REBOOT
    3: "drain_p2p",  # DRAIN_P2P
    4: "drain_and_reset",  # DRAIN_AND_RESET
    5: "recover_imex_domain",  # RECOVER_IMEX_DOMAIN
    6: "bus_reset",  # BUS_RESET
    7: "system_reboot",  # SYSTEM_REBOOT
}
NONE: Final = ("none", "nvml")


def actions(values: Mapping[str, float]) -> tuple[tuple[str, str], ...]:
    """(action, source) for each reading of a GPU's `values` that asks for an action; NONE
    where none asks and the recovery action was read; () where NVML cannot say."""
    recovery = values.get(c.RECOVERY_ACTION.name)
    asks: list[tuple[str, str]] = []
    if recovery:
        code = int(recovery)
        asks.append((RECOVERY_ACTIONS.get(code, f"recovery_action_{code}"), "recovery_action"))
    if values.get(c.ROW_REMAP_PENDING.name):
        asks.append(("reset_gpu", "row_remap_pending"))
    if values.get(c.ROW_REMAP_FAILED.name):
        asks.append(("rma", "row_remap_failed"))
    if not asks and recovery is not None:
        return (NONE,)
    return tuple(asks)
