"""The node's GPU health as one Node condition, `GPUHealthy`, from a snapshot: what
`serve --health.node-conditions` writes on its own Node (node_health.py).

One condition type for every GPU of the node, as node-problem-detector's conditions are one per
problem kind: Karpenter's node repair, NVSentinel-like controllers and plain `kubectl get
nodes -o wide` read a fixed type, not one per GPU. Its content comes from health_action.py, the
same answer nvidia_gpu_action_required serves, so the metric and the condition never disagree:

- True only where NVML read every whole GPU's recovery action and none asks for anything;
- False where any GPU asks: the reason is the most severe action asked for, the message names
  each asking GPU, its action and the reading (or the Xid the collection loop holds) that asked;
- Unknown where NVML cannot say for some GPU (an old driver without the recovery action, a GPU
  that does not answer, NVML down, no GPU at all): never True on a guess.

MIG instances are left out: the recovery action is their parent GPU's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kube_gpu_exporter.exporter.exposition.health_action import XID_SOURCE, actions
from kube_gpu_exporter.exporter.snapshot import ActionMemory, HeldXid, Snapshot

CONDITION_TYPE: Final = "GPUHealthy"
# The condition's reason for each action (health_action.py's words), most severe last: the
# reason of a node whose GPUs ask for several is the last one asked. An action not listed
# (a new recovery action code, a source added later) ranks with reset_gpu and is named
# from its words.
REASONS: Final = {
    "drain_p2p": "DrainP2P",
    "recover_imex_domain": "RecoverIMEXDomain",
    "reset_gpu": "ResetGPU",
    "bus_reset": "ResetBus",
    "drain_and_reset": "DrainAndResetGPU",
    "reboot": "RebootNode",
    "system_reboot": "RebootSystem",
    "rma": "ReplaceGPU",
}
_RANK: Final = {action: rank for rank, action in enumerate(REASONS)}
_UNLISTED_RANK: Final = _RANK["reset_gpu"]
# Actions that take the GPU out of service until someone acts: the taint's (node_health.py).
# Draining peer-to-peer work or an IMEX domain leaves the GPU usable by other pods.
NEEDS_RESET_RANK: Final = _RANK["reset_gpu"]
MAX_MESSAGE: Final = 1024  # characters: a condition is read in `kubectl describe node`
NO_MEMORY: Final = ActionMemory()  # a GPU the collection loop remembers nothing of


@dataclass(frozen=True)
class GpuHealth:
    """The condition's content: status "True", "False" or "Unknown", reason and message; and
    whether some GPU needs a reset or more (the taint's state)."""

    status: str
    reason: str
    message: str
    needs_reset: bool = False


def reason_of(action: str) -> str:
    """`reset_gpu` → ResetGPU; an unlisted action in CamelCase (`restart_bm` → RestartBm)."""
    return REASONS.get(action) or "".join(word.capitalize() for word in action.split("_"))


def rank_of(action: str) -> int:
    return _RANK.get(action, _UNLISTED_RANK)


def gpu_health(snapshot: Snapshot) -> GpuHealth:
    """The node's GPUHealthy condition from one snapshot (above)."""
    node = snapshot.node
    if not node.nvml_up:
        return GpuHealth("Unknown", "NVMLNotAnswering", "NVML does not answer on this node")
    gpus = [d for d in node.devices if not d.identity.parent_uuid]
    if not gpus:
        return GpuHealth("Unknown", "NoGPUs", "NVML lists no GPU on this node")
    asking: list[tuple[str, str, str]] = []  # (uuid, action, source)
    unknown: list[str] = []
    for device in sorted(gpus, key=lambda d: d.identity.uuid):
        uuid = device.identity.uuid
        held = snapshot.health.get(uuid, NO_MEMORY).xid
        found = actions(device.values, held) if device.up else ()
        if not found:
            unknown.append(uuid)
        asking += [
            (uuid, action, _source(source, held)) for action, source in found if action != "none"
        ]
    if asking:
        worst = max(asking, key=lambda ask: rank_of(ask[1]))[1]
        parts = [f"{uuid}: {action} ({source})" for uuid, action, source in asking]
        if unknown:
            parts.append(f"unknown: {', '.join(unknown)}")
        needs_reset = any(rank_of(action) >= NEEDS_RESET_RANK for _, action, _ in asking)
        return GpuHealth("False", reason_of(worst), _cut("; ".join(parts)), needs_reset)
    if unknown:
        message = f"NVML cannot say what {len(unknown)} of {len(gpus)} GPUs need: "
        return GpuHealth("Unknown", "ActionUnknown", _cut(message + ", ".join(unknown)))
    return GpuHealth(
        "True", "NoActionNeeded", f"{len(gpus)} GPUs: NVML's recovery action is none on each"
    )


def _source(source: str, held: HeldXid | None) -> str:
    """The reading that asked, as the message names it: `recovery_action`, `xid 79`."""
    return f"xid {held.code}" if source == XID_SOURCE and held is not None else source


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
