"""What a GPU's needed action remembers across collection cycles: held Xids, and since when.

An Xid is an event: its counter rises once and the GPU says nothing more of it, so the action
the catalog gives it (a reset, a reboot) is held here from the cycle that sees the rise until
the GPU shows it was acted on. NVML tells no reset apart from an idle GPU, so what counts as
acted on is what the exporter can observe (docs/xid-catalog.md says why, and the limits):

- the NVML session ends (NVML down, a new Xid watch: the driver was reloaded or upgraded, or
  the exporter restarted, which forgets everything anyway): a reset or reboot ends it too;
- the GPU is lost (GPU_IS_LOST) and answers again: only a reset or a reboot brings it back.

"Since" is the unix time this memory first saw each (action, source) a GPU serves, kept while
the series is served and forgotten with it; a held Xid's is the time its rise was seen.
One instance per collection loop, called from its one thread.
"""

from __future__ import annotations

from collections.abc import Mapping

from kube_gpu_exporter.exporter.exposition.health_action import XID_SOURCE, actions, hold
from kube_gpu_exporter.exporter.snapshot import ActionMemory, HeldXid, NodeSample


class HealthMemory:
    """Feeds on each cycle's NodeSample; answers each GPU's ActionMemory for its snapshot."""

    def __init__(self) -> None:
        self._session: float | None = None  # the Xid watch the counts below count from
        self._counts: dict[str, dict[int, int]] = {}  # uuid → Xid counts at the last cycle
        self._held: dict[str, HeldXid] = {}
        self._lost: set[str] = set()  # uuids seen not answering since their last answer
        self._since: dict[tuple[str, str, str], float] = {}  # (uuid, action, source) → time

    def update(self, node: NodeSample, now: float) -> Mapping[str, ActionMemory]:
        """This cycle's memory of every answering GPU of `node`, read at `now`."""
        if not node.nvml_up or node.xid_watch_start != self._session:
            self._forget()
            self._session = node.xid_watch_start if node.nvml_up else None
        present = {d.identity.uuid for d in node.devices}
        for uuid in set(self._counts) - present:
            self._counts.pop(uuid, None)
            self._held.pop(uuid, None)
        self._lost &= present
        since: dict[tuple[str, str, str], float] = {}
        result: dict[str, ActionMemory] = {}
        for device in node.devices:
            uuid = device.identity.uuid
            before = self._counts.get(uuid, {})
            rises = [x for x, n in sorted(device.xid_counts.items()) if n > before.get(x, 0)]
            self._counts[uuid] = dict(device.xid_counts)
            if not device.up:
                self._lost.add(uuid)
                continue
            if uuid in self._lost:  # it answers again: it was reset, or its node rebooted
                self._lost.discard(uuid)
                self._held.pop(uuid, None)
            held = hold(self._held.get(uuid), rises, now)
            if held is not None:
                self._held[uuid] = held
            first: dict[tuple[str, str], float] = {}
            for action, source in actions(device.values, held):
                key = (uuid, action, source)
                start = held.since if source == XID_SOURCE and held is not None else now
                since[key] = first[(action, source)] = self._since.get(key, start)
            result[uuid] = ActionMemory(held, first)
        self._since = since
        return result

    def _forget(self) -> None:
        self._counts.clear()
        self._held.clear()
        self._lost.clear()
        self._since.clear()
