"""Collection cycles run in this process: CPU per cycle and memory over many cycles.

The cycle is the exporter's own `CollectionLoop.cycle()` (NVML sample → snapshot → render of
every body scrapes ask for, gzip included) over the fake NVML, called directly so that its
cost is measured without the HTTP server's or the event loop's. A cycle renders only the
bodies asked for lately, so the bench first asks for those curl and Prometheus 2 and 3 ask
for, plain and gzipped: what the exporter renders each cycle on a scraped node.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from errors import BenchError
from procs import rss_bytes

from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop

WARMUP_CYCLES = 20
CHECKPOINTS = 10
MIB = 1 << 20
# Growth over the second half of the run that still counts as flat: allocator arenas move by
# a few hundred KiB; a leak of even a small object per series per cycle would exceed it.
FLAT_SECOND_HALF_BYTES = 1 * MIB


@dataclass(frozen=True)
class CpuPerCycle:
    mean_s: float
    p99_s: float
    max_s: float
    cycles: int

    def share_of_core(self, interval_s: float) -> float:
        """Fraction of one core the mean cycle costs when one runs every `interval_s`."""
        return self.mean_s / interval_s


@dataclass(frozen=True)
class RssTrack:
    points: tuple[tuple[int, int], ...]  # (cycles done since warm-up, VmRSS bytes)

    @property
    def start(self) -> int:
        return self.points[0][1]

    @property
    def end(self) -> int:
        return self.points[-1][1]

    @property
    def peak(self) -> int:
        return max(rss for _, rss in self.points)

    @property
    def growth(self) -> int:
        return self.end - self.start

    @property
    def second_half_growth(self) -> int:
        middle = self.points[len(self.points) // 2][1]
        return self.end - middle

    @property
    def flat(self) -> bool:
        return self.second_half_growth <= FLAT_SECOND_HALF_BYTES


class CycleBench:
    """One NVML sampler and collection loop over the fake, already loaded into pynvml."""

    def __init__(self, interval_s: float) -> None:
        self._sampler = NvmlSampler(watch_xids=False)
        self._loop = CollectionLoop(self._sampler, interval_s)

    def __enter__(self) -> CycleBench:
        rendered = self._loop.cycle()
        for accept in COMMON_ACCEPT_HEADERS:
            for gzipped in (False, True):
                rendered.body(accept, gzipped)
        for _ in range(WARMUP_CYCLES):
            self._cycle()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._sampler.close()

    def _cycle(self) -> None:
        if not self._loop.cycle().snapshot.node.nvml_up:
            raise BenchError("the fake NVML did not answer in-process")

    def cpu_per_cycle(self, cycles: int) -> CpuPerCycle:
        """process_time() per cycle: CPU actually spent, not time waiting on NVML."""
        costs: list[float] = []
        for _ in range(cycles):
            started = time.process_time()
            self._cycle()
            costs.append(time.process_time() - started)
        p99 = (
            statistics.quantiles(costs, n=100, method="inclusive")[98]
            if len(costs) > 1
            else costs[0]
        )
        return CpuPerCycle(statistics.fmean(costs), p99, max(costs), cycles)

    def rss_over(self, cycles: int, progress: Callable[[int, int], None]) -> RssTrack:
        """VmRSS at 0 and after each tenth of `cycles`: a leak shows as steady growth."""
        step = max(1, cycles // CHECKPOINTS)
        points = [(0, rss_bytes())]
        for done in range(1, cycles + 1):
            self._cycle()
            if done % step == 0 or done == cycles:
                points.append((done, rss_bytes()))
                progress(done, points[-1][1])
        return RssTrack(tuple(points))
