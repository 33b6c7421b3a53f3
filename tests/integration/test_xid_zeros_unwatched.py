"""`--collector.xid-codes` zeros only where Xid events are watched, through the real pynvml over
the fake libnvidia-ml.

A counter at 0 says "no such Xid since the watch began". On a GPU whose events NVML would not
register, or with no watch at all, nothing is counted, so a 0 there is a reading NVML could not
give: absent, like every other.
"""

from __future__ import annotations

from pathlib import Path

import pynvml

from fakenvml import write_state
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.simulated.scenario import Scenario

NODE = Scenario.parse(
    """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""
)


def test_a_gpu_whose_events_cannot_be_registered_has_no_zeros(nvml_state: Path) -> None:
    refused = {(1, "nvmlDeviceRegisterEvents"): pynvml.NVML_ERROR_NOT_SUPPORTED}
    write_state(nvml_state, NODE.state_at(0), errors=refused)
    sampler = NvmlSampler(xid_codes=(48, 79))
    try:
        watched, unwatched = sampler.sample().devices
    finally:
        sampler.close()
    assert dict(watched.xid_counts) == {48: 0, 79: 0}
    assert dict(unwatched.xid_counts) == {}


def test_without_a_watch_no_code_is_served_at_zero(nvml_state: Path) -> None:
    write_state(nvml_state, NODE.state_at(0))
    sampler = NvmlSampler(watch_xids=False, xid_codes=(79,))
    try:
        node = sampler.sample()
    finally:
        sampler.close()
    assert node.xid_watch_start is None
    assert [dict(d.xid_counts) for d in node.devices] == [{}, {}]
