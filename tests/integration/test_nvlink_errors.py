"""NVLink error counters through the real pynvml, over the fake libnvidia-ml.

They come with the other field values in one batched call per GPU: each link has its own field
id per error type (nvml.h's _L0…_L11), asked once the link count is known. A GPU without NVLink
reports no links, so none is asked and its series are absent rather than 0. The served counter
keeps counting when NVML's counters go back to 0, so `increase()` in the alert sees only new
errors.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pynvml

from fakenvml import NVLINK_LINK_COUNT_FIELD, write_state
from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.nvml.gpm import MIN_SAMPLE_GAP_SECONDS
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import DeviceSample, NodeSample
from support import run_exporter, values, wait_until

H100 = "GPU-11111111-0000-4000-8000-000000000000"
L40S = "GPU-22222222-0000-4000-8000-000000000000"
H100_SXM = "GPU-33333333-0000-4000-8000-000000000000"
ERRORS = c.NVLINK_ERRORS.name
TYPES = ("crc_flit", "crc_data", "replay", "recovery")
GAP = MIN_SAMPLE_GAP_SECONDS + 0.05

NODE = Scenario.parse(
    f"""
devices:
  - uuid: {H100}
    nvlink_links: 2
    readings: {{nvlink_crc_flit_errors: 5, nvlink_replay_errors: 2, nvlink_recovery_errors: 1}}
    timeline:
      - {{at: 10, readings: {{nvlink_crc_flit_errors: 12, nvlink_recovery_errors: 2}}}}
      - {{at: 20, readings: {{nvlink_crc_flit_errors: 0}}}}  # NVML's counters reset
      - {{at: 30, readings: {{nvlink_crc_flit_errors: 3}}}}
  - uuid: {L40S}
    name: NVIDIA L40S
    readings: {{nvlink_crc_flit_errors: 9}}  # no NVLink: nothing to count it on
  - uuid: {H100_SXM}
    nvlink_links: 18
    unsupported: [nvlink_recovery_errors]
    readings: {{nvlink_replay_errors: 4}}
"""
)


def cycles(state_file: Path, times: list[float]) -> list[dict[str, DeviceSample]]:
    """The sampler's cycles with the scenario at each time, a GPM gap apart."""
    sampler = NvmlSampler(watch_xids=False)
    read: list[dict[str, DeviceSample]] = []
    try:
        for i, t in enumerate(times):
            write_state(state_file, NODE.state_at(t))
            if i:
                time.sleep(GAP)
            node = sampler.sample()
            assert node.errors == {}
            read.append(by_uuid(node))
    finally:
        sampler.close()
    return read


def by_uuid(node: NodeSample) -> dict[str, DeviceSample]:
    return {d.identity.uuid: d for d in node.devices}


def errors_of(device: DeviceSample) -> dict[tuple[str, str], float]:
    """{(link, type): count} of the device's NVLink error series."""
    return {(k[1], k[2]): v for k, v in device.labelled.items() if k[0] == ERRORS}


def test_the_fake_answers_each_links_own_field_ids(nvml_state: Path) -> None:
    write_state(nvml_state, NODE.state_at(0))
    pynvml.nvmlInit()
    ids = [
        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L1,
        pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L2,  # the GPU has two links
        pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L1,
    ]
    h100 = pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(0), ids)
    assert [e.nvmlReturn for e in h100] == [pynvml.NVML_SUCCESS] * 2 + [
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_SUCCESS,
    ]
    assert {e.valueType for e in h100[:2]} == {pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG}
    assert [_ull(e) for e in h100] == [5, 5, None, 1]
    # Without NVLink: NOT_SUPPORTED for the link count and for every error field.
    l40s = pynvml.nvmlDeviceGetFieldValues(
        pynvml.nvmlDeviceGetHandleByIndex(1), [NVLINK_LINK_COUNT_FIELD, *ids]
    )
    assert {e.nvmlReturn for e in l40s} == {pynvml.NVML_ERROR_NOT_SUPPORTED}
    # Links 6-11 have ids of their own elsewhere in nvml.h; link 11 is the last one with any.
    sxm = pynvml.nvmlDeviceGetFieldValues(
        pynvml.nvmlDeviceGetHandleByIndex(2),
        [
            pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6,
            pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L11,
            pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0,  # declared unsupported
        ],
    )
    assert [_ull(e) for e in sxm] == [4, 4, None]


def _ull(entry: Any) -> int | None:
    return int(entry.value.ullVal) if entry.nvmlReturn == pynvml.NVML_SUCCESS else None


def test_the_sampler_reads_every_link_and_type_from_the_second_cycle(nvml_state: Path) -> None:
    first, second, later = cycles(nvml_state, [0, 0, 10])
    assert errors_of(first[H100]) == {}  # the link count comes with the first batch
    assert errors_of(second[H100]) == {
        (link, kind): {"crc_flit": 5, "crc_data": 0, "replay": 2, "recovery": 1}[kind]
        for link in ("0", "1")
        for kind in TYPES
    }
    assert errors_of(later[H100])[("1", "crc_flit")] == 12
    assert errors_of(later[H100])[("0", "recovery")] == 2


def test_a_gpu_without_nvlink_has_no_error_series_at_all(nvml_state: Path) -> None:
    for cycle in cycles(nvml_state, [0, 0, 10]):
        assert errors_of(cycle[L40S]) == {}
        assert cycle[L40S].up and cycle[L40S].values[c.MEMORY_TEMPERATURE.name] == 40


def test_twelve_of_eighteen_links_and_an_unsupported_type_dropped_alone(
    nvml_state: Path,
) -> None:
    *_, last = cycles(nvml_state, [0, 0])
    sxm = errors_of(last[H100_SXM])
    assert {link for link, _ in sxm} == {str(n) for n in range(12)}  # nvml.h has ids for 0-11
    assert {kind for _, kind in sxm} == {"crc_flit", "crc_data", "replay"}
    assert sxm[("11", "replay")] == 4
    nvlink_tx = {k[1] for k in last[H100_SXM].labelled if k[0] == c.NVLINK_TRANSMIT_BYTES.name}
    assert len(nvlink_tx) == 18  # the byte counters take the link as scopeId: every link


def test_the_simulated_backend_plays_what_nvml_reads(nvml_state: Path) -> None:
    *_, last = cycles(nvml_state, [0, 0])
    assert last == by_uuid(node_sample(NODE.state_at(0)))


def test_the_served_counter_keeps_counting_across_a_reset(nvml_state: Path) -> None:
    """NVML's counters set back to 0 (a reset of the GPU's counters): the served total goes on
    from where it was, so increase() over a window holding the reset counts only new errors."""
    served = [
        errors_of(cycle[H100])[("0", "crc_flit")]
        for cycle in cycles(nvml_state, [0, 0, 10, 20, 30])[1:]
    ]
    assert served == [5, 12, 12, 15]


def test_the_exporter_serves_the_counters_with_link_and_type(
    nvml_env: dict[str, str], tmp_path: Path
) -> None:
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), NODE.state_at(0))
    with run_exporter(["--collector.interval=1s"], tmp_path, env=nvml_env) as exporter:
        wait_until(
            lambda: values(exporter.metrics(), "nvidia_gpu_nvlink_errors_total", uuid=H100),
            what="NVLink error series",
        )
        metrics = exporter.metrics()
    h100 = values(metrics, "nvidia_gpu_nvlink_errors_total", uuid=H100, gpu="0")
    assert len(h100) == 2 * 4
    link1 = values(metrics, "nvidia_gpu_nvlink_errors_total", uuid=H100, link="1")
    assert sorted(link1) == [0, 1, 2, 5]  # crc_data, recovery, replay, crc_flit
    recovery = values(metrics, "nvidia_gpu_nvlink_errors_total", uuid=H100, type="recovery")
    assert recovery == [1, 1]
    assert values(metrics, "nvidia_gpu_nvlink_errors_total", uuid=L40S) == []
    assert len(values(metrics, "nvidia_gpu_nvlink_errors_total", uuid=H100_SXM)) == 12 * 3
