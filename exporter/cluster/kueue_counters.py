"""Admissions and preemptions of GPU Workloads per ClusterQueue, as this process saw them:
`kube_gpu_queue_admissions_total` and `kube_gpu_queue_preemptions_total`.

Kueue records each as a condition with a transition time: `Admitted=True`, and `Evicted=True`
with reason `Preempted`. One is counted when the Workload watch shows a transition time not
seen before for that Workload (a Workload admitted, preempted and admitted again counts two
admissions) and not older than the process (the second it started): what was admitted before
is history a list shows, not an event this replica saw, and a relist or a repeated event shows
nothing new. Counting by transition time rather than by an event's old and new state also
counts a Workload admitted before its first event reached the watch.

The ClusterQueue is the admission's; a preempted Workload may have lost its admission by the
time the watch sees it, so the queue it was last seen admitted to, else its LocalQueue's,
stands in. `observe` runs in the watch thread, `snapshot` in the loop's: a lock guards both.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from kube_gpu_exporter.exporter.cluster.kueue_workloads import Workload


@dataclass(frozen=True)
class _Seen:
    admitted_at: float | None
    preempted_at: float | None
    cluster_queue: str


class QueueCounters:
    """The two counters by ClusterQueue, from every parsed Workload."""

    def __init__(self, started: float | None = None) -> None:
        self._since = math.floor(time.time() if started is None else started)
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._missing: set[str] = set()  # seen, yet not held at the last `forget_except`
        self._admissions: Counter[str] = Counter()
        self._preemptions: Counter[str] = Counter()

    def observe(self, key: str, workload: Workload | None, queue_of_local: str = "") -> None:
        """A Workload as parsed (None: finished or no longer asking GPUs: forgotten).
        `queue_of_local`: the ClusterQueue its LocalQueue feeds, "" when not known."""
        with self._lock:
            if workload is None:
                self._seen.pop(key, None)
                return
            before = self._seen.get(key, _Seen(None, None, ""))
            queue = workload.cluster_queue or before.cluster_queue or queue_of_local
            if self._new(workload.admitted_at, before.admitted_at):
                self._admissions[queue] += 1
            if self._new(workload.preempted_at, before.preempted_at):
                self._preemptions[queue] += 1
            self._seen[key] = _Seen(
                workload.admitted_at or before.admitted_at,
                workload.preempted_at or before.preempted_at,
                queue,
            )

    def _new(self, at: float | None, seen: float | None) -> bool:
        return at is not None and at != seen and at >= self._since

    def forget_except(self, held: Collection[str]) -> None:
        """Forgets the Workloads no longer held (deleted): their transitions are counted.
        One missing twice in a row: the watch observes an object before it stores it, so one
        just observed may not be held yet, and forgetting it would count it again."""
        with self._lock:
            missing = {key for key in self._seen if key not in held}
            for key in missing & self._missing:
                del self._seen[key]
            self._missing = missing - self._missing

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        """(admissions, preemptions) by ClusterQueue so far."""
        with self._lock:
            return dict(self._admissions), dict(self._preemptions)
