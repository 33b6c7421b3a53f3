"""The collection loop: sample, snapshot and render on a fixed interval, off the event loop.

A scrape never waits for this loop. It serves `latest`, which is replaced atomically at the
end of each cycle. A cycle stuck in an NVML call that does not return is noticed after the
stall timeout: NVML is then reported down (`nvml_up` 0, `/readyz` 503, one `stalled` error)
over the last data, until the call returns. The thread that talks to NVML is a daemon, so a
stuck call cannot hold the process past SIGTERM either.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from kube_gpu_exporter.exporter.catalog.errors import (
    COLLECTION_ERROR_KINDS,
    STALLED_ERROR_KIND,
    SYSFS_ERROR_KIND,
)
from kube_gpu_exporter.exporter.exposition.health_memory import HealthMemory
from kube_gpu_exporter.exporter.exposition.render import Demand, Rendered, render
from kube_gpu_exporter.exporter.serve.landing import device_section
from kube_gpu_exporter.exporter.snapshot import ExporterState, NodeSample, Snapshot

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.attribution.source import (
        AttributionSource,  # loads gRPC: only when attributing
    )
    from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat
    from kube_gpu_exporter.exporter.pci_bus import PciBus

log = logging.getLogger(__name__)

# A cycle that has not finished within this many intervals, and at least STALL_MIN_SECONDS,
# is stalled unless --collector.stall-timeout says otherwise. A healthy cycle takes
# milliseconds; the floor leaves room for a slow nvmlInit (seconds per GPU without persistence
# mode) and keeps a short interval from calling a busy driver stalled.
STALL_INTERVALS = 3
STALL_MIN_SECONDS = 30.0
# How long SIGTERM waits for NVML to shut down; with the HTTP server's drain it stays
# under the 5 s the process aims to exit in.
SHUTDOWN_SECONDS = 3.0


def default_stall_timeout(interval: float) -> float:
    return max(STALL_INTERVALS * interval, STALL_MIN_SECONDS)


class Sampler(Protocol):
    # True for a scenario played instead of NVML: its readings are invented.
    simulated: bool

    def sample(self) -> NodeSample: ...

    def close(self) -> None: ...


class Worker:
    """One daemon thread running what it is given, in order.

    Not a ThreadPoolExecutor: the interpreter joins those threads at exit, so a call stuck in
    the driver held the process past SIGTERM for as long as the call lasted (forever on a hung
    GPU). A daemon thread is left behind instead. Started on first use.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        future: Future[Any] = Future()
        self._queue.put((call, future))
        return future

    def stop(self) -> None:
        """Let the thread end once it is free; it never runs anything submitted later."""
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            call, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine
                future.set_exception(exc)
            else:
                future.set_result(result)


class CollectionLoop:
    """Owns the sampler and the one thread that talks to it."""

    def __init__(
        self,
        sampler: Sampler,
        interval: float,
        attribution: AttributionSource | None = None,
        dcgm_compat: DcgmCompat | None = None,
        pci_bus: PciBus | None = None,
        stall_timeout: float | None = None,
        error_sources: Sequence[Callable[[], Mapping[str, int]]] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._sampler = sampler
        # Every Unix time a snapshot carries (its own, the last success, health's "since")
        # is read here, so that a render can be pinned to one instant (fleet_renders.py)
        self._wall_clock = wall_clock
        # Counts of parts beside collection (node_health.py), merged into each cycle's errors
        self._error_sources = tuple(error_sources)
        self._interval = interval
        self._stall_timeout = stall_timeout or default_stall_timeout(interval)
        self._attribution = attribution
        self._dcgm_compat = dcgm_compat  # also render dcgm-exporter's names (a migration aid)
        self._worker = Worker("collector")
        # The GPUs on the PCI bus, read in the same cycle as NVML's list they are compared with
        self._pci_bus = pci_bus
        # Counted on the collector thread, and on the event loop for stalls and failed cycles
        self._errors_lock = threading.Lock()
        self._errors: Counter[str] = Counter({kind: 0 for kind in COLLECTION_ERROR_KINDS})
        if pci_bus is not None:
            self._errors[SYSFS_ERROR_KIND] = 0
        self._collections = 0
        self._last_success = 0.0
        self._demand = Demand()  # the body variants scrapes ask for: pre-rendered each cycle
        self._health = HealthMemory()  # held Xids and "since": kept on the collector thread
        self.latest: Rendered | None = None
        self.ever_succeeded = False
        self.stalled = False  # a cycle has been stuck for longer than the stall timeout
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Ready once NVML has answered, and for as long as the latest cycle says it does and
        no cycle is stuck in it."""
        latest = self.latest
        return (
            self.ever_succeeded
            and not self.stalled
            and latest is not None
            and latest.snapshot.node.nvml_up
        )

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def not_ready_reason(self) -> str:
        return "NVML has not answered yet" if not self.ever_succeeded else "NVML is not answering"

    def landing_section(self) -> str:
        """The node's devices, for the landing page."""
        return device_section(self.latest)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="collection")

    async def stop(self, timeout: float = SHUTDOWN_SECONDS) -> bool:
        """Stop collecting and shut NVML down. False if it did not within `timeout`: a call
        stuck in the driver holds the collector thread, which is then left behind."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        closing = asyncio.wrap_future(self._worker.submit(self._sampler.close))
        try:
            await asyncio.wait_for(closing, timeout)
        except TimeoutError:
            log.warning(
                "NVML did not shut down within %.0fs (a call is stuck in the driver); "
                "exiting without it",
                timeout,
            )
            return False
        except Exception:
            log.exception("shutting NVML down failed")
        finally:
            self._worker.stop()
        return True

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            cycle = asyncio.wrap_future(self._worker.submit(self.cycle))
            done, _ = await asyncio.wait({cycle}, timeout=self._stall_timeout)
            if not done:
                self._stall(time.monotonic() - started)
                await asyncio.wait({cycle})
            try:
                self.latest = cycle.result()
            except Exception:
                # A bug in one cycle must not end collection; the next cycle may succeed.
                log.exception("collection cycle failed")
                with self._errors_lock:
                    self._errors["other"] += 1
            if self.stalled:
                self.stalled = False
                log.info("NVML answers again after %.0fs", time.monotonic() - started)
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self._interval - elapsed))

    def _stall(self, seconds: float) -> None:
        """NVML has not answered for `seconds`: say so over the last data (on the event loop)."""
        self.stalled = True
        with self._errors_lock:
            self._errors[STALLED_ERROR_KIND] += 1
            errors = dict(self._errors)
        log.warning(
            "NVML has not answered for %.0fs (a call is stuck in the driver); reporting NVML "
            "down and serving the last data until it returns",
            seconds,
        )
        last = self.latest
        if last is None:  # stuck before any cycle ended (nvmlInit itself)
            state = ExporterState(
                0.0,
                self._last_success,
                self._collections,
                errors,
                simulated=self._sampler.simulated,
            )
            snapshot = Snapshot(NodeSample(nvml_up=False), state, taken_at=self._wall_clock())
            self.latest = Rendered(snapshot, demand=self._demand)
            return
        snap = last.snapshot
        stalled = {STALLED_ERROR_KIND: errors[STALLED_ERROR_KIND]}
        state = dataclasses.replace(
            snap.exporter, errors_total={**snap.exporter.errors_total, **stalled}
        )
        node = dataclasses.replace(snap.node, nvml_up=False)
        self.latest = last.with_snapshot(dataclasses.replace(snap, node=node, exporter=state))

    def cycle(self) -> Rendered:
        """One sample → snapshot → rendered bytes. Runs on the collector thread.

        The duration it reports runs from here to the end of rendering (render.py)."""
        started = time.monotonic()
        node = self._sampler.sample()
        now = self._wall_clock()
        self._collections += 1
        if node.nvml_up:
            self._last_success = now
            self.ever_succeeded = True
        pci_gpus = None
        with self._errors_lock:
            self._errors.update(node.errors)
        if self._pci_bus is not None:
            pci_gpus = self._pci_bus.gpus()
            if pci_gpus is None:
                with self._errors_lock:
                    self._errors[SYSFS_ERROR_KIND] += 1
        attributed = self._attribution.attribute(node.devices) if self._attribution else None
        with self._errors_lock:
            errors = dict(self._errors)
        errors |= attributed.errors_total if attributed else {}
        for source in self._error_sources:
            errors |= source()
        state = ExporterState(
            collection_duration_seconds=0.0,  # filled in by render()
            last_success_timestamp=self._last_success,
            collections_total=self._collections,
            errors_total=errors,
            pod_resources_up=attributed.pod_resources_up if attributed else None,
            pod_resources_last_success=attributed.pod_resources_last_success if attributed else 0,
            kubernetes_api_up=attributed.kubernetes_api_up if attributed else None,
            simulated=self._sampler.simulated,
        )
        attribution = attributed.sample if attributed else None
        snapshot = Snapshot(
            node=node,
            exporter=state,
            taken_at=now,
            attribution=attribution,
            pci_gpus=pci_gpus,
            health=self._health.update(node, now),
        )
        extra = self._dcgm_compat.families(snapshot) if self._dcgm_compat else ()
        return render(snapshot, extra, demand=self._demand, started=started)
