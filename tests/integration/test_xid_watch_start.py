"""The NVML sampler's Xid watch start, through the real pynvml over the fake libnvidia-ml:
when the counts began, renewed with the NVML session (a re-initialised driver counts anew),
and no Xid counter before its first event."""

from __future__ import annotations

import time
from pathlib import Path

import pynvml

from fakenvml import write_state
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.simulated.scenario import Scenario

NODE = Scenario.parse(
    """
driver_version: "550.54.15"
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""
)


def test_the_watch_start_is_when_the_session_began_counting(nvml_state: Path) -> None:
    write_state(nvml_state, NODE.state_at(0))
    before = time.time()
    sampler = NvmlSampler()
    try:
        first = sampler.sample()
        after = time.time()
        assert first.xid_watch_start is not None
        assert before <= first.xid_watch_start <= after
        assert all(d.xid_counts == {} for d in first.devices)  # no code served at 0
        assert sampler.sample().xid_watch_start == first.xid_watch_start
        # A driver replaced under the sampler: NVML re-initialises and the counts start over.
        mismatch = {
            (index, "nvmlDeviceGetMemoryInfo_v2"): pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
            for index in range(2)
        }
        write_state(nvml_state, NODE.state_at(0), errors=mismatch)
        broken = sampler.sample()
        assert not broken.nvml_up and broken.xid_watch_start is None
        write_state(nvml_state, NODE.state_at(0))
        renewed = sampler.sample()
        assert renewed.nvml_up and renewed.xid_watch_start is not None
        assert renewed.xid_watch_start > first.xid_watch_start
    finally:
        sampler.close()


def test_no_watch_no_start(nvml_state: Path) -> None:
    write_state(nvml_state, NODE.state_at(0))
    sampler = NvmlSampler(watch_xids=False)
    try:
        assert sampler.sample().xid_watch_start is None
    finally:
        sampler.close()
