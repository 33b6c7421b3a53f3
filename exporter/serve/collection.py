"""The collection loop: sample, snapshot and render on a fixed interval, off the event loop.

A scrape never waits for this loop. It serves `latest`, which is replaced atomically at the
end of each cycle; a stalled NVML call only makes `latest` older.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from kube_gpu_exporter.exporter.catalog.errors import COLLECTION_ERROR_KINDS, SYSFS_ERROR_KIND
from kube_gpu_exporter.exporter.exposition.render import Demand, Rendered, render
from kube_gpu_exporter.exporter.snapshot import ExporterState, NodeSample, Snapshot

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.attribution.source import (
        AttributionSource,  # loads gRPC: only when attributing
    )
    from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat
    from kube_gpu_exporter.exporter.pci_bus import PciBus

log = logging.getLogger(__name__)


class Sampler(Protocol):
    def sample(self) -> NodeSample: ...

    def close(self) -> None: ...


class CollectionLoop:
    """Owns the sampler and the one thread that talks to it."""

    def __init__(
        self,
        sampler: Sampler,
        interval: float,
        attribution: AttributionSource | None = None,
        dcgm_compat: DcgmCompat | None = None,
        pci_bus: PciBus | None = None,
    ) -> None:
        self._sampler = sampler
        self._interval = interval
        self._attribution = attribution
        self._dcgm_compat = dcgm_compat  # also render dcgm-exporter's names (a migration aid)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collector")
        # The GPUs on the PCI bus, read in the same cycle as NVML's list they are compared with
        self._pci_bus = pci_bus
        self._errors: Counter[str] = Counter({kind: 0 for kind in COLLECTION_ERROR_KINDS})
        if pci_bus is not None:
            self._errors[SYSFS_ERROR_KIND] = 0
        self._collections = 0
        self._last_success = 0.0
        self._demand = Demand()  # the body variants scrapes ask for: pre-rendered each cycle
        self.latest: Rendered | None = None
        self.ever_succeeded = False
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Ready once NVML has answered, and for as long as the latest cycle says it does."""
        return self.ever_succeeded and self.latest is not None and self.latest.snapshot.node.nvml_up

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="collection")

    async def stop(self, timeout: float = 5.0) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(self._executor, self._sampler.close), timeout
            )
        except TimeoutError:
            log.warning("NVML did not shut down within %.0fs; exiting anyway", timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = time.monotonic()
            try:
                self.latest = await loop.run_in_executor(self._executor, self.cycle)
            except Exception:
                # A bug in one cycle must not end collection; the next cycle may succeed.
                log.exception("collection cycle failed")
                self._errors["other"] += 1
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self._interval - elapsed))

    def cycle(self) -> Rendered:
        """One sample → snapshot → rendered bytes. Runs on the collector thread.

        The duration it reports runs from here to the end of rendering (render.py)."""
        started = time.monotonic()
        node = self._sampler.sample()
        now = time.time()
        self._collections += 1
        self._errors.update(node.errors)
        if node.nvml_up:
            self._last_success = now
            self.ever_succeeded = True
        pci_gpus = None
        if self._pci_bus is not None:
            pci_gpus = self._pci_bus.gpus()
            if pci_gpus is None:
                self._errors[SYSFS_ERROR_KIND] += 1
        attributed = self._attribution.attribute(node.devices) if self._attribution else None
        errors = dict(self._errors) | (attributed.errors_total if attributed else {})
        state = ExporterState(
            collection_duration_seconds=0.0,  # filled in by render()
            last_success_timestamp=self._last_success,
            collections_total=self._collections,
            errors_total=errors,
            pod_resources_up=attributed.pod_resources_up if attributed else None,
            pod_resources_last_success=attributed.pod_resources_last_success if attributed else 0,
            kubernetes_api_up=attributed.kubernetes_api_up if attributed else None,
        )
        attribution = attributed.sample if attributed else None
        snapshot = Snapshot(
            node=node, exporter=state, taken_at=now, attribution=attribution, pci_gpus=pci_gpus
        )
        extra = self._dcgm_compat.families(snapshot) if self._dcgm_compat else ()
        return render(snapshot, extra, demand=self._demand, started=started)
