"""Per-call latency of every NVML call the sampler makes, on whatever libnvidia-ml is loaded.

On a real GPU this is the truth the fake cannot give (which calls are cheap, which sample for
milliseconds); on the fake it shows the bindings' own overhead. Each reading of the readings
table is timed through the sampler's own reader on GPU 0 (and on its first MIG instance if it
has one), plus the batched field-value call, the GPM sample and metrics calls, the process
listing and utilization, and one whole `NvmlSampler.sample()`.

    python bench/nvml_calls.py [--calls 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.nvml.devices import discover
from kube_gpu_exporter.exporter.nvml.field_values import FieldReader
from kube_gpu_exporter.exporter.nvml.readings import (
    DriverFeatures,
    fields_on,
    read_clock_events,
    readers_on,
)
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.readings_table import GPM, Where


def timed(call: Callable[[], Any], calls: int) -> dict[str, Any]:
    """p50 and p99 in microseconds, or the NVML error the call answers."""
    took: list[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        try:
            call()
        except pynvml.NVMLError as exc:
            return {"error": str(exc)}
        took.append((time.perf_counter() - start) * 1e6)
    took.sort()
    return {
        "p50_us": round(statistics.median(took), 1),
        "p99_us": round(took[max(0, int(len(took) * 0.99) - 1)], 1),
    }


def _gpm_calls(handle: Any, calls: int) -> dict[str, dict[str, Any]]:
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(handle, first)
        time.sleep(0.2)
        pynvml.nvmlGpmSampleGet(handle, second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM.values)
        request.sample1, request.sample2 = first, second
        for i, value in enumerate(GPM.values):
            request.metrics[i].metricId = value.nvml_id
        return {
            "nvmlGpmSampleGet": timed(lambda: pynvml.nvmlGpmSampleGet(handle, second), calls),
            "nvmlGpmMetricsGet (12 metrics)": timed(
                lambda: pynvml.nvmlGpmMetricsGet(request), calls
            ),
        }
    finally:
        pynvml.nvmlGpmSampleFree(first)
        pynvml.nvmlGpmSampleFree(second)


def measure(calls: int) -> dict[str, Any]:
    pynvml.nvmlInit()
    try:
        gpu = discover()[0]
        handle, features = gpu.handle, DriverFeatures()
        where = Where.MIG_ENABLED_GPU if gpu.mig_enabled else Where.GPU
        results: dict[str, Any] = {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "gpu": gpu.identity.model,
            "mig": gpu.mig_enabled,
        }
        table: dict[str, Any] = {}
        for key, reader in readers_on(where).items():
            table[key] = timed(lambda r=reader: r(handle, features), calls)
        table["clock_events"] = timed(lambda: read_clock_events(handle, features), calls)
        table["compute_processes"] = timed(
            lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle), calls
        )
        since = int(time.time() * 1e6) - 1_000_000
        table["process_utilization"] = timed(
            lambda: pynvml.nvmlDeviceGetProcessUtilization(handle, since), calls
        )
        fields = FieldReader()
        rows = fields_on(where)
        fields.read(gpu.identity.uuid, handle, rows)  # learns the NVLink count
        table["field_values (batched)"] = timed(
            lambda: fields.read(gpu.identity.uuid, handle, rows), calls
        )
        table.update(_gpm_calls(handle, calls))
        if gpu.children:
            child = gpu.children[0]
            for key, reader in readers_on(Where.MIG_INSTANCE).items():
                table[f"mig: {key}"] = timed(lambda r=reader: r(child.handle, features), calls)
        results["calls"] = table
    finally:
        pynvml.nvmlShutdown()
    sampler = NvmlSampler(watch_xids=False)
    try:
        sampler.sample()

        def cycle() -> None:
            time.sleep(0.15)  # apart enough for GPM to compute; the sleep is not timed
            start = time.perf_counter()
            sampler.sample()
            cycles.append((time.perf_counter() - start) * 1e6)

        cycles: list[float] = []
        for _ in range(20):
            cycle()
        cycles.sort()
        results["calls"]["NvmlSampler.sample() (whole node, GPM on)"] = {
            "p50_us": round(statistics.median(cycles), 1),
            "p99_us": round(cycles[-1], 1),
        }
    finally:
        sampler.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls timed per NVML call")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = measure(args.calls)
    print(f"{results['gpu']}, driver {results['driver']}, MIG {results['mig']}")
    print(f"{'call':40} {'p50 µs':>10} {'p99 µs':>10}")
    for name, figures in results["calls"].items():
        if "error" in figures:
            print(f"{name:40} {figures['error']}")
        else:
            print(f"{name:40} {figures['p50_us']:>10} {figures['p99_us']:>10}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
