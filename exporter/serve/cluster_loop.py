"""The cluster view's loop: on its own interval, bring the view up to date with what the
watches changed, classify the pending GPU pods, build the families and render them, off the
event loop.

As with the node's collection loop, a scrape never waits for this: it serves `latest`,
replaced by one assignment at the end of each cycle. The view is updated change by change
(cluster/incremental_view.py) and built whole only after a (re)list: pure CPU over slim
values, run in a daemon thread (collection.py's `Worker`) so the event loop keeps answering
scrapes meanwhile. Metrics are served from the
first cycle after every watch has listed once; before that /metrics and /readyz answer 503,
since a half-listed cluster would report pods pending on nodes the view does not know yet.

The objects a list makes (a slim value per pod and node: over a million Python objects on a
50,000-pod cluster) live as long as the watch, and each cycle makes some 100,000 more that
live one cycle; every full collection of the garbage collector walked them, holding the GIL
while a scrape waited (how long: bench/README.md, "Figures behind the code's choices"). The
process therefore runs young collections only and
freezes what lives after each cycle (frozen_heap.py); a full collection runs after a
(re)list and when the heap really grows. Frozen objects are still freed by reference
counting when the watch or the next cycle replaces them.

The process's GIL switch interval, which decides how long a scrape waits while a cycle runs,
is set by the command (cluster_app.py), not here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from kube_gpu_exporter.exporter.cluster.incremental_view import IncrementalView
from kube_gpu_exporter.exporter.cluster.kueue_view import KueueJudge
from kube_gpu_exporter.exporter.cluster.quota_events import QuotaRejections
from kube_gpu_exporter.exporter.cluster.settings import ClusterSettings
from kube_gpu_exporter.exporter.cluster.transitions import Transitions
from kube_gpu_exporter.exporter.cluster.watches import TakenObjects
from kube_gpu_exporter.exporter.exposition.cluster_families import (
    ClusterState,
    WatchHealth,
    cluster_families,
)
from kube_gpu_exporter.exporter.exposition.render import Demand, FamiliesBody
from kube_gpu_exporter.exporter.serve.collection import Worker
from kube_gpu_exporter.exporter.serve.frozen_heap import FrozenHeap
from kube_gpu_exporter.exporter.serve.landing import CLUSTER_SECTION

log = logging.getLogger(__name__)

TEXT_ACCEPT = ""  # what curl and Prometheus' fallback ask: rendered before publishing


class Watches(Protocol):
    """What the loop reads of the watches (cluster/watches.py's ClusterWatches)."""

    @property
    def listed(self) -> bool: ...

    @property
    def lists(self) -> int: ...

    def take(self) -> TakenObjects: ...

    def up(self) -> dict[str, bool]: ...

    def errors_total(self) -> dict[str, dict[str, int]]: ...


class ClusterLoop:
    """Builds and renders the cluster view every `interval` seconds, with what
    `transitions` counted from the pod watch (read, and pruned, once per cycle) and what
    `rejections` counted from the events watch."""

    def __init__(
        self,
        watches: Watches,
        settings: ClusterSettings,
        interval: float,
        transitions: Transitions | None = None,
        clock: Callable[[], float] = time.time,
        rejections: QuotaRejections | None = None,
    ) -> None:
        self._watches = watches
        self._view = IncrementalView(settings)  # this loop's thread alone updates it
        self._kueue = KueueJudge()  # likewise
        self._interval = interval
        self._transitions = transitions
        self._rejections = rejections
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        # A daemon thread, never joined at exit, so SIGTERM is never held by a long build
        self._worker = Worker("cluster-view")
        self.latest: FamiliesBody | None = None
        self._demand = Demand()  # the body variants scrapes ask for: pre-rendered each cycle
        self._heap = FrozenHeap()
        self._lists_seen = 0  # the watches' lists at the last cycle: more means a (re)list
        self.cycles = 0

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def ready(self) -> bool:
        """Ready once a complete view has been rendered (every resource listed)."""
        return self.latest is not None

    def not_ready_reason(self) -> str:
        return "the nodes, pods and resourcequotas have not all been listed yet"

    def landing_section(self) -> str:
        """What the cluster view serves, for the landing page (it has no devices of its own)."""
        return CLUSTER_SECTION

    def start(self) -> None:
        """Start the cycles; the process's collector set for them (frozen_heap.py)."""
        self._heap.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="cluster-view")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._worker.stop()

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            if self._watches.listed:
                try:
                    self.latest = await asyncio.wrap_future(self._worker.submit(self.cycle))
                except Exception:  # a bug in one cycle must not end the loop
                    log.exception("cluster view cycle failed")
            elapsed = time.monotonic() - started
            wait = self._interval if self.latest is not None else min(self._interval, 0.2)
            await asyncio.sleep(max(0.0, wait - elapsed))

    def cycle(self) -> FamiliesBody:
        """One update → classify → render of the view. Runs off the event loop."""
        started = time.monotonic()
        taken = self._heap.frozen(self._watches.take)
        transitions = None
        if self._transitions is not None:
            self._transitions.forget(taken.pods.held, started)  # keys are namespace/name
            transitions = self._transitions.snapshot()
        view = self._view.update(taken.nodes, taken.pods, taken.quotas)
        taken_kueue = getattr(self._watches, "kueue_objects", None)  # ClusterWatches' only
        kueue = taken_kueue() if taken_kueue is not None else None
        rejected = self._rejections.totals if self._rejections is not None else None
        # health is read after every object is taken, and a watch is up before it publishes
        # a list: a page never shows a list's objects with its watch down
        counts = {
            "nodes": len(taken.nodes.values),
            "pods": len(taken.pods.values),
            "resourcequotas": len(taken.quotas.values),
            "events": self._rejections.events if self._rejections is not None else 0,
            **getattr(self._watches, "kueue_counts", dict)(),
        }
        errors = self._watches.errors_total()
        health = {
            name: WatchHealth(up, errors.get(name, {}), counts.get(name, 0))
            for name, up in self._watches.up().items()
        }
        state = ClusterState(
            view,
            health,
            self._clock(),
            started,
            transitions,
            rejected,
            self._kueue.judge(view, kueue) if kueue is not None else None,
        )
        body = FamiliesBody(list(cluster_families(state)), self._demand)
        body.body(TEXT_ACCEPT, gzipped=False)  # curl's and Prometheus' fallback, always
        body.prerender()  # and what scrapes asked for lately (Prometheus: OpenMetrics, gzip)
        self.cycles += 1
        lists = self._watches.lists
        self._heap.after_cycle(relisted=lists != self._lists_seen)
        self._lists_seen = lists
        return body
