"""`--compat.dcgm-exporter`: dcgm-exporter's names, units and labels beside ours.

Unit tests render built snapshots (units, labels, MIG, exclusive versus shared holders, a lost
GPU, the last-Xid gauge). The end-to-end tests run the real exporter on the demo scenario with a
kubelet, scraped by Debian's Prometheus, and run every query of NVIDIA's dashboard 12239 (both
committed revisions, tests/fixtures/dcgm_dashboard_12239.json) with its variables filled in as
Grafana fills them, plus alert expressions as they are written for dcgm-exporter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.exposition import dcgm_compat
from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat
from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS, render
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
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
from prometheus_server import Prometheus, run_prometheus
from support import run_exporter, samples, values

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"
DASHBOARD = Path(__file__).parent / "fixtures" / "dcgm_dashboard_12239.json"
MIGRATION_DOC = REPO / "docs" / "migrating-from-dcgm-exporter.md"
GIB, MIB = float(1 << 30), float(1 << 20)

# --- unit tests on built snapshots -------------------------------------------------------------

H100 = DeviceIdentity(0, "GPU-aaaaaaaa", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
H100B = DeviceIdentity(1, "GPU-bbbbbbbb", "NVIDIA H100 80GB HBM3", "00000000:19:00.0")
H100C = DeviceIdentity(2, "GPU-cccccccc", "NVIDIA H100 80GB HBM3", "00000000:1A:00.0")
A100 = DeviceIdentity(3, "GPU-dddddddd", "NVIDIA A100-SXM4-40GB", "00000000:1B:00.0")


def mig(uuid: str, profile: str, gi: int, ci: int = 0) -> DeviceIdentity:
    return DeviceIdentity(
        index=A100.index,
        uuid=uuid,
        model=f"{A100.model} MIG {profile}",  # as NVML names a MIG device
        pci_bus_id="",
        parent_uuid=A100.uuid,
        mig_profile=profile,
        gpu_instance_id=gi,
        compute_instance_id=ci,
    )


MIG_3G = mig("MIG-33333333", "3g.20gb", 1)
MIG_2G_CI0 = mig("MIG-22222220", "2g.10gb", 5, 0)  # one GPU instance, two compute instances
MIG_2G_CI1 = mig("MIG-22222221", "2g.10gb", 5, 1)

GPU_VALUES = {
    c.UTILIZATION.name: 0.93,
    c.MEMORY_BANDWIDTH_UTILIZATION.name: 0.61,
    c.MEMORY_USED.name: 61 * GIB,
    c.MEMORY_TOTAL.name: 80 * GIB,
    c.MEMORY_RESERVED.name: 512 * MIB,
    c.TEMPERATURE.name: 71.0,
    c.POWER.name: 612.5,
    c.POWER_LIMIT.name: 700.0,
    c.ENERGY.name: 1234.567,
    c.SM_CLOCK.name: 1980e6,
    c.MEMORY_CLOCK.name: 2619e6,
    c.ECC_CORRECTED.name: 3.0,
    c.ECC_UNCORRECTED.name: 0.0,
}
A100_VALUES = {
    c.MEMORY_USED.name: 15 * GIB,  # NVML's sum over the instances: never emitted (theirs are)
    c.MEMORY_TOTAL.name: 40 * GIB,
    c.TEMPERATURE.name: 44.0,
    c.POWER.name: 180.0,
    c.SM_CLOCK.name: 1410e6,
}


def mig_values(used_gib: float, total_mib: float) -> dict[str, float]:
    return {
        c.MEMORY_USED.name: used_gib * GIB,
        c.MEMORY_TOTAL.name: total_mib * MIB,
        c.MEMORY_RESERVED.name: 0.0,
    }


def node(*devices: DeviceSample) -> NodeSample:
    return NodeSample(nvml_up=True, driver_version="550.54.15", devices=devices)


def snapshot_of(node_sample: NodeSample, attribution: AttributionSample | None = None) -> Snapshot:
    state = ExporterState(0.01, 1_790_000_000.0, 1, {"init": 0})
    return Snapshot(node_sample, state, 1_790_000_000.0, attribution)


def body_of(snapshot: Snapshot, compat: DcgmCompat | None = None) -> bytes:
    compat = compat or DcgmCompat(hostname="node-a")
    return render(snapshot, compat.families(snapshot)).body("", gzipped=False)[0]


def series(body: bytes, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), v) for (n, labels), v in samples(body).items() if n == name]


def allocation(
    device: DeviceIdentity, pod_name: str, sharing: str = "exclusive"
) -> AllocationSample:
    return AllocationSample(device, Holder("ml", pod_name, "main"), "nvidia.com/gpu", sharing)


def attribution(*allocations: AllocationSample) -> AttributionSample:
    return AttributionSample(allocations, (), Capacity(4, {}, {}, 0), {})


def test_units_are_converted_to_dcgm_exporters() -> None:
    body = body_of(snapshot_of(node(DeviceSample(H100, True, GPU_VALUES))))
    gpu0 = {"gpu": "0"}
    assert values(samples(body), "DCGM_FI_DEV_GPU_UTIL", **gpu0) == [93]  # ratio → %
    assert values(samples(body), "DCGM_FI_DEV_MEM_COPY_UTIL", **gpu0) == [61]
    assert values(samples(body), "DCGM_FI_DEV_FB_USED", **gpu0) == [61 * 1024]  # bytes → MiB
    assert values(samples(body), "DCGM_FI_DEV_FB_RESERVED", **gpu0) == [512]
    assert values(samples(body), "DCGM_FI_DEV_FB_TOTAL", **gpu0) == [80 * 1024]
    # DCGM's free is what is neither used nor reserved: used + free + reserved = total.
    assert values(samples(body), "DCGM_FI_DEV_FB_FREE", **gpu0) == [80 * 1024 - 61 * 1024 - 512]
    assert values(samples(body), "DCGM_FI_DEV_GPU_TEMP", **gpu0) == [71]
    assert values(samples(body), "DCGM_FI_DEV_POWER_USAGE", **gpu0) == [612.5]
    assert values(samples(body), "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", **gpu0) == [700]
    assert values(samples(body), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **gpu0) == [1234567]
    assert values(samples(body), "DCGM_FI_DEV_SM_CLOCK", **gpu0) == [1980]  # Hz → MHz
    assert values(samples(body), "DCGM_FI_DEV_MEM_CLOCK", **gpu0) == [2619]
    assert values(samples(body), "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", **gpu0) == [3]
    assert values(samples(body), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **gpu0) == [0]
    # Ours are still there, in base units.
    assert values(samples(body), "nvidia_gpu_utilization_ratio", **gpu0) == [0.93]


def test_percent_and_clock_conversions_leave_no_float_noise() -> None:
    for ratio in (0.07, 0.29, 0.57, 0.93, 0.99):
        assert dcgm_compat.GPU_UTIL.convert(ratio) == round(ratio * 100)
    for mhz in (345, 1410, 1755, 1980, 2619):
        assert dcgm_compat.SM_CLOCK.convert(mhz * 1e6) == mhz
    assert dcgm_compat.TOTAL_ENERGY.convert(123456789 / 1000) == 123456789  # NVML's mJ


def test_device_labels_are_dcgm_exporters() -> None:
    body = body_of(snapshot_of(node(DeviceSample(H100, True, GPU_VALUES))))
    ((labels, _),) = series(body, "DCGM_FI_DEV_GPU_TEMP")
    assert labels == {
        "gpu": "0",
        "UUID": "GPU-aaaaaaaa",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
    }


def test_clock_throttle_reasons_are_the_nvml_bitmask() -> None:
    events = frozenset({"sw_power_cap", "hw_thermal_slowdown"})
    body = body_of(snapshot_of(node(DeviceSample(H100, True, GPU_VALUES, clock_events=events))))
    assert values(samples(body), "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu="0") == [0x4 | 0x40]
    assert values(samples(body), "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == [0x4 | 0x40]


def test_absent_readings_stay_absent() -> None:
    """NOT_SUPPORTED drops the series in both schemas: utilization on a MIG-enabled GPU, power
    on a board without a sensor. Never a 0 that alerts would read as idle."""
    no_power = {k: v for k, v in GPU_VALUES.items() if k != c.POWER.name}
    body = body_of(snapshot_of(node(DeviceSample(H100, True, no_power))))
    assert values(samples(body), "DCGM_FI_DEV_POWER_USAGE") == []
    assert values(samples(body), "DCGM_FI_DEV_GPU_TEMP") == [71]


def mig_node() -> NodeSample:
    return node(
        DeviceSample(A100, True, A100_VALUES, clock_events=frozenset()),
        DeviceSample(MIG_3G, True, mig_values(12, 19968)),
        DeviceSample(MIG_2G_CI0, True, mig_values(3, 9856)),
        DeviceSample(MIG_2G_CI1, True, mig_values(3, 9856)),
    )


def test_mig_instances_carry_their_gpus_identity_and_gpu_instance_labels() -> None:
    body = body_of(snapshot_of(mig_node()))
    used = {labels["GPU_I_ID"]: (labels, v) for labels, v in series(body, "DCGM_FI_DEV_FB_USED")}
    # One series per GPU instance: the 2g.10gb instance's two compute instances are one.
    assert set(used) == {"1", "5"}
    labels, value = used["1"]
    assert value == 12 * 1024
    assert labels == {
        "gpu": "3",
        "UUID": A100.uuid,  # the parent GPU's UUID, as dcgm-exporter reports it
        "pci_bus_id": A100.pci_bus_id,
        "device": "nvidia3",
        "modelName": A100.model,
        "GPU_I_PROFILE": "3g.20gb",
        "GPU_I_ID": "1",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
    }
    assert values(samples(body), "DCGM_FI_DEV_FB_FREE", GPU_I_ID="1") == [19968 - 12 * 1024]


def test_a_partitioned_gpus_device_values_are_emitted_once() -> None:
    """Temperature, power and clocks are the GPU's: one series without MIG labels, not a copy
    per instance (sums such as 12239's "GPU Power Total" stay right). Its framebuffer is its
    instances': no GPU-level FB series to double-count."""
    body = body_of(snapshot_of(mig_node()))
    temps = series(body, "DCGM_FI_DEV_GPU_TEMP")
    assert [(labels.get("GPU_I_ID"), v) for labels, v in temps] == [(None, 44)]
    assert [v for _, v in series(body, "DCGM_FI_DEV_POWER_USAGE")] == [180]
    assert all("GPU_I_ID" in labels for labels, _ in series(body, "DCGM_FI_DEV_FB_USED"))
    assert all("GPU_I_ID" in labels for labels, _ in series(body, "DCGM_FI_DEV_FB_FREE"))
    assert values(samples(body), "DCGM_FI_DEV_GPU_UTIL") == []  # NVML: not on MIG
    assert values(samples(body), "DCGM_FI_DEV_XID_ERRORS", gpu="3") == [0]


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
    body = body_of(snapshot)

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
    assert len(values(samples(body), "nvidia_gpu_allocation_info", gpu="1", sharing="shared")) == 2


def test_a_lost_gpu_keeps_only_its_xid_and_the_rest_keep_reporting() -> None:
    snapshot = snapshot_of(
        node(
            DeviceSample(H100, True, GPU_VALUES),
            DeviceSample(H100B, up=False, xid_counts={79: 1}),
        )
    )
    body = body_of(snapshot)
    names = {n for (n, labels), _ in samples(body).items() if ("gpu", "1") in labels}
    assert {n for n in names if n.startswith("DCGM_")} == {"DCGM_FI_DEV_XID_ERRORS"}
    ((labels, value),) = [
        (ls, v) for ls, v in series(body, "DCGM_FI_DEV_XID_ERRORS") if ls["gpu"] == "1"
    ]
    assert value == 79
    assert labels["err_code"] == "79"
    assert labels["err_msg"] == "GPU has fallen off the bus"
    assert values(samples(body), "DCGM_FI_DEV_GPU_TEMP", gpu="0") == [71]
    assert values(samples(body), "nvidia_gpu_up", gpu="1") == [0]


def test_xid_gauge_holds_the_last_xid_as_dcgm_exporter_does() -> None:
    compat = DcgmCompat(hostname="node-a")

    def last_xid(counts: dict[int, int]) -> tuple[float, dict[str, str]]:
        body = body_of(
            snapshot_of(node(DeviceSample(H100, True, GPU_VALUES, xid_counts=counts))), compat
        )
        ((labels, value),) = series(body, "DCGM_FI_DEV_XID_ERRORS")
        return value, labels

    value, labels = last_xid({})
    assert (value, labels["err_code"], "err_msg" in labels) == (0, "0", False)
    assert last_xid({13: 1})[0] == 13
    assert last_xid({13: 1, 31: 1})[0] == 31  # the newest code
    assert last_xid({13: 1, 31: 1})[0] == 31  # nothing new: it stays, never back to 0
    assert last_xid({13: 2, 31: 1})[0] == 13  # a repeat of an older code is the newest
    # Two codes within one cycle: order unknown, a hardware Xid is reported over the other.
    value, labels = last_xid({13: 3, 31: 1, 94: 1})
    assert (value, labels["err_msg"]) == (94, "Contained ECC error")
    assert last_xid({13: 3, 31: 2, 94: 1, 45: 1})[0] == 45  # no hardware code: the highest
    assert last_xid({43: 1})[0] == 43  # counts restarted (a new watcher): 43 is new


def test_off_by_default_and_the_default_body_is_unchanged() -> None:
    snapshot = snapshot_of(node(DeviceSample(H100, True, GPU_VALUES)))
    default = render(snapshot).body("", gzipped=False)[0]
    assert b"DCGM_" not in default
    with_compat = body_of(snapshot)
    assert with_compat.startswith(default.split(b"# HELP DCGM_")[0])
    assert build_parser().parse_args(["serve"]).dcgm_compat is False
    assert build_parser().parse_args(["serve", "--compat.dcgm-exporter"]).dcgm_compat is True


SMALL_NODE = """
driver_version: "550.54.15"
devices:
  - readings: {utilization: 0.93, memory_used_bytes: 3GiB, power_watts: 250}
  - name: NVIDIA A100-SXM4-40GB
    mig: [{profile: 1g.5gb, gpu_instance_id: 13, memory_total_bytes: 4864MiB}]
"""


def test_collection_loop_renders_compat_families_in_every_format() -> None:
    sampler = SimulatedSampler(Scenario.parse(SMALL_NODE), clock=lambda: 0.0)
    rendered = CollectionLoop(sampler, 10, None, DcgmCompat("n")).cycle()
    plain, _ = rendered.body("", gzipped=False)
    assert values(samples(plain), "DCGM_FI_DEV_GPU_UTIL", gpu="0", Hostname="n") == [93]
    assert values(samples(plain), "DCGM_FI_DEV_FB_TOTAL", GPU_I_PROFILE="1g.5gb") == [4864]
    om, content_type = rendered.body(COMMON_ACCEPT_HEADERS[1], gzipped=False)
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in om_families(om.decode())}
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert families["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    # Prometheus 3's UTF-8 negotiation reuses the same body: every name is legacy-valid.
    assert rendered.body(COMMON_ACCEPT_HEADERS[2], gzipped=False)[0] is om


def test_names_and_labels_are_legacy_valid_and_documented() -> None:
    legacy = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    assert all(legacy.match(n) for n in (*dcgm_compat.METRIC_NAMES, *dcgm_compat.LABEL_NAMES))
    assert not set(dcgm_compat.METRIC_NAMES) & set(c.BY_NAME)
    guide = MIGRATION_DOC.read_text()
    missing = [
        n for n in (*dcgm_compat.METRIC_NAMES, *dcgm_compat.LABEL_NAMES) if f"`{n}" not in guide
    ]
    assert missing == []
    metrics_doc = (REPO / "docs" / "metrics.md").read_text()
    assert "--compat.dcgm-exporter" in metrics_doc
    assert "migrating-from-dcgm-exporter.md" in metrics_doc


# --- end to end: the real exporter, a kubelet and Debian's Prometheus ------------------------

NODE_NAME = "gpu-node-7"

# Queries of 12239 that must come back empty, each with the reason. Nothing else may.
EXPECTED_EMPTY = {
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "a DCGM profiling (DCP) field: tensor-pipe activity is "
    "read from hardware performance counters by DCGM's profiling module; NVML has no such "
    "reading, and a stand-in value would be a lie",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "a DCGM profiling (DCP) field: graphics-engine activity "
    "from DCGM's profiling module; NVML's utilization (DCGM_FI_DEV_GPU_UTIL) is a different, "
    "coarser measure, so it is not served under this name",
}


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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoNode]:
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
            run_prometheus(tmp, [f"127.0.0.1:{exporter.port}"]) as prom,
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


@pytest.mark.parametrize(("revision", "expr"), panel_params())
def test_every_dashboard_12239_query_returns_data(demo: DemoNode, revision: str, expr: str) -> None:
    query = fill(expr, variables_of(demo.prom, revision))
    assert "$" not in query
    result = demo.prom.query(query)
    profiling = [field for field in EXPECTED_EMPTY if field in expr]
    if profiling:
        assert result == [], f"{profiling[0]} should be absent ({EXPECTED_EMPTY[profiling[0]]})"
    else:
        assert result, f"no data for {query}"


def test_expected_empty_panels_are_exactly_the_profiling_fields() -> None:
    """No silent skips: every profiling field the dashboard uses is listed with its reason,
    and every listed field is used by the dashboard."""
    exprs = " ".join(p["expr"] for r in dashboard()["revisions"] for p in r["panels"])
    used = set(re.findall(r"DCGM_FI_PROF_\w+", exprs))
    assert used == set(EXPECTED_EMPTY)
    assert not any(name.startswith("DCGM_FI_PROF_") for name in dcgm_compat.METRIC_NAMES)


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
    watts = _gpus(demo.prom.query("rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) / 1000"))
    power = _gpus(demo.prom.query("DCGM_FI_DEV_POWER_USAGE"))
    assert watts.keys() == power.keys()
    for gpu, (_, draw) in power.items():
        assert watts[gpu][1] == pytest.approx(draw, rel=0.15)


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
    # Our own series are still served beside them.
    assert demo.prom.query(f'nvidia_gpu_utilization_ratio{{gpu="{demo.trainer}"}}')
