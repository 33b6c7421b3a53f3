"""Series and bytes per device, per reading group, of a plain /metrics body.

Two nodes, each rendered by the real collection loop:

- the HGX H100 of docs/metrics.md's "Fleet cost" table (exporter/generate/fleet_renders.py:
  8 GPUs, 18 NVLinks, GPM, every device held by a pod, `--kubernetes.enabled`), whole and as
  8 × 7 MIG instances, through the simulated backend;
- `make bench`'s node (bench/node.py: 8 A100 80GB × 7 1g.10gb, no GPM, attribution off) over
  the fake libnvidia-ml through the real pynvml, once as `serve` runs now and once with the
  16 Xid codes the alerts watch served at 0 (what `serve` did by default before), so the
  difference is what those zeros cost.

    python bench/series_cost.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from fake import load_in_process, prepare
from node import DEVICE_COUNT, node_scenario

from kube_gpu_exporter.exporter.catalog.xid import APPLICATION_XIDS, HARDWARE_XIDS
from kube_gpu_exporter.exporter.generate import fleet_cost as fc
from kube_gpu_exporter.exporter.generate import fleet_renders as renders
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop

ALERTS_XIDS = tuple(sorted({*HARDWARE_XIDS, *APPLICATION_XIDS}))


def table(title: str, body: bytes, devices: int) -> str:
    """One node's groups: series and bytes, in all and per device."""
    rows = [f"{title}: {devices} devices, {len(body):,} bytes", ""]
    rows += [
        "| reading group | series | per device | bytes | bytes per device |",
        "|---|---|---|---|---|",
    ]
    groups = fc.by_group(body)
    total = fc.Cost()
    for group in fc.GROUPS:
        cost = groups[group]
        total += cost
        rows.append(
            f"| {group} | {cost.series:,} | {cost.series / devices:.2f} | {cost.bytes:,} "
            f"| {cost.bytes / devices:,.0f} |"
        )
    rows.append(
        f"| all | {total.series:,} | {total.series / devices:.2f} | {total.bytes:,} "
        f"| {total.bytes / devices:,.0f} |"
    )
    return "\n".join(rows) + "\n"


def fake_nvml_body(xid_codes: tuple[int, ...]) -> bytes:
    """bench/node.py's node over the fake libnvidia-ml, attribution off."""
    sampler = NvmlSampler(xid_codes=xid_codes)
    try:
        return CollectionLoop(sampler, 5).cycle().body("", False)[0]
    finally:
        sampler.close()


def main() -> int:
    print(table("HGX H100, whole GPUs (simulated)", renders.node_body(False), renders.GPUS))
    mig_devices = renders.GPUS * (1 + renders.MIG_PER_GPU)
    print(table("HGX H100, 8 × 7 MIG (simulated)", renders.node_body(True), mig_devices))
    print(
        table("the same, with --compat.dcgm-exporter", renders.node_body(True, True), mig_devices)
    )
    with tempfile.TemporaryDirectory() as work:
        load_in_process(prepare(Path(work), node_scenario()))
        now = fake_nvml_body(())
        before = fake_nvml_body(ALERTS_XIDS)
    print(table("make bench's 8 A100 × 7 MIG (fake NVML), as served now", now, DEVICE_COUNT))
    print(table("the same with the alerts' 16 Xid codes at 0 (before)", before, DEVICE_COUNT))
    zeros, watch = fc.by_group(before)[fc.XID], fc.by_group(now)[fc.XID]
    print(
        f"The Xid zeros were {zeros.series - watch.series} series and "
        f"{zeros.bytes - watch.bytes:,} bytes; the Xid group is now {watch.series} series "
        f"(the watch start) and {watch.bytes} bytes."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
