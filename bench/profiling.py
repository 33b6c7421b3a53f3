"""`make bench`, GPM and field values: their CPU per cycle and their share of the body.

The node is 8 H100s × 7 1g.10gb MIG instances with 18 NVLinks each (an HGX H100 fully
partitioned), over the fake libnvidia-ml through the real pynvml: GPM on every GPU and every
MIG instance (64 sample pairs a cycle), one batched field-value call per GPU. The same node
with those readings declared unsupported is the exporter before them: both run in this one
process, so the figures are ratios of the same run; then the exporter subprocess serves each
node and wrk scrapes it (gzip, 16 connections, 10 s) for the scrape p99. GPM's clock is
stepped by the collection interval each cycle, so back-to-back cycles compute GPM as
5-second-apart ones would.

    python bench/profiling.py [--cycles 200] [--interval 5] [--readme]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import procs
import wrk
from fake import FakeNode, load_in_process, prepare

from fakenvml import write_state
from kube_gpu_exporter.exporter.nvml.gpm import GpmReader
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.readings_table import DECODER, ENCODER, READINGS, Source
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioSpec

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- profiling:start -->", "<!-- profiling:end -->"
GPUS, MIG_PER_GPU, LINKS = 8, 7, 18
WARMUP = 10
# The keys of the GPM, field-value and codec rows: declared unsupported, the node is the
# exporter without them.
NEW_READINGS = [
    row.unsupported[0]
    for row in READINGS
    if row.source is not Source.CALL or row in (ENCODER, DECODER)
]


def _gpu(gpu: int, old: bool) -> dict[str, Any]:
    activity = {"graphics_active": 0.9, "sm_active": 0.7, "tensor_active": 0.4, "dram_active": 0.3}
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "nvlink_links": LINKS,
        "unsupported": NEW_READINGS if old else [],
        "readings": {"temperature_celsius": 40 + gpu, "power_watts": 300, **activity},
        "mig": [
            {
                "profile": "1g.10gb",
                "gpu_instance_id": 7 + slot,
                "memory_total_bytes": 9984 << 20,
                "readings": {"memory_used_bytes": slot << 30, **activity},
            }
            for slot in range(MIG_PER_GPU)
        ],
    }


def scenario(old: bool) -> Scenario:
    spec = ScenarioSpec.model_validate({"devices": [_gpu(g, old) for g in range(GPUS)]})
    return Scenario(spec, source="bench/profiling.py")


class SteppedClock:
    """Monotonic time that moves one collection interval per call of a cycle's first device."""

    def __init__(self, interval_s: float) -> None:
        self.now, self.interval_s = 0.0, interval_s

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.interval_s


@dataclass(frozen=True)
class Figures:
    cpu_ms: float
    p99_ms: float
    body_bytes: int
    series: int
    scrape_p99_ms: float = 0.0  # gzip, wrk against the exporter subprocess


SCRAPE_LOAD = wrk.Load(threads=2, connections=16, seconds=10)


def scrape_p99(node: FakeNode, work_dir: Path, interval_s: float, gpm: bool) -> float:
    """The exporter subprocess on this node, scraped gzipped by wrk once GPM values are in."""
    port = procs.free_port()
    command = procs.exporter_command(port, round(interval_s))
    with procs.running("profiling", command, port, node.env, work_dir, "/readyz") as server:
        deadline = time.monotonic() + 4 * interval_s
        while gpm and time.monotonic() < deadline:
            if b"nvidia_gpu_sm_active_ratio{" in procs.http_text(server.metrics_url).encode():
                break
            time.sleep(0.5)
        return wrk.run(server.metrics_url, SCRAPE_LOAD, wrk.GZIP_HEADERS).p99_ms


def measure(node: FakeNode, sc: Scenario, cycles: int, interval_s: float) -> Figures:
    write_state(node.state, sc.state_at(0))
    clock = SteppedClock(interval_s)
    sampler = NvmlSampler(watch_xids=False, gpm=GpmReader(clock))
    loop = CollectionLoop(sampler, interval_s)
    try:
        costs: list[float] = []
        body = b""
        for i in range(WARMUP + cycles):
            clock.step()
            started = time.process_time()
            body = loop.cycle().body("", gzipped=False)[0]
            if i >= WARMUP:
                costs.append(time.process_time() - started)
    finally:
        sampler.close()
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    p99 = statistics.quantiles(costs, n=100, method="inclusive")[98]
    return Figures(statistics.fmean(costs) * 1000, p99 * 1000, len(body), series)


def report(old: Figures, new: Figures, cycles: int, interval_s: float) -> str:
    devices = GPUS * (1 + MIG_PER_GPU)
    share = new.cpu_ms / 1000 / interval_s
    rows = [
        "| node | CPU per cycle, mean (p99) | share of one core at "
        f"{interval_s:g} s | series | body | body per device | scrape p99 (gzip, wrk -c16) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f in (("without GPM and field values", old), ("with them", new)):
        rows.append(
            f"| {name} | {f.cpu_ms:.2f} ms ({f.p99_ms:.2f} ms) | "
            f"{f.cpu_ms / 1000 / interval_s:.2%} | {f.series} | {f.body_bytes / 1024:.1f} KiB | "
            f"{f.body_bytes / devices / 1024:.2f} KiB | {f.scrape_p99_ms:.2f} ms |"
        )
    return "\n".join(
        [
            f"{GPUS} H100 × {MIG_PER_GPU} 1g.10gb MIG, {LINKS} NVLinks each ({devices} devices), "
            f"{cycles} cycles in-process over the fake NVML, GPM stepped {interval_s:g} s per "
            "cycle.",
            "",
            *rows,
            "",
            f"Ratio with / without: CPU ×{new.cpu_ms / old.cpu_ms:.2f}, body "
            f"×{new.body_bytes / old.body_bytes:.2f}. Target: < 2 % of one core at 5 s "
            f"({'met' if share < 0.02 else 'NOT met'}: {share:.2%}).",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200, help="cycles timed per node")
    parser.add_argument("--interval", type=float, default=5.0, help="collection interval, s")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-profiling-") as work:
        node = prepare(Path(work), scenario(old=True))
        load_in_process(node)
        old = measure(node, scenario(old=True), args.cycles, args.interval)
        new = measure(node, scenario(old=False), args.cycles, args.interval)
        # The state file is the new node's now: scrape it, then the old one's.
        new_p99 = scrape_p99(node, Path(work), args.interval, gpm=True)
        write_state(node.state, scenario(old=True).state_at(0))
        old_p99 = scrape_p99(node, Path(work), args.interval, gpm=False)
        old = dataclasses.replace(old, scrape_p99_ms=old_p99)
        new = dataclasses.replace(new, scrape_p99_ms=new_p99)
    text = report(old, new, args.cycles, args.interval)
    print(text)
    if args.readme:
        readme = README.read_text(encoding="utf-8")
        head, _, rest = readme.partition(START)
        _, _, tail = rest.partition(END)
        README.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
