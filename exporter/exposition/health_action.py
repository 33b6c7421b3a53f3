"""The action a GPU needs now, from what NVML says of it: one series per asking source.

The driver's recovery action (R570+), a pending row remapping, a failed one and an Xid whose
catalog action is still owed each answer "what must be done to this GPU" in their own terms;
nvidia_gpu_action_required puts them in the words of NVIDIA's Xid catalog (reset_gpu, reboot,
...) so that one query, one dashboard panel or one node condition reads them all. "Nothing" is
said only where the recovery action was read and is NONE and nothing else asks; where NVML
cannot say, the GPU has no series at all: unknown, never healthy.

An Xid is an event, not a state: what it asks is held by health_memory.py until the GPU shows
it was acted on (docs/xid-catalog.md). Everything here is pure, so the node conditions and the
exposition read the same answer from the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import BY_CODE
from kube_gpu_exporter.exporter.snapshot import HeldXid

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
XID_SOURCE: Final = "xid"

# The catalog's action classes an Xid holds on its GPU, by rank: a reboot also resets, so it
# displaces a held reset and not the other way round. RESTART_APP is the workload's (the GPU
# goes on), IGNORE and investigate ask nothing of the GPU now, and a WORKFLOW's action is what
# its other readings say (recovery action, row remapping), which are sources of their own.
XID_HELD_RANK: Final[Mapping[str, int]] = {"reset_gpu": 1, "reboot": 2}


def xid_action(code: int) -> str | None:
    """The action an Xid code holds on its GPU (`reset_gpu`, `reboot`), None if it holds none."""
    xid = BY_CODE.get(code)
    action = xid.action if xid is not None else None
    return action if action in XID_HELD_RANK else None


def hold(held: HeldXid | None, new_codes: Iterable[int], now: float) -> HeldXid | None:
    """What a GPU owes after Xid events of `new_codes` seen at `now`: the first Xid of the most
    pressing action; an Xid of the same or a lesser action keeps the held one and its time."""
    for code in new_codes:
        action = xid_action(code)
        if action is None:
            continue
        if held is None or XID_HELD_RANK[action] > XID_HELD_RANK.get(held.action, 0):
            held = HeldXid(code, action, now)
    return held


def actions(values: Mapping[str, float], xid: HeldXid | None = None) -> tuple[tuple[str, str], ...]:
    """(action, source) for each reading of a GPU's `values`, and the held Xid, that asks for
    an action; NONE where none asks and the recovery action was read; () where NVML cannot
    say. The held Xid's code is its series' `xid` label (health_labels)."""
    recovery = values.get(c.RECOVERY_ACTION.name)
    asks: list[tuple[str, str]] = []
    if recovery:
        code = int(recovery)
        asks.append((RECOVERY_ACTIONS.get(code, f"recovery_action_{code}"), "recovery_action"))
    if values.get(c.ROW_REMAP_PENDING.name):
        asks.append(("reset_gpu", "row_remap_pending"))
    if values.get(c.ROW_REMAP_FAILED.name):
        asks.append(("rma", "row_remap_failed"))
    if xid is not None:
        asks.append((xid.action, XID_SOURCE))
    if not asks and recovery is not None:
        return (NONE,)
    return tuple(asks)


def health_labels(action: str, source: str, xid: HeldXid | None) -> dict[str, str]:
    """The labels of one nvidia_gpu_action_required series: `xid` on the Xid's alone."""
    labels = {"action": action, "source": source}
    if source == XID_SOURCE and xid is not None:
        labels["xid"] = str(xid.code)
    return labels
