"""Rendering a snapshot: the label model, absent-versus-zero, and both exposition formats."""

from __future__ import annotations

import gzip

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

from kube_gpu_exporter.exporter import catalog
from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import samples, values

NODE = """
driver_version: "550.54.15"
devices:
  - uuid: GPU-aaaaaaaa-0000-4000-8000-000000000000
    readings: {utilization: 0.75, memory_used_bytes: 3GiB, temperature_celsius: 66,
               power_watts: 250.5, sm_clock_mhz: 1500, clock_events: [sw_power_cap]}
    timeline: [{at: 0, xid: [13, 79, 79]}]
  - uuid: GPU-bbbbbbbb-0000-4000-8000-000000000000
    name: NVIDIA A100-SXM4-40GB
    unsupported: [power_watts, ecc]
    mig:
      - {profile: 1g.5gb, gpu_instance_id: 13, uuid: MIG-cccccccc-0000-4000-8000-000000000000,
         memory_total_bytes: 4864MiB, readings: {memory_used_bytes: 1GiB}}
  - uuid: GPU-dddddddd-0000-4000-8000-000000000000
    timeline: [{at: 0, lost: true}]
"""


def render_node(text: str = NODE, accept: str = "", gzipped: bool = False) -> tuple[bytes, str]:
    loop = CollectionLoop(SimulatedSampler(Scenario.parse(text), clock=lambda: 0.0), 10)
    return loop.cycle().body(accept, gzipped)


def test_device_values_in_base_units_with_identity_labels() -> None:
    parsed = samples(render_node()[0])
    gpu0 = {"gpu": "0", "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_utilization_ratio", **gpu0) == [0.75]
    assert values(parsed, "nvidia_gpu_memory_used_bytes", **gpu0) == [3 * 2**30]
    assert values(parsed, "nvidia_gpu_power_watts", **gpu0) == [250.5]
    assert values(parsed, "nvidia_gpu_sm_clock_hertz", **gpu0) == [1.5e9]
    assert values(parsed, "nvidia_gpu_temperature_celsius", **gpu0) == [66]
    info = values(
        parsed, "nvidia_gpu_info", model="NVIDIA H100 80GB HBM3", driver_version="550.54.15"
    )
    assert len(info) == 2  # GPU 0 and the lost GPU 2 share the default model


def test_clock_events_are_a_state_set_and_xids_count_per_code() -> None:
    parsed = samples(render_node()[0])
    events = {
        dict(labels)["reason"]: v
        for (name, labels), v in parsed.items()
        if name == "nvidia_gpu_clock_event_active" and ("gpu", "0") in labels
    }
    assert set(events) == set(catalog.CLOCK_EVENT_REASONS)
    assert {r for r, v in events.items() if v == 1} == {"sw_power_cap"}
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="0", xid="79") == [2]
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="0", xid="13") == [1]


def test_watched_xid_counters_exist_at_zero_on_every_gpu() -> None:
    """`--collector.xid-codes` (none by default): for queries of one's own that need
    increase() to see a first event and an exporter restart as a reset."""
    sampler = SimulatedSampler(Scenario.parse(NODE), clock=lambda: 0.0, xid_codes=(48, 79))
    parsed = samples(CollectionLoop(sampler, 10).cycle().body("", False)[0])
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="0", xid="48") == [0]
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="0", xid="79") == [2]
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="0", xid="13") == [1]  # seen
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="1", xid="48") == [0]
    assert values(parsed, "nvidia_gpu_xid_errors_total", gpu="2", xid="79") == [0]  # lost too
    # MIG instances have no Xid counters of their own: their GPU's are theirs.
    mig = {"uuid": "MIG-cccccccc-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_xid_errors_total", **mig) == []


def test_mig_instance_has_own_uuid_parent_and_no_utilization() -> None:
    parsed = samples(render_node()[0])
    mig = {"uuid": "MIG-cccccccc-0000-4000-8000-000000000000"}
    assert values(
        parsed,
        "nvidia_gpu_info",
        **mig,
        mig_profile="1g.5gb",
        gpu="1",
        parent_uuid="GPU-bbbbbbbb-0000-4000-8000-000000000000",
        gpu_instance_id="13",
        compute_instance_id="0",
    ) == [1]
    assert values(parsed, "nvidia_gpu_memory_used_bytes", **mig) == [2**30]
    # Utilization is unsupported on MIG: absent, never 0 — on the instance and on its parent.
    assert values(parsed, "nvidia_gpu_utilization_ratio", gpu="1") == []


def test_unsupported_readings_drop_only_their_series() -> None:
    parsed = samples(render_node()[0])
    gpu1 = {"uuid": "GPU-bbbbbbbb-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_power_watts", **gpu1) == []
    assert values(parsed, "nvidia_gpu_ecc_uncorrected_errors_total", **gpu1) == []
    assert values(parsed, "nvidia_gpu_temperature_celsius", **gpu1) == [35]


def test_profiling_counters_and_shares_render_with_their_labels() -> None:
    parsed = samples(
        render_node(
            """
devices:
  - uuid: GPU-aaaaaaaa-0000-4000-8000-000000000000
    nvlink_links: 2
    unsupported: [fp64_active, remapped_rows]
    readings: {sm_active: 0.5, tensor_active: 0.25, nvlink_transmit_bytes: 4096,
               pcie_receive_bytes_per_second: 1048576, nvlink_recovery_errors: 3}
  - name: NVIDIA A100-SXM4-40GB
    unsupported: [gpm]
    mig:
      - {profile: 3g.20gb, gpu_instance_id: 2, uuid: MIG-cccccccc-0000-4000-8000-000000000000,
         memory_total_bytes: 20GiB}
"""
        )[0]
    )
    gpu0 = {"uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_sm_active_ratio", **gpu0) == [0.5]
    assert values(parsed, "nvidia_gpu_tensor_active_ratio", **gpu0) == [0.25]
    assert values(parsed, "nvidia_gpu_pcie_receive_bytes_per_second", **gpu0) == [1 << 20]
    assert values(parsed, "nvidia_gpu_fp64_active_ratio", **gpu0) == []  # that one alone
    assert values(parsed, "nvidia_gpu_fp32_active_ratio", **gpu0) == [0]
    assert values(parsed, "nvidia_gpu_nvlink_transmit_bytes_total", link="1", **gpu0) == [4096]
    assert len(values(parsed, "nvidia_gpu_nvlink_transmit_bytes_total", **gpu0)) == 2
    errors = "nvidia_gpu_nvlink_errors_total"
    assert values(parsed, errors, link="1", type="recovery", **gpu0) == [3]
    assert values(parsed, errors, link="0", type="crc_flit", **gpu0) == [0]
    assert len(values(parsed, errors, **gpu0)) == 2 * 4  # links × types
    assert len(values(parsed, errors)) == 2 * 4  # the A100 has no NVLink: no series at all
    assert values(parsed, "nvidia_gpu_remapped_rows", **gpu0) == []
    reasons = values(parsed, "nvidia_gpu_clock_event_duration_seconds_total", **gpu0)
    assert reasons == [0, 0, 0]
    # An Ampere GPU has no GPM: neither it nor its MIG instance has profiling series.
    assert len(values(parsed, "nvidia_gpu_sm_active_ratio")) == 1
    mig = {"uuid": "MIG-cccccccc-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_share_ratio", **mig) == [3 / 7]
    assert values(parsed, "nvidia_gpu_share_ratio", **gpu0) == [1]
    # The simulated backend cannot tell whether it would see the host's processes.
    assert values(parsed, "kube_gpu_exporter_host_pid_namespace") == []


def test_lost_gpu_is_down_and_the_rest_keep_reporting() -> None:
    parsed = samples(render_node()[0])
    lost = {"uuid": "GPU-dddddddd-0000-4000-8000-000000000000"}
    assert values(parsed, "nvidia_gpu_up", **lost) == [0]
    assert values(parsed, "nvidia_gpu_temperature_celsius", **lost) == []
    assert values(parsed, "nvidia_gpu_up", gpu="0") == [1]
    assert values(parsed, "kube_gpu_exporter_collection_errors_total", kind="gpu_is_lost") == [1]
    assert values(parsed, "kube_gpu_exporter_collection_errors_total", kind="init") == [0]


def test_every_rendered_metric_is_in_the_catalog_with_its_type() -> None:
    body, content_type = render_node(accept="application/openmetrics-text;version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = list(om_families(body.decode()))
    assert families, "nothing rendered"
    for family in families:
        metric = next(m for m in catalog.ALL_METRICS if m.family == family.name)
        assert family.type == metric.type.value
        assert family.documentation == metric.help


def test_gzip_body_is_the_same_exposition() -> None:
    loop = CollectionLoop(SimulatedSampler(Scenario.parse(NODE), clock=lambda: 0.0), 10)
    rendered = loop.cycle()
    plain, _ = rendered.body("", gzipped=False)
    zipped, _ = rendered.body("", gzipped=True)
    assert gzip.decompress(zipped) == plain


def test_catalog_names_follow_prometheus_conventions() -> None:
    for metric in catalog.ALL_METRICS:
        prefixes = ("kube_gpu_",) if metric.scope is catalog.Scope.CLUSTER else ()
        assert metric.name.startswith(("nvidia_gpu_", "kube_gpu_exporter_", *prefixes))
        if metric.type is catalog.MetricType.COUNTER:
            assert metric.name.endswith("_total")
        if metric.unit:
            assert metric.family.endswith("_" + metric.unit)
    assert len(catalog.BY_NAME) == len(catalog.ALL_METRICS)


def test_every_catalog_metric_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    missing = [m.name for m in catalog.ALL_METRICS if f"`{m.name}" not in doc]
    assert missing == []
    assert all(kind in doc for kind in catalog.COLLECTION_ERROR_KINDS)


def test_names_are_legacy_valid_so_escaping_cannot_change_a_body() -> None:
    import re

    legacy = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    for metric in catalog.ALL_METRICS:
        assert legacy.match(metric.name)
        for label in (
            *catalog.DEVICE_LABELS,
            *catalog.MIG_LABELS,
            *catalog.POD_LABELS,
            *metric.labels,
        ):
            assert legacy.match(label)
    loop = CollectionLoop(SimulatedSampler(Scenario.parse(NODE), clock=lambda: 0.0), 10)
    rendered = loop.cycle()
    prometheus2, _ = rendered.body(COMMON_ACCEPT_HEADERS[1], gzipped=False)
    prometheus3, content_type = rendered.body(COMMON_ACCEPT_HEADERS[2], gzipped=False)
    assert "escaping=allow-utf-8" in content_type
    assert prometheus3 is prometheus2  # one render serves both
