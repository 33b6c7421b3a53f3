"""What the cluster view cannot see in one build: GPU pods going from pending to scheduled
(how long they waited) and GPU pods being disrupted (evicted, preempted, deleted by the taint
manager or with a lost node), counted as the pod watch delivers each pod.

The pod watch calls `observe` with every pod it parses (watches.py), list and events alike:
- a GPU pod first seen waiting for the scheduler is remembered; when it is next seen bound
  to a node, its wait — the PodScheduled condition's transition time minus its creation
  time — is observed once per GPU resource it requests. A pod first seen already bound (at
  start, or created and bound between two events) is not: its wait was not watched;
- a GPU pod with a DisruptionTarget condition is counted once, by its uid, under the reason
  the condition gives; the uid is kept for `DISRUPTED_KEEP_SECONDS`, longer than a pod takes
  to go, so its later events (the DELETED one carries the condition too) are not counted
  again.

The watch thread writes, the view's loop reads (`snapshot`): one lock, uncontended.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Final

from kube_gpu_exporter.exporter.catalog import cluster as k
from kube_gpu_exporter.exporter.cluster.objects import Pod
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings

# Scheduling waits from "bound at once" to "waited a day" (seconds).
WAIT_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
WAIT_BUCKETS_LONG: Final = (7200.0, 21600.0, 86400.0)
BUCKETS: Final = WAIT_BUCKETS + WAIT_BUCKETS_LONG
DISRUPTED_KEEP_SECONDS: Final = 3600.0
# The DisruptionTarget condition's reasons (Kubernetes' pod disruption conditions) → label.
DISRUPTION_REASONS: Final = {
    "EvictionByEvictionAPI": k.EVICTED,  # kubectl drain, the descheduler, an autoscaler
    "PreemptionByScheduler": k.PREEMPTED,  # a higher-priority pod needed the room
    "DeletionByTaintManager": k.TAINT_MANAGER,  # a NoExecute taint it did not tolerate
    "DeletionByPodGC": k.NODE_LOST,  # its node is gone
    "TerminationByKubelet": k.KUBELET,  # node-pressure eviction or node shutdown
}


@dataclass
class Histogram:
    """Cumulative-ready counts per bucket (the last one is +Inf), sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.total += value

    def copy(self) -> Histogram:
        return Histogram(list(self.counts), self.total)


@dataclass(frozen=True)
class TransitionCounts:
    """A copy of what has been counted: waits by (namespace, resource), disruptions by
    (namespace, resource, reason)."""

    waits: dict[tuple[str, str], Histogram]
    disruptions: dict[tuple[str, str, str], int]


class Transitions:
    def __init__(
        self, settings: ClusterSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[str, float] = {}  # pod key → when first seen waiting
        self._disrupted: dict[str, float] = {}  # uid → when counted
        self._waits: dict[tuple[str, str], Histogram] = {}
        self._disruptions: Counter[tuple[str, str, str]] = Counter()

    def observe(self, pod: Pod) -> None:
        gpus = self._settings.gpu_part(pod.requests)
        if not gpus:
            return
        key = f"{pod.namespace}/{pod.name}"
        with self._lock:
            if pod.unscheduled:
                self._waiting.setdefault(key, self._clock())
            elif pod.node_name and self._waiting.pop(key, None) is not None:
                self._observe_wait(pod, gpus)
            if pod.disruption and pod.uid and pod.uid not in self._disrupted:
                self._disrupted[pod.uid] = self._clock()
                reason = DISRUPTION_REASONS.get(pod.disruption, k.DISRUPTED_OTHER)
                for resource in gpus:
                    self._disruptions[(pod.namespace, resource, reason)] += 1

    def _observe_wait(self, pod: Pod, gpus: Iterable[str]) -> None:
        if pod.created_at is None or pod.scheduled_at is None:
            return
        wait = max(0.0, pod.scheduled_at - pod.created_at)
        for resource in gpus:
            self._waits.setdefault((pod.namespace, resource), Histogram()).observe(wait)

    def forget(self, present: Container[str], seen_before: float) -> None:
        """Drop the waiting pods not in `present` (the keys of the pods the watch holds, read
        at `seen_before` on this clock or later; a pod first seen later may not be in it yet),
        and disrupted uids older than DISRUPTED_KEEP_SECONDS. `present` is only asked `in`:
        the watch's own mapping will do, no copy of its keys."""
        horizon = self._clock() - DISRUPTED_KEEP_SECONDS
        with self._lock:
            self._waiting = {
                k: at for k, at in self._waiting.items() if k in present or at >= seen_before
            }
            self._disrupted = {u: at for u, at in self._disrupted.items() if at >= horizon}

    def snapshot(self) -> TransitionCounts:
        with self._lock:
            return TransitionCounts(
                {k: h.copy() for k, h in self._waits.items()}, dict(self._disruptions)
            )
