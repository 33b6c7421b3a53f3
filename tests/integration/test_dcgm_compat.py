"""`--compat.dcgm-exporter[=classic|4.8.3|4.9]`: dcgm-exporter's names, units and labels.

Unit tests render built snapshots: every field of each schema and its unit, labels per schema,
MIG, exclusive versus shared holders, absent readings, a lost GPU, the last-Xid gauge and its
`err_msg`, the NVLink rate, counters typed `counter` in the text format (read back by promtool),
and a golden excerpt of each schema's body. The migration guide's tables are checked against
the field table. The end-to-end tests run the real exporter on the demo scenario with a kubelet,
scraped by Debian's Prometheus, and run every query of NVIDIA's dashboard 12239 (both committed
revisions, fixtures/dcgm_dashboard_12239.json) with its variables filled in as Grafana fills
them, alert expressions as they are written for dcgm-exporter, and every expression of the
guide's alert table against an exporter serving the schema it is written for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

from fakenvml import write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.xid import XIDS
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.exposition import dcgm_fields as dcgm
from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat
from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS, Rendered, render
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler, node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import (
    AllocationSample,
    AttributionSample,
    Capacity,
    DeviceIdentity,
    DeviceSample,
    ExporterState,
    Holder,
    NodeSample,
    Snapshot,
)
from kubelet_server import FakeKubelet, container, devices, pod
from prometheus_server import Generation, Prometheus, run_prometheus
from support import exporter_command, run_exporter, samples, serve_exposition, values, wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"
FIXTURES = Path(__file__).parent / "fixtures"
DASHBOARD = FIXTURES / "dcgm_dashboard_12239.json"
MIGRATION_DOC = REPO / "docs" / "migrating-from-dcgm-exporter.md"
GIB, MIB = float(1 << 30), float(1 << 20)
T0 = 1_790_000_000.0
Parsed = dict[tuple[str, frozenset[tuple[str, str]]], float]

# --- unit tests on built snapshots -------------------------------------------------------------

H100 = DeviceIdentity(0, "GPU-aaaaaaaa", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
H100B = DeviceIdentity(1, "GPU-bbbbbbbb", "NVIDIA H100 80GB HBM3", "00000000:19:00.0")
H100C = DeviceIdentity(2, "GPU-cccccccc", "NVIDIA H100 80GB HBM3", "00000000:1A:00.0")
A100 = DeviceIdentity(3, "GPU-dddddddd", "NVIDIA A100-SXM4-40GB", "00000000:1B:00.0")


def mig(
    uuid: str, profile: str, gi: int, ci: int = 0, gpu: DeviceIdentity = A100
) -> DeviceIdentity:
    return DeviceIdentity(
        index=gpu.index,
        uuid=uuid,
        model=f"{gpu.model} MIG {profile}",  # as NVML names a MIG device
        pci_bus_id="",
        parent_uuid=gpu.uuid,
        mig_profile=profile,
        gpu_instance_id=gi,
        compute_instance_id=ci,
    )


MIG_3G = mig("MIG-33333333", "3g.20gb", 1)
MIG_2G_CI0 = mig("MIG-22222220", "2g.10gb", 5, 0)  # one GPU instance, two compute instances
MIG_2G_CI1 = mig("MIG-22222221", "2g.10gb", 5, 1)

GPM_VALUES = {
    c.GRAPHICS_ACTIVE.name: 0.95,
    c.SM_ACTIVE.name: 0.86,
    c.SM_OCCUPANCY.name: 0.42,
    c.TENSOR_ACTIVE.name: 0.61,
    c.DRAM_ACTIVE.name: 0.48,
    c.FP64_ACTIVE.name: 0.01,
    c.FP32_ACTIVE.name: 0.12,
    c.FP16_ACTIVE.name: 0.04,
    c.PCIE_TRANSMIT_RATE.name: 52428800.0,
    c.PCIE_RECEIVE_RATE.name: 838860800.0,
    c.NVLINK_TRANSMIT_RATE.name: 1.5e9,
    c.NVLINK_RECEIVE_RATE.name: 1.25e9,
}
GPU_VALUES = {
    c.UTILIZATION.name: 0.93,
    c.MEMORY_BANDWIDTH_UTILIZATION.name: 0.61,
    c.MEMORY_USED.name: 61 * GIB,
    c.MEMORY_TOTAL.name: 80 * GIB,
    c.MEMORY_RESERVED.name: 512 * MIB,
    c.TEMPERATURE.name: 71.0,
    c.MEMORY_TEMPERATURE.name: 78.0,
    c.POWER.name: 612.5,
    c.POWER_LIMIT.name: 700.0,
    c.POWER_MANAGEMENT_LIMIT.name: 650.0,
    c.ENERGY.name: 1234.567,
    c.SM_CLOCK.name: 1980e6,
    c.MEMORY_CLOCK.name: 2619e6,
    c.ECC_CORRECTED.name: 3.0,
    c.ECC_UNCORRECTED.name: 0.0,
    c.PCIE_REPLAYS.name: 2.0,
    c.ROW_REMAP_FAILED.name: 0.0,
    c.ROW_REMAP_PENDING.name: 0.0,
    c.ENCODER_UTILIZATION.name: 0.07,
    c.DECODER_UTILIZATION.name: 0.29,
    **GPM_VALUES,
}
A100_VALUES = {
    c.MEMORY_USED.name: 15 * GIB,  # NVML's sum over the instances: never emitted (theirs are)
    c.MEMORY_TOTAL.name: 40 * GIB,
    c.TEMPERATURE.name: 44.0,
    c.POWER.name: 180.0,
    c.SM_CLOCK.name: 1410e6,
}
REMAPPED = {
    (c.REMAPPED_ROWS.name, "correctable"): 1.0,
    (c.REMAPPED_ROWS.name, "uncorrectable"): 2.0,
}
THERMAL = frozenset({"sw_power_cap", "hw_thermal_slowdown"})  # NVML bits 0x4 | 0x40


def nvlink(transmit_mib: float, receive_mib: float, links: int = 2) -> dict[tuple[str, str], float]:
    """Per-link NVLink byte counters, `transmit_mib` and `receive_mib` on each link."""
    out = {}
    for link in range(links):
        out[(c.NVLINK_TRANSMIT_BYTES.name, str(link))] = transmit_mib * MIB
        out[(c.NVLINK_RECEIVE_BYTES.name, str(link))] = receive_mib * MIB
    return out


def full_h100(
    link_mib: tuple[float, float] = (1000, 500), xids: dict[int, int] | None = None
) -> DeviceSample:
    """An H100 that NVML answers every reading of, its Xid events watched."""
    labelled = REMAPPED | nvlink(*link_mib)
    return DeviceSample(H100, True, GPU_VALUES, THERMAL, xids or {}, None, labelled, True)


def mig_values(used_gib: float, total_mib: float) -> dict[str, float]:
    return {
        c.MEMORY_USED.name: used_gib * GIB,
        c.MEMORY_TOTAL.name: total_mib * MIB,
        c.MEMORY_RESERVED.name: 0.0,
    }


def node(*devices: DeviceSample) -> NodeSample:
    return NodeSample(nvml_up=True, driver_version="550.54.15", devices=devices)


EXPORTER_FAMILIES = b"# HELP kube_gpu_exporter_build_info"  # the first of them, last in a body


def snapshot_of(
    node_sample: NodeSample, attribution: AttributionSample | None = None, at: float = T0
) -> Snapshot:
    state = ExporterState(0.01, at, 1, {"init": 0})
    return Snapshot(node_sample, state, at, attribution)


def rendered(snapshot: Snapshot, compat: DcgmCompat | None = None) -> Rendered:
    compat = compat or DcgmCompat(hostname="node-a")
    return render(snapshot, compat.families(snapshot))


def text_of(snapshot: Snapshot, compat: DcgmCompat | None = None) -> bytes:
    return rendered(snapshot, compat).body("", gzipped=False)[0]


def parsed(snapshot: Snapshot, compat: DcgmCompat | None = None) -> Parsed:
    """The OpenMetrics body's samples. Its compat counters are `unknown`, so their names stay
    dcgm-exporter's (prometheus-client's text parser appends `_total` to a counter's)."""
    om = rendered(snapshot, compat).body(COMMON_ACCEPT_HEADERS[1], gzipped=False)[0]
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in om_families(om.decode())
        for s in family.samples
    }


def series(body: Parsed, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), v) for (n, labels), v in body.items() if n == name]


def second_cycle(schema: dcgm.Schema, first: NodeSample, then: NodeSample) -> DcgmCompat:
    """A compat that has seen `first` 10 s before the snapshot the caller renders of `then`."""
    compat = DcgmCompat(hostname="node-a", schema=schema)
    compat.families(snapshot_of(first, at=T0 - 10))
    return compat


def full_node_body(schema: dcgm.Schema, xids: dict[int, int] | None = None) -> Parsed:
    """The full H100 in its second cycle: NVLink grew 1000 → 2000 MiB out, 500 → 1500 MiB in
    on each of 2 links in 10 s, so 4000 MiB = 4096000 KiB: 409.6 KiB/s ÷ 1000 → DCGM's 409."""
    compat = second_cycle(schema, node(full_h100()), node(full_h100()))
    return parsed(snapshot_of(node(full_h100((2000, 1500), xids))), compat)


def field_named(name: str) -> dcgm.CompatField:
    (field,) = [
        x for x in dcgm.FIELDS if name in (x.classic and x.classic.name, x.dcgm47 and x.dcgm47.name)
    ]
    return field


EXPECTED = {
    "classic": {
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": 78,
        "DCGM_FI_DEV_GPU_TEMP": 71,
        "DCGM_FI_DEV_POWER_USAGE": 612.5,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1234567,  # J → mJ
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 2,
        "DCGM_FI_DEV_GPU_UTIL": 93,  # ratio → %
        "DCGM_FI_DEV_MEM_COPY_UTIL": 61,
        "DCGM_FI_DEV_ENC_UTIL": 7,
        "DCGM_FI_DEV_DEC_UTIL": 29,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        # DCGM's free is what is neither used nor reserved: used + free + reserved = total.
        "DCGM_FI_DEV_FB_FREE": 80 * 1024 - 61 * 1024 - 512,  # bytes → MiB
        "DCGM_FI_DEV_FB_USED": 61 * 1024,
        "DCGM_FI_DEV_FB_RESERVED": 512,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 409,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 2,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.95,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.61,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.48,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 52428800,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 838860800,
        "DCGM_FI_DEV_FB_TOTAL": 80 * 1024,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 650,
        "DCGM_FI_PROF_SM_ACTIVE": 0.86,
        "DCGM_FI_PROF_SM_OCCUPANCY": 0.42,
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.01,
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.12,
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.04,
        "DCGM_FI_PROF_NVLINK_TX_BYTES": 1.5e9,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 1.25e9,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x4 | 0x40,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4 | 0x40,
    },
    "4.9": {
        "DCGM_FI_DEV_SM_CLOCK_HERTZ": 1980e6,
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": 2619e6,
        "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS": 78,
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS": 71,
        "DCGM_FI_DEV_BOARD_POWER_WATTS": 612.5,
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": 1234.567,
        "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": 2,
        "DCGM_FI_DEV_GPU_UTIL_RATIO": 0.93,
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO": 0.61,
        "DCGM_FI_DEV_ENC_UTIL_RATIO": 0.07,
        "DCGM_FI_DEV_DEC_UTIL_RATIO": 0.29,
        "DCGM_FI_DEV_XID_ERROR": 0,
        "DCGM_FI_DEV_FB_FREE_BYTES": 80 * GIB - 61 * GIB - 512 * MIB,
        "DCGM_FI_DEV_FB_USED_BYTES": 61 * GIB,
        "DCGM_FI_DEV_FB_RESERVED_BYTES": 512 * MIB,
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL": 409,  # DCGM field 449, the same "MB/s"
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": 2,
        "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": 1,
        "DCGM_FI_DEV_ROW_REMAP_FAILED": 0,
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": 0.95,
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO": 0.61,
        "DCGM_FI_PROF_DRAM_UTIL_RATIO": 0.48,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 52428800,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 838860800,
        "DCGM_FI_DEV_FB_CAPACITY_BYTES": 80 * GIB,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS": 700,
        "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS": 650,
        "DCGM_FI_PROF_SM_UTIL_RATIO": 0.86,
        "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": 0.42,
        "DCGM_FI_PROF_FP64_UTIL_RATIO": 0.01,
        "DCGM_FI_PROF_FP32_UTIL_RATIO": 0.12,
        "DCGM_FI_PROF_FP16_UTIL_RATIO": 0.04,
        "DCGM_FI_PROF_NVLINK_TX_BYTES": 1.5e9,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 1.25e9,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4 | 0x40,
    },
}
EXPECTED["4.8.3"] = EXPECTED["classic"]  # 4.8.3 renamed a label, not a field


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_every_field_of_the_schema_in_its_unit(schema: dcgm.Schema) -> None:
    """One H100 that NVML answers everything of: every name the schema can emit, once, in the
    schema's unit, and nothing else under DCGM_."""
    body = full_node_body(schema)
    got = {n: v for (n, labels), v in body.items() if n.startswith("DCGM_")}
    assert got == pytest.approx(EXPECTED[schema], rel=1e-12)
    assert list(EXPECTED[schema]) == list(dcgm.metric_names(schema))
    # Ours are still there, in base units.
    assert values(body, "nvidia_gpu_utilization_ratio", gpu="0") == [0.93]


def test_percent_and_clock_conversions_leave_no_float_noise() -> None:
    util, clock = field_named("DCGM_FI_DEV_GPU_UTIL"), field_named("DCGM_FI_DEV_SM_CLOCK")
    energy = field_named("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert util.classic and clock.classic and energy.classic
    for ratio in (0.07, 0.29, 0.57, 0.93, 0.99):
        assert util.classic.convert(ratio) == round(ratio * 100)
    for mhz in (345, 1410, 1755, 1980, 2619):
        assert clock.classic.convert(mhz * 1e6) == mhz
    assert energy.classic.convert(123456789 / 1000) == 123456789  # NVML's mJ


DEVICE_LABELS = {
    "gpu": "0",
    "UUID": "GPU-aaaaaaaa",
    "pci_bus_id": "00000000:18:00.0",
    "device": "nvidia0",
    "modelName": "NVIDIA H100 80GB HBM3",
}
SCHEMA_LABELS = {
    "classic": {"Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15"},
    "4.8.3": {"hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15"},
    "4.9": {"hostname": "node-a", "DCGM_FI_SYSTEM_DRIVER_VERSION": "550.54.15"},
}


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_device_labels_are_the_schemas(schema: dcgm.Schema) -> None:
    body = full_node_body(schema)
    label_sets = {labels for (n, labels), _ in body.items() if n.startswith("DCGM_")}
    xid = {"err_code": "0", "err_msg": "No Error"}
    assert {frozenset(ls) for ls in label_sets} == {
        frozenset((DEVICE_LABELS | SCHEMA_LABELS[schema]).items()),
        frozenset((DEVICE_LABELS | SCHEMA_LABELS[schema] | xid).items()),
    }
    assert set(SCHEMA_LABELS[schema]) <= set(dcgm.label_names(schema))


def test_clock_event_reasons_under_both_names_in_classic_one_in_4_9() -> None:
    classic = parsed(snapshot_of(node(full_h100())))
    assert values(classic, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu="0") == [0x4 | 0x40]
    assert values(classic, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == [0x4 | 0x40]
    unreadable = replace(full_h100(), clock_events=None)
    assert not series(parsed(snapshot_of(node(unreadable))), "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    four_nine = parsed(snapshot_of(node(full_h100())), DcgmCompat("n", "4.9"))
    assert not series(four_nine, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_absent_readings_stay_absent(schema: dcgm.Schema) -> None:
    """NOT_SUPPORTED drops the series in every schema: a reading missing from the snapshot
    takes exactly its field(s) away, never leaving a 0 that alerts would read as idle."""
    for field in dcgm.FIELDS:
        named = field.named(schema)
        if named is None or field.kind not in ("value", "labelled"):
            continue
        device = full_h100()
        device = replace(
            device,
            values={k: v for k, v in device.values.items() if k != field.source},
            labelled={k: v for k, v in device.labelled.items() if k != (field.source, field.label)},
        )
        body = parsed(snapshot_of(node(device)), DcgmCompat("n", schema))
        present = {n for (n, _), _ in body.items() if n.startswith("DCGM_")}
        assert present == set(dcgm.metric_names(schema)) - _gone(schema, field), named.name


def _gone(schema: dcgm.Schema, removed: dcgm.CompatField) -> set[str]:
    """The names a full H100's first cycle lacks without `removed`'s reading: the fields read
    from it (free memory from total and used), and the NVLink rate (no previous cycle)."""
    derived = {c.MEMORY_TOTAL.name, c.MEMORY_USED.name}
    return {
        n.name
        for x in dcgm.FIELDS
        if (n := x.named(schema)) is not None
        and (
            (
                x.kind in ("value", "labelled")
                and (x.source, x.label) == (removed.source, removed.label)
            )
            or (x.kind == "fb_free" and removed.source in derived)
            or x.kind == "nvlink"
        )
    }


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_no_gpm_no_profiling_fields_no_links_no_nvlink_rate(schema: dcgm.Schema) -> None:
    """An Ampere GPU (no GPM) has no DCGM_FI_PROF_* series; NVLink throughput needs a previous
    cycle and NVML link counters."""
    ampere = {k: v for k, v in GPU_VALUES.items() if k not in GPM_VALUES}
    no_links = DeviceSample(H100, True, ampere, THERMAL, {}, None, REMAPPED)
    compat = second_cycle(schema, node(no_links), node(no_links))
    body = parsed(snapshot_of(node(no_links)), compat)
    names = {n for (n, _), _ in body.items() if n.startswith("DCGM_")}
    assert not {n for n in names if n.startswith("DCGM_FI_PROF_")}
    assert not {n for n in names if "NVLINK" in n}
    first = parsed(snapshot_of(node(full_h100())), DcgmCompat("n", schema))
    assert not {n for (n, _), _ in first.items() if "NVLINK_BANDWIDTH" in n or "THROUGHPUT" in n}


def test_nvlink_throughput_is_dcgms_rate_between_cycles() -> None:
    compat = DcgmCompat("n")
    name = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"

    def at(seconds: float, out_mib: float, in_mib: float) -> list[float]:
        snap = snapshot_of(node(full_h100((out_mib, in_mib))), at=T0 + seconds)
        return [v for _, v in series(parsed(snap, compat), name)]

    assert at(0, 0, 0) == []  # no previous cycle
    assert at(5, 500, 500) == [409]  # 2 links × 1000 MiB = 2048000 KiB in 5 s → 409.6 → 409
    assert at(10, 500, 500) == [0]  # idle links: 0, not absent
    assert at(15, 100, 100) == []  # the counters went back (a restart): absent once
    assert at(20, 100.0 + 2.4, 100) == [0]  # 4.8 MiB in 5 s: 0.98 "MB/s", truncated as DCGM


def mig_node(*, gpm_on_instances: bool = False) -> NodeSample:
    extra = GPM_VALUES if gpm_on_instances else {}
    return node(
        DeviceSample(A100, True, A100_VALUES, clock_events=frozenset(), xid_watched=True),
        DeviceSample(MIG_3G, True, mig_values(12, 19968) | extra),
        DeviceSample(MIG_2G_CI0, True, mig_values(3, 9856) | extra),
        DeviceSample(MIG_2G_CI1, True, mig_values(3, 9856) | extra),
    )


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_mig_instances_carry_their_gpus_identity_and_gpu_instance_labels(
    schema: dcgm.Schema,
) -> None:
    body = parsed(snapshot_of(mig_node()), DcgmCompat("node-a", schema))
    used_name = "DCGM_FI_DEV_FB_USED_BYTES" if schema == "4.9" else "DCGM_FI_DEV_FB_USED"
    used = {labels["GPU_I_ID"]: (labels, v) for labels, v in series(body, used_name)}
    # One series per GPU instance: the 2g.10gb instance's two compute instances are one.
    assert set(used) == {"1", "5"}
    labels, value = used["1"]
    assert value == (12 * GIB if schema == "4.9" else 12 * 1024)
    assert labels == {
        "gpu": "3",
        "UUID": A100.uuid,  # the parent GPU's UUID, as dcgm-exporter reports it
        "pci_bus_id": A100.pci_bus_id,
        "device": "nvidia3",
        "modelName": A100.model,
        "GPU_I_PROFILE": "3g.20gb",
        "GPU_I_ID": "1",
        **SCHEMA_LABELS[schema],
    }
    free_name = "DCGM_FI_DEV_FB_FREE_BYTES" if schema == "4.9" else "DCGM_FI_DEV_FB_FREE"
    expected_free = (19968 * MIB - 12 * GIB) / (1 if schema == "4.9" else MIB)
    assert values(body, free_name, GPU_I_ID="1") == [expected_free]


def test_a_partitioned_gpus_device_values_are_emitted_once() -> None:
    """Temperature, power and clocks are the GPU's: one series without MIG labels, not a copy
    per instance (sums such as 12239's "GPU Power Total" stay right). Its framebuffer is its
    instances': no GPU-level FB series to double-count."""
    body = parsed(snapshot_of(mig_node()))
    temps = series(body, "DCGM_FI_DEV_GPU_TEMP")
    assert [(labels.get("GPU_I_ID"), v) for labels, v in temps] == [(None, 44)]
    assert [v for _, v in series(body, "DCGM_FI_DEV_POWER_USAGE")] == [180]
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL"):
        assert all("GPU_I_ID" in labels for labels, _ in series(body, name)), name
    assert values(body, "DCGM_FI_DEV_GPU_UTIL") == []  # NVML: not on MIG
    assert values(body, "DCGM_FI_DEV_XID_ERRORS", gpu="3") == [0]


def test_gpm_activity_is_per_mig_instance_where_nvml_gives_it() -> None:
    """GPM on a Hopper MIG instance (nvmlGpmMigSampleGet) is the instance's: DCGM_FI_PROF_*
    carry GPU_I_PROFILE and GPU_I_ID, as dcgm-exporter's; an Ampere instance has none."""
    body = parsed(snapshot_of(mig_node(gpm_on_instances=True)))
    tensor = series(body, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert sorted((labels["GPU_I_ID"], v) for labels, v in tensor) == [("1", 0.61), ("5", 0.61)]
    assert not series(parsed(snapshot_of(mig_node())), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")


def allocation(
    device: DeviceIdentity, pod_name: str, sharing: str = "exclusive"
) -> AllocationSample:
    return AllocationSample(device, Holder("ml", pod_name, "main"), "nvidia.com/gpu", sharing)


def attribution(*allocations: AllocationSample) -> AttributionSample:
    return AttributionSample(allocations, (), Capacity(4, {}, {}, 0), {})


def test_exclusive_holders_get_pod_labels_shared_devices_none() -> None:
    snapshot = snapshot_of(
        node(
            DeviceSample(H100, True, GPU_VALUES),
            DeviceSample(H100B, True, GPU_VALUES),
            DeviceSample(H100C, True, GPU_VALUES),
            *mig_node().devices,
        ),
        attribution(
            allocation(H100, "trainer-0"),
            allocation(H100B, "notebook-a", "shared"),  # two time-slicing replicas
            allocation(H100B, "notebook-b", "shared"),
            allocation(H100C, "lonely-replica", "shared"),  # a replica: shared by construction
            allocation(MIG_3G, "mig-0"),
            allocation(MIG_2G_CI0, "mig-a"),  # one GPU instance, two holders
            allocation(MIG_2G_CI1, "mig-b"),
        ),
    )
    body = parsed(snapshot)

    def util_pods(gpu: str) -> list[dict[str, str]]:
        return [
            {k: v for k, v in labels.items() if k in ("namespace", "pod", "container")}
            for labels, _ in series(body, "DCGM_FI_DEV_GPU_UTIL")
            if labels["gpu"] == gpu
        ]

    assert util_pods("0") == [{"namespace": "ml", "pod": "trainer-0", "container": "main"}]
    # A shared device: once, without pod labels — never the device's value on each sharer.
    assert util_pods("1") == [{}]
    assert util_pods("2") == [{}]
    fb = {
        labels["GPU_I_ID"]: labels
        for labels, _ in series(body, "DCGM_FI_DEV_FB_USED")
        if "GPU_I_ID" in labels
    }
    assert fb["1"]["pod"] == "mig-0"
    assert "pod" not in fb["5"]
    # The partitioned GPU itself is held by nobody: its pods hold instances.
    a100 = [labels for labels, _ in series(body, "DCGM_FI_DEV_GPU_TEMP") if labels["gpu"] == "3"]
    assert len(a100) == 1 and "pod" not in a100[0]
    # The per-pod split of a shared GPU is in our own series (absent here without a directory).
    assert len(values(body, "nvidia_gpu_allocation_info", gpu="1", sharing="shared")) == 2


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_a_lost_gpu_keeps_only_its_xid_and_the_rest_keep_reporting(schema: dcgm.Schema) -> None:
    snapshot = snapshot_of(
        node(full_h100(), DeviceSample(H100B, up=False, xid_counts={79: 1}, xid_watched=True)),
    )
    body = parsed(snapshot, DcgmCompat("n", schema))
    xid_name = "DCGM_FI_DEV_XID_ERROR" if schema == "4.9" else "DCGM_FI_DEV_XID_ERRORS"
    names = {n for (n, labels), _ in body.items() if ("gpu", "1") in labels}
    assert {n for n in names if n.startswith("DCGM_")} == {xid_name}
    ((labels, value),) = [(ls, v) for ls, v in series(body, xid_name) if ls["gpu"] == "1"]
    assert (value, labels["err_code"], labels["err_msg"]) == (
        79,
        "79",
        "GPU has fallen off the bus",
    )
    assert (
        len([n for (n, ls), _ in body.items() if n.startswith("DCGM_") and ("gpu", "0") in ls]) > 30
    )
    assert values(body, "nvidia_gpu_up", gpu="1") == [0]


XID_NODE = """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""


def xid_gauges(sample: NodeSample, schema: dcgm.Schema) -> dict[str, float]:
    """The Xid gauge's value by `gpu` label."""
    name = "DCGM_FI_DEV_XID_ERROR" if schema == "4.9" else "DCGM_FI_DEV_XID_ERRORS"
    body = parsed(snapshot_of(sample), DcgmCompat("n", schema))
    return {labels["gpu"]: value for labels, value in series(body, name)}


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_a_gpu_whose_xid_events_nvml_will_not_register_has_no_xid_gauge(
    nvml_state: Path, schema: dcgm.Schema
) -> None:
    """dcgm-exporter's 0 says "No Error" since the watch began: on a GPU whose Xid events are
    not watched nothing is counted, so a 0 there is a reading NVML could not give: absent."""
    refused = {(1, "nvmlDeviceRegisterEvents"): pynvml.NVML_ERROR_NOT_SUPPORTED}
    write_state(nvml_state, Scenario.parse(XID_NODE).state_at(0), errors=refused)
    sampler = NvmlSampler()
    try:
        sample = sampler.sample()
    finally:
        sampler.close()
    assert xid_gauges(sample, schema) == {"0": 0}


def test_without_an_xid_watch_no_gpu_has_an_xid_gauge() -> None:
    """A simulated node without a watch (as NVML's `watch_xids=False`) counts nothing either."""
    state = Scenario.parse(XID_NODE).state_at(0)
    assert xid_gauges(node_sample(state), "classic") == {}
    watched = node_sample(state, xid_watch_start=T0)
    assert xid_gauges(watched, "classic") == {"0": 0, "1": 0}


def test_xid_gauge_holds_the_last_xid_as_dcgm_exporter_does() -> None:
    compat = DcgmCompat(hostname="node-a")

    def last_xid(counts: dict[int, int]) -> tuple[float, dict[str, str]]:
        body = parsed(
            snapshot_of(
                node(DeviceSample(H100, True, GPU_VALUES, xid_counts=counts, xid_watched=True))
            ),
            compat,
        )
        ((labels, value),) = series(body, "DCGM_FI_DEV_XID_ERRORS")
        return value, labels

    value, labels = last_xid({})
    assert (value, labels["err_code"], labels["err_msg"]) == (0, "0", "No Error")
    assert last_xid({13: 1})[0] == 13
    assert last_xid({13: 1, 31: 1})[0] == 31  # the newest code
    assert last_xid({13: 1, 31: 1})[0] == 31  # nothing new: it stays, never back to 0
    assert last_xid({13: 2, 31: 1})[0] == 13  # a repeat of an older code is the newest
    # Two codes within one cycle: order unknown, a hardware Xid is reported over the other.
    value, labels = last_xid({13: 3, 31: 1, 94: 1})
    assert (value, labels["err_msg"]) == (94, "Contained ECC error")
    assert last_xid({13: 3, 31: 2, 94: 1, 45: 1})[0] == 45  # no hardware code: the highest
    assert last_xid({43: 1})[0] == 43  # counts restarted (a new watcher): 43 is new


@pytest.mark.parametrize(
    ("code", "message"),
    [
        *(pytest.param(x.code, x.name, id=f"xid{x.code}") for x in XIDS if x.name),
        pytest.param(0, "No Error", id="none"),
        pytest.param(154, "Unknown Error", id="unnamed"),  # in the catalog, with no old name
        pytest.param(999, "Unknown Error", id="uncatalogued"),
    ],
)
@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_err_msg_on_every_xid_code(schema: dcgm.Schema, code: int, message: str) -> None:
    """Every code the Xid table names carries its name; 0 and codes it does not name get
    dcgm-exporter's own texts. The label is never missing."""
    body = full_node_body(schema, xids={code: 1} if code else None)
    xid_name = "DCGM_FI_DEV_XID_ERROR" if schema == "4.9" else "DCGM_FI_DEV_XID_ERRORS"
    ((labels, value),) = series(body, xid_name)
    assert (value, labels["err_code"], labels["err_msg"]) == (code, str(code), message)


def counter_names(schema: dcgm.Schema) -> set[str]:
    return {n.name for x in dcgm.FIELDS if x.type == dcgm.COUNTER and (n := x.named(schema))}


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_counters_are_typed_counter_in_the_text_format_unknown_in_openmetrics(
    schema: dcgm.Schema,
) -> None:
    compat = second_cycle(schema, node(full_h100()), node(full_h100()))
    result = rendered(snapshot_of(node(full_h100((2000, 1500)))), compat)
    text = result.body("", gzipped=False)[0].decode()
    types = dict(re.findall(r"^# TYPE (DCGM_\w+) (\w+)$", text, flags=re.M))
    assert types == {n.name: x.type for x in dcgm.FIELDS if (n := x.named(schema)) is not None}
    assert set(types.values()) == {"gauge", "counter"} and counter_names(schema)
    # Each counter's samples follow its own TYPE line, under the same name (no `_total`).
    for name in counter_names(schema):
        assert re.search(rf"^# TYPE {name} counter\n{name}\{{", text, flags=re.M), name
        assert f"{name}_total" not in text
    # Prometheus 3's text format (1.0.0) the same; OpenMetrics: `unknown`, and it parses.
    text_v1 = result.body("text/plain;version=1.0.0;escaping=allow-utf-8", gzipped=False)[0]
    assert text_v1.decode() == text
    om = result.body(COMMON_ACCEPT_HEADERS[1], gzipped=False)[0].decode()
    om_types = {fam.name: fam.type for fam in om_families(om) if fam.name.startswith("DCGM_")}
    assert om_types == {name: ("unknown" if t == "counter" else t) for name, t in types.items()}


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_prometheus_text_parser_reads_them_as_counters(schema: dcgm.Schema) -> None:
    """promtool parses the text body with Prometheus' own parser: no error, and it lints exactly
    the compat counters for their missing `_total` — so it read them as counters."""
    promtool = shutil.which("promtool")
    assert promtool, "Debian's promtool is not installed (make test installs it)"
    compat = second_cycle(schema, node(full_h100()), node(full_h100()))
    body = text_of(snapshot_of(node(full_h100((2000, 1500)))), compat)
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
    output = (result.stdout + result.stderr).decode()
    assert "error while linting" not in output
    linted = set(
        re.findall(r'^(DCGM_\w+) counter metrics should have "_total" suffix', output, re.M)
    )
    assert linted == counter_names(schema)


GOLDEN = {schema: FIXTURES / f"dcgm_compat_{schema}.txt" for schema in dcgm.SCHEMAS}


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_compat_body_matches_its_golden_excerpt(schema: dcgm.Schema) -> None:
    """The compat block of the text body for one H100 in its second cycle (NVLink rate, Xid 13),
    byte for byte. UPDATE_GOLDEN=1 rewrites the files; review their diff."""
    compat = second_cycle(schema, node(full_h100()), node(full_h100()))
    body = text_of(snapshot_of(node(full_h100((2000, 1500), {13: 1}))), compat).decode()
    # The compat families sit between ours and the exporter's own, which close every body.
    excerpt = body[body.index("# HELP DCGM_") : body.index(EXPORTER_FAMILIES.decode())]
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN[schema].write_text(excerpt)
    assert excerpt == GOLDEN[schema].read_text()


def test_off_by_default_and_the_default_body_is_unchanged() -> None:
    snapshot = snapshot_of(node(full_h100()))
    default = render(snapshot).body("", gzipped=False)[0]
    assert b"DCGM_" not in default
    with_compat = text_of(snapshot)
    start, end = with_compat.index(b"# HELP DCGM_"), with_compat.index(EXPORTER_FAMILIES)
    assert with_compat[:start] + with_compat[end:] == default
    assert render(snapshot, ()).body("", gzipped=False)[0] == default


@pytest.mark.parametrize(
    ("args", "schema"),
    [
        ([], None),
        (["--compat.dcgm-exporter"], "classic"),  # the flag alone: as before schemas existed
        (["--compat.dcgm-exporter=classic"], "classic"),
        (["--compat.dcgm-exporter=4.8.3"], "4.8.3"),
        (["--compat.dcgm-exporter=4.9"], "4.9"),
        (["--compat.dcgm-exporter=4.9", "--no-compat.dcgm-exporter"], None),
        (["--no-compat.dcgm-exporter"], None),
    ],
)
def test_the_flag_chooses_the_schema(args: list[str], schema: str | None) -> None:
    assert build_parser().parse_args(["serve", *args]).dcgm_compat == schema


def test_an_unknown_schema_is_one_line_and_exit_2() -> None:
    command = exporter_command("serve", "--compat.dcgm-exporter=4.7")
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "invalid choice: '4.7'" in line and "'4.9'" in line
    with pytest.raises(ValueError, match="unknown dcgm-exporter schema"):
        DcgmCompat("n", "4.7")  # type: ignore[arg-type]


SMALL_NODE = """
driver_version: "550.54.15"
devices:
  - readings: {utilization: 0.93, memory_used_bytes: 3GiB, power_watts: 250}
  - name: NVIDIA A100-SXM4-40GB
    mig: [{profile: 1g.5gb, gpu_instance_id: 13, memory_total_bytes: 4864MiB}]
"""


def test_collection_loop_renders_compat_families_in_every_format() -> None:
    sampler = SimulatedSampler(Scenario.parse(SMALL_NODE), clock=lambda: 0.0)
    result = CollectionLoop(sampler, 10, None, DcgmCompat("n")).cycle()
    plain, _ = result.body("", gzipped=False)
    assert values(samples(plain), "DCGM_FI_DEV_GPU_UTIL", gpu="0", Hostname="n") == [93]
    assert values(samples(plain), "DCGM_FI_DEV_FB_TOTAL", GPU_I_PROFILE="1g.5gb") == [4864]
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in plain
    om, content_type = result.body(COMMON_ACCEPT_HEADERS[1], gzipped=False)
    assert content_type.startswith("application/openmetrics-text")
    families = {fam.name: fam for fam in om_families(om.decode())}
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert families["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    # Prometheus 3's UTF-8 negotiation reuses the same body: every name is legacy-valid.
    assert result.body(COMMON_ACCEPT_HEADERS[2], gzipped=False)[0] is om


def test_names_and_labels_are_legacy_valid_and_documented() -> None:
    legacy = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    guide = MIGRATION_DOC.read_text()
    for schema in dcgm.SCHEMAS:
        names = (*dcgm.metric_names(schema), *dcgm.label_names(schema))
        assert all(legacy.match(n) for n in names)
        assert not set(dcgm.metric_names(schema)) & set(c.BY_NAME)
        assert [n for n in names if f"`{n}`" not in guide] == []
    metrics_doc = (REPO / "docs" / "metrics.md").read_text()
    assert "--compat.dcgm-exporter" in metrics_doc
    assert "migrating-from-dcgm-exporter.md" in metrics_doc


# --- the migration guide's tables, read back -------------------------------------------------


def guide_table(heading: str) -> list[list[str]]:
    """The cells of the first table under `heading` (`\\|` inside code stays a `|`)."""
    section = MIGRATION_DOC.read_text().split(f"{heading}\n", 1)[1]
    lines = next(part for part in section.split("\n\n") if part.startswith("|")).splitlines()
    rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines[2:]]
    return [[cell.strip().replace("\\|", "|") for cell in row] for row in rows]


def first_code(cell: str) -> str:
    match = re.match(r"`([^`]+)`", cell)
    return match.group(1) if match else "—"


def test_guide_fields_table_is_the_field_table() -> None:
    """One row per field, in the table's order, with both names, the type, whether it is a
    default, and what it is read from; † exactly on the secondhand 4.9 names; the default
    fields that are not served say so, with their reason."""
    rows = guide_table("## The fields")
    served = [row for row in rows if "**not served**" not in row[4]]
    assert [(first_code(r[0]), first_code(r[1])) for r in served] == [
        (x.classic.name if x.classic else "—", x.dcgm47.name if x.dcgm47 else "—")
        for x in dcgm.FIELDS
    ]
    for row, field in zip(served, dcgm.FIELDS, strict=True):
        default = {dcgm.SCHEMAS: "yes", ("4.9",): "4.9", (): "opt-in"}[field.defaults]
        assert (row[2], row[3]) == (field.type, default), row
        assert f"`{field.source}" in row[4], row
    for row in rows:
        for cell in row[:2]:
            name = first_code(cell)
            assert (f"`{name}`†" in cell) == (name in dcgm.SECONDHAND_NAMES), cell
    not_served = [row for row in rows if "**not served**" in row[4]]
    assert [(first_code(r[0]), first_code(r[1])) for r in not_served] == [
        (x.classic, x.dcgm47) for x in dcgm.NOT_SERVED
    ]
    assert all(row[3] == "yes" for row in not_served)


ALERT_HEADING = "### Translating common dcgm-exporter alerts"
TARGET_LABELS = {"job", "instance"}  # Prometheus' own labels on every series


def guide_alerts() -> list[tuple[str, str]]:
    """(schema, expression) of every dcgm-exporter expression in the guide's alert table."""
    out = []
    for row in guide_table(ALERT_HEADING):
        schema = first_code(row[0]) if row[0].startswith("`") else row[0]
        out += [(schema, expr) for expr in re.findall(r"`([^`]+)`", row[1])]
    return out


def test_guide_alert_table_uses_only_what_its_schema_serves() -> None:
    """Each expression names only fields, and selects only labels, that the schema it is
    written for serves; `any` rows use no DCGM field."""
    alerts = guide_alerts()
    assert {schema for schema, _ in alerts} == {*dcgm.SCHEMAS, "any"}
    for schema, expr in alerts:
        fields = re.findall(r"\bDCGM_FI_\w+", expr)
        if schema == "any":
            assert not fields, expr
            continue
        assert fields, expr
        for name in fields:
            assert dcgm.serves(schema, name), f"{schema} does not serve {name}: {expr}"
        for selector in re.findall(r"\bDCGM_FI_\w+\{([^}]*)\}", expr):
            for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector):
                assert label in {*dcgm.label_names(schema), *TARGET_LABELS}, (schema, label, expr)


# --- end to end: the real exporter, a kubelet and Debian's Prometheus ------------------------

NODE_NAME = "gpu-node-7"

# Fields 12239 reads that must come back empty, each with the reason: only what NVML cannot
# give. Nothing else may. Its profiling panels (tensor, the reworked "GPU Utilization") read
# GPM, which the demo's H100s have, so none is expected empty.
EXPECTED_EMPTY: dict[str, str] = {}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panel_params() -> list[Any]:
    return [
        pytest.param(rev["name"], panel["expr"], id=f"{rev['name']}/{panel['title']}")
        for rev in dashboard()["revisions"]
        for panel in rev["panels"]
    ]


@dataclass(frozen=True)
class DemoNode:
    """The demo node as the end-to-end tests set it up, by role (not by index, so the demo
    may gain devices): who holds what, and which GPU runs hot or reported which Xid."""

    prom: Prometheus
    gpus: tuple[str, ...]  # every device's `gpu` label value
    trainer: int  # exclusive holder ml/trainer-0, 86 °C, 61 GiB used, Xid 13
    notebook: int  # exclusive holder lab/notebook-a, idle
    shared: int  # two time-slicing replicas held by lab/share-a and lab/share-b, Xid 79
    partitioned: int  # MIG; its first instance is held by ml/mig-0
    mig_uuid: str
    mig_profile: str
    mig_gi: int
    parent_uuid: str
    tensor_active: dict[str, float]  # `gpu` → the scenario's GPM tensor activity, whole GPUs
    state: Any  # the scenario at t=0 (NodeState): every device's readings


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, generation: Generation) -> Iterator[DemoNode]:
    """The demo scenario's devices with steady readings (timelines dropped), roles assigned to
    its first three whole GPUs and its first MIG GPU, a kubelet holding them, the exporter with
    `--compat.dcgm-exporter`, and Debian's Prometheus scraping it every second."""
    tmp = tmp_path_factory.mktemp("dcgm-compat")
    spec = yaml.safe_load(DEMO.read_text())
    spec.pop("kubelet", None)  # the demo's own kubelet section: this test brings its own
    whole = [i for i, d in enumerate(spec["devices"]) if not d.get("mig")]
    migs = [i for i, d in enumerate(spec["devices"]) if d.get("mig")]
    assert len(whole) >= 3 and migs, "the demo needs 3 whole GPUs and a MIG GPU for this test"
    trainer, notebook, shared = whole[:3]
    for i, device in enumerate(spec["devices"]):
        device.pop("timeline", None)
        readings = device.setdefault("readings", {})
        if i in whole:
            readings.update(temperature_celsius=60, memory_used_bytes="10GiB", utilization=0.5)
    spec["devices"][trainer]["readings"].update(
        temperature_celsius=86, memory_used_bytes="61GiB", utilization=0.93
    )
    spec["devices"][trainer]["timeline"] = [{"at": 0, "xid": [13]}]
    spec["devices"][notebook]["readings"]["utilization"] = 0.0
    spec["devices"][shared]["timeline"] = [{"at": 0, "xid": [79]}]
    text = yaml.safe_dump(spec)
    (tmp / "scenario.yaml").write_text(text)
    state = Scenario.parse(text).state_at(0)
    uuids = [d.uuid for d in state.devices]
    instance = state.devices[migs[0]].mig[0]

    socket = tmp / "kubelet.sock"
    args = [
        "--simulate",
        str(tmp / "scenario.yaml"),
        "--collector.interval=1s",
        f"--kubelet.pod-resources-socket={socket}",
        "--kubelet.interval=1s",
        "--compat.dcgm-exporter",
        f"--kubernetes.node-name={NODE_NAME}",
    ]
    mig_resource = f"nvidia.com/mig-{instance.profile}"
    replicas = [f"{uuids[shared]}::0", f"{uuids[shared]}::1"]
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [
            pod("ml", "trainer-0", container("main", devices("nvidia.com/gpu", uuids[trainer]))),
            pod(
                "lab",
                "notebook-a",
                container("jupyter", devices("nvidia.com/gpu", uuids[notebook])),
            ),
            pod("lab", "share-a", container("main", devices("nvidia.com/gpu", replicas[0]))),
            pod("lab", "share-b", container("main", devices("nvidia.com/gpu", replicas[1]))),
            pod("ml", "mig-0", container("main", devices(mig_resource, instance.uuid))),
        ]
        kubelet.allocatable = [
            devices("nvidia.com/gpu", uuids[trainer], uuids[notebook], *replicas),
            devices(mig_resource, instance.uuid),
        ]
        with (
            run_exporter(args, tmp) as exporter,
            run_prometheus(tmp, [f"127.0.0.1:{exporter.port}"], generation=generation) as prom,
        ):
            prom.wait_for("count_over_time(DCGM_FI_DEV_GPU_TEMP[1m]) >= 3", len(whole) + len(migs))
            prom.wait_for('DCGM_FI_DEV_FB_USED{pod="mig-0"}')
            prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="trainer-0"}')
            yield DemoNode(
                prom=prom,
                gpus=tuple(sorted({str(d.index) for d in state.devices})),
                trainer=trainer,
                notebook=notebook,
                shared=shared,
                partitioned=migs[0],
                mig_uuid=instance.uuid,
                mig_profile=instance.profile,
                mig_gi=instance.gpu_instance_id,
                parent_uuid=uuids[migs[0]],
                tensor_active={
                    str(state.devices[i].index): state.devices[i].readings["tensor_active"]
                    for i in whole
                },
                state=state,
            )


def _label_values(prom: Prometheus, query: str) -> list[str]:
    """Grafana's label_values(selector, label) through Prometheus' label-values API."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip(), flags=re.S)
    assert match, query
    selector, label = match.groups()
    return sorted(prom.api(f"label/{label}/values", **{"match[]": selector}))


def _grafana_all(values_: list[str]) -> str:
    """A multi-value variable set to All, as Grafana interpolates it into a Prometheus query:
    each value regex-escaped (backslashes doubled for the PromQL string), joined in a group."""
    escaped = [re.sub(r"[\\^$*+?.()|{}\[\]]", lambda m: "\\\\" + m.group(0), v) for v in values_]
    return "(" + "|".join(escaped) + ")"


def fill(expr: str, variables: dict[str, str]) -> str:
    built_in = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: {**built_in, **variables}[m.group(1)], expr)


def variables_of(prom: Prometheus, revision: str) -> dict[str, str]:
    """Each query variable in order (a later one may use an earlier one), set to All."""
    (rev,) = [r for r in dashboard()["revisions"] if r["name"] == revision]
    filled: dict[str, str] = {}
    for variable in rev["variables"]:
        found = _label_values(prom, fill(variable["query"], filled))
        assert found, f"variable ${variable['name']} has no values: {variable['query']}"
        filled[variable["name"]] = _grafana_all(found)
    return filled


def test_the_dashboard_variables_find_the_node(demo: DemoNode) -> None:
    every_gpu = "(" + "|".join(demo.gpus) + ")"
    original = variables_of(demo.prom, "original")
    assert original["gpu"] == every_gpu
    assert original["instance"].startswith("(127\\\\.0\\\\.0\\\\.1:")
    reworked = variables_of(demo.prom, "reworked")
    assert reworked == {"Hostname": f"({NODE_NAME})", "gpu": every_gpu}


MIB = 2**20


def expected_panel(demo: DemoNode, revision: str, title: str) -> dict[tuple[str, ...], float]:
    """What a panel of dashboard 12239 must show of the steady scenario, in the classic
    schema's units (°C, W, MHz, %, MiB; profiling fields as ratios), keyed by `gpu` (and
    `GPU_I_ID`, "" on a whole GPU and where the panel drops it). The GPU in MIG mode has no
    utilization and no GPM; its framebuffer is its instances'."""
    devices = {str(d.index): d for d in demo.state.devices}
    whole = {gpu: d for gpu, d in devices.items() if not d.mig}

    def per_gpu(reading: str, scale: float = 1, among: Any = devices) -> dict[Any, float]:
        return {(gpu, ""): d.readings[reading] * scale for gpu, d in among.items()}

    temperatures = per_gpu("temperature_celsius")
    power = per_gpu("power_watts")
    answers: dict[str, dict[Any, float]] = {
        "GPU Temperature": temperatures,
        "GPU Avg. Temp": {(): sum(temperatures.values()) / len(temperatures)},
        "GPU Power Usage": power,
        "GPU Power Total": {(): sum(power.values())},
        "GPU SM Clocks": per_gpu("sm_clock_mhz", 1e6),
        "Tensor Core Utilization": per_gpu("tensor_active", among=whole),
        "GPU Framebuffer Mem Used": {
            **per_gpu("memory_used_bytes", 1 / MIB, among=whole),
            **{
                (gpu, str(m.gpu_instance_id)): m.readings["memory_used_bytes"] / MIB
                for gpu, d in devices.items()
                for m in d.mig
            },
        },
        "GPU Utilization": per_gpu("utilization", 100, among=whole)
        if revision == "original"
        else per_gpu("graphics_active", among=whole),  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
    }
    return answers[title]


@pytest.mark.parametrize(("revision", "expr"), panel_params())
def test_every_dashboard_12239_panel_shows_the_scenario(
    demo: DemoNode, revision: str, expr: str, request: pytest.FixtureRequest
) -> None:
    """Each panel answers what the scenario says, in dcgm-exporter's units; a field compat
    mode cannot serve answers nothing."""
    query = fill(expr, variables_of(demo.prom, revision))
    assert "$" not in query
    result = demo.prom.query(query)
    profiling = [field for field in EXPECTED_EMPTY if field in expr]
    if profiling:
        assert result == [], f"{profiling[0]} should be absent ({EXPECTED_EMPTY[profiling[0]]})"
        return
    title = request.node.callspec.id.split("/", 1)[1]
    keyed = [
        ((r["metric"]["gpu"], r["metric"].get("GPU_I_ID", "")) if "gpu" in r["metric"] else ())
        for r in result
    ]
    assert len(set(keyed)) == len(keyed), f"two series for one device: {result}"
    got = {key: r["value"] for key, r in zip(keyed, result, strict=True)}
    assert got == pytest.approx(expected_panel(demo, revision, title), rel=1e-6), query


def test_expected_empty_panels_are_exactly_what_nvml_cannot_give() -> None:
    """No silent skips: every field the dashboard reads is served by the classic schema it is
    written for, or listed as expected empty because it is a field compat mode cannot serve."""
    exprs = " ".join(p["expr"] for r in dashboard()["revisions"] for p in r["panels"])
    used = set(re.findall(r"DCGM_FI_\w+", exprs))
    not_served = {x.classic for x in dcgm.NOT_SERVED}
    assert set(EXPECTED_EMPTY) <= used & not_served
    assert {name for name in used if not dcgm.serves("classic", name)} == set(EXPECTED_EMPTY)
    assert {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= used


def test_the_tensor_panel_shows_the_h100s_gpm_tensor_activity(demo: DemoNode) -> None:
    """ "Tensor Core Utilization" reads DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: each H100's GPM
    tensor activity (0-1), none for the A100 (Ampere has no GPM)."""
    tensor = _gpus(demo.prom.query("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"))
    assert {gpu: value for gpu, (_, value) in tensor.items()} == demo.tensor_active
    assert str(demo.partitioned) not in tensor


def test_openmetrics_scrapes_record_compat_counters_as_unknown(demo: DemoNode) -> None:
    """Prometheus negotiates OpenMetrics, where a counter's samples must end in `_total`:
    there the compat counters are `unknown` (the text format types them `counter`)."""
    metadata = demo.prom.api("metadata", metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert [m["type"] for m in metadata["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]] == ["unknown"]
    rising = _gpus(demo.prom.query("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) > 0"))
    assert set(rising) == set(demo.gpus) - set(
        _gpus(demo.prom.query("DCGM_FI_DEV_POWER_USAGE == 0"))
    )


def _gpus(result: list[dict[str, Any]]) -> dict[str, tuple[dict[str, str], float]]:
    return {r["metric"]["gpu"]: (r["metric"], r["value"]) for r in result}


def test_common_dcgm_exporter_alerts_still_fire(demo: DemoNode) -> None:
    trainer, shared = str(demo.trainer), str(demo.shared)
    hot = _gpus(demo.prom.query("DCGM_FI_DEV_GPU_TEMP > 80"))
    assert set(hot) == {trainer}
    labels, value = hot[trainer]
    assert value == 86
    assert (labels["namespace"], labels["pod"], labels["Hostname"]) == (
        "ml",
        "trainer-0",
        NODE_NAME,
    )

    ratio = "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.7"
    assert set(_gpus(demo.prom.query(ratio))) == {trainer}  # 61 GiB of 80 GiB less reserved

    xids = _gpus(demo.prom.query("DCGM_FI_DEV_XID_ERRORS > 0"))
    assert {gpu: value for gpu, (_, value) in xids.items()} == {trainer: 13, shared: 79}
    critical = demo.prom.query('DCGM_FI_DEV_XID_ERRORS{err_code=~"48|63|64|74|79|94|95"}')
    assert [(r["metric"]["gpu"], r["metric"]["err_msg"]) for r in critical] == [
        (shared, "GPU has fallen off the bus")
    ]

    idle = demo.prom.query('DCGM_FI_DEV_GPU_UTIL{pod!=""} == 0')
    assert [(r["metric"]["namespace"], r["metric"]["pod"]) for r in idle] == [("lab", "notebook-a")]


def test_energy_counter_rate_is_the_power_draw(demo: DemoNode) -> None:
    """mJ as dcgm-exporter counts them: rate() / 1000 is watts. The window is shorter than the
    series' life, or rate() would extrapolate over the time before the exporter started."""
    demo.prom.wait_for("count_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[10s]) >= 8")

    def agreeing() -> dict[str, tuple[dict[str, str], float]] | None:
        """Every GPU's rate within 15 % of its power draw. On two loaded cores one 5 s window
        can hold a scrape taken late, so the comparison is polled, not taken once."""
        watts = _gpus(demo.prom.query("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) / 1000"))
        power = _gpus(demo.prom.query("DCGM_FI_DEV_POWER_USAGE"))
        assert watts.keys() == power.keys()
        agree = all(
            watts[gpu][1] == pytest.approx(draw, rel=0.15) for gpu, (_, draw) in power.items()
        )
        return watts if agree else None

    wait_until(agreeing, timeout=30, what="the energy counter's rate to match the power draw")


def test_shared_gpu_once_without_pod_labels_mig_with_its_pod(demo: DemoNode) -> None:
    shared = demo.prom.query(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{demo.shared}"}}')
    assert len(shared) == 1
    assert not {"pod", "namespace", "container"} & set(shared[0]["metric"])
    holders = demo.prom.query(f'nvidia_gpu_allocation_info{{gpu="{demo.shared}"}}')
    assert sorted((r["metric"]["pod"], r["metric"]["sharing"]) for r in holders) == [
        ("share-a", "shared"),
        ("share-b", "shared"),
    ]

    (mig_fb,) = demo.prom.query(f'DCGM_FI_DEV_FB_USED{{GPU_I_PROFILE="{demo.mig_profile}"}}')
    assert mig_fb["metric"]["pod"] == "mig-0"
    assert mig_fb["metric"]["UUID"] == demo.parent_uuid  # the GPU's, as dcgm-exporter has it
    assert mig_fb["metric"]["gpu"] == str(demo.partitioned)
    assert mig_fb["metric"]["GPU_I_ID"] == str(demo.mig_gi)
    # The partitioned GPU's own series: once, no MIG labels, no pod.
    (temp,) = demo.prom.query(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{demo.partitioned}"}}')
    assert not {"GPU_I_ID", "pod"} & set(temp["metric"])
    # Our own series are still served beside them, in our units (a ratio, not DCGM's %).
    ours = demo.prom.query(f'nvidia_gpu_utilization_ratio{{gpu="{demo.trainer}"}}')
    assert [r["value"] for r in ours] == [0.93]
    (dcgm_util,) = demo.prom.query(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{demo.trainer}"}}')
    assert dcgm_util["value"] == 93


def test_prometheus_records_compat_counters_as_counters_from_the_text_format(
    tmp_path: Path,
    generation: Generation,
) -> None:
    """A text-format scrape (what dcgm-exporter serves, and what a job limited to
    `scrape_protocols: [PrometheusText0.0.4]` asks for) types them `counter` in Prometheus."""
    compat = second_cycle("classic", node(full_h100()), node(full_h100()))
    body = text_of(snapshot_of(node(full_h100((2000, 1500)))), compat).decode()
    with (
        serve_exposition(body) as target,
        run_prometheus(tmp_path, [target], generation=generation) as prom,
    ):
        prom.wait_for("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        for name in counter_names("classic"):
            metadata = prom.api("metadata", metric=name)
            assert [m["type"] for m in metadata[name]] == ["counter"], name
        metadata = prom.api("metadata", metric="DCGM_FI_DEV_GPU_TEMP")
        assert [m["type"] for m in metadata["DCGM_FI_DEV_GPU_TEMP"]] == ["gauge"]


# --- each schema served by the real exporter -------------------------------------------------


@pytest.fixture(scope="module")
def schemas(
    tmp_path_factory: pytest.TempPathFactory, generation: Generation
) -> Iterator[Prometheus]:
    """The demo scenario served three times, `--compat.dcgm-exporter=<schema>` each, scraped
    by one Prometheus as the jobs `compat-<schema>`."""
    tmp = tmp_path_factory.mktemp("dcgm-schemas")
    common = [
        "--simulate",
        str(DEMO),
        "--collector.interval=1s",
        f"--kubernetes.node-name={NODE_NAME}",
    ]
    with (
        run_exporter([*common, "--compat.dcgm-exporter"], tmp) as classic,
        run_exporter([*common, "--compat.dcgm-exporter=4.8.3"], tmp) as v483,
        run_exporter([*common, "--compat.dcgm-exporter=4.9"], tmp) as v49,
    ):
        targets = {"classic": classic, "4.8.3": v483, "4.9": v49}
        jobs = {f"compat-{s}": [f"127.0.0.1:{e.port}"] for s, e in targets.items()}
        first, *rest = jobs.items()
        with run_prometheus(
            tmp, first[1], job=first[0], extra_jobs=dict(rest), generation=generation
        ) as prom:
            prom.wait_for('count_over_time(DCGM_FI_DEV_GPU_TEMP{job="compat-4.8.3"}[1m]) >= 2')
            prom.wait_for("count_over_time(DCGM_FI_DEV_GPU_TEMP_CELSIUS[1m]) >= 2")
            prom.wait_for('DCGM_FI_DEV_GPU_TEMP{job="compat-classic"}')
            yield prom


@pytest.mark.parametrize(("schema", "expr"), guide_alerts())
def test_guide_alert_expressions_run_on_their_schema(
    schemas: Prometheus, schema: str, expr: str
) -> None:
    """Every expression of the guide's alert table is valid PromQL, and every DCGM field it
    reads has series from the exporter serving the schema it is written for."""
    schemas.query(expr)  # raises unless Prometheus accepts it
    for name in re.findall(r"\bDCGM_FI_\w+", expr):
        assert schemas.query(f'{name}{{job="compat-{schema}"}}'), f"no {name} in {schema}"


@pytest.mark.parametrize("schema", dcgm.SCHEMAS)
def test_each_schema_is_served_with_its_names_units_and_labels(
    schemas: Prometheus, schema: dcgm.Schema
) -> None:
    job = f'job="compat-{schema}"'
    names = set(
        schemas.api("label/__name__/values", **{"match[]": f'{{{job}, __name__=~"DCGM_.*"}}'})
    )
    assert names <= set(dcgm.metric_names(schema))
    assert {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"} & names
    host, driver = dcgm.LABELS[schema].hostname, dcgm.LABELS[schema].driver
    temp = "DCGM_FI_DEV_GPU_TEMP_CELSIUS" if schema == "4.9" else "DCGM_FI_DEV_GPU_TEMP"
    whole = schemas.query(f'{temp}{{{job}, {host}="{NODE_NAME}", {driver}="550.54.15"}}')
    assert len(whole) == len(schemas.query(f"nvidia_gpu_temperature_celsius{{{job}}}"))
    other_host = "hostname" if host == "Hostname" else "Hostname"
    assert not schemas.query(f'{temp}{{{job}, {other_host}!=""}}')
    # Units: 4.9's ratio and bytes are ours as they are; classic's are % and MiB. One query,
    # so both sides come from the same scrape while the demo's readings move.
    util, fb = ("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES")
    scale = {"util": 1.0, "fb": 1.0}
    if schema != "4.9":
        util, fb, scale = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", {"util": 0.01, "fb": MIB}
    for key, compat, ours in (
        ("util", util, "nvidia_gpu_utilization_ratio"),
        ("fb", fb, "nvidia_gpu_memory_used_bytes"),
    ):
        diff = schemas.query(
            f'max by (gpu) ({compat}{{{job}, GPU_I_ID=""}}) * {scale[key]}'
            f" - max by (gpu) ({ours}{{{job}}})"
        )
        assert len(diff) >= 3, (compat, diff)
        assert all(abs(r["value"]) < 1e-6 for r in diff), (compat, diff)
