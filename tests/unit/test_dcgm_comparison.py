"""What the docs say dcgm-exporter does on shared GPUs is what its current releases do.

Since 4.5.3-4.8.2 it splits utilization and framebuffer by process on time-sliced and MPS GPUs,
behind `--kubernetes-virtual-gpus` and hostPID; NVIDIA/dcgm-exporter#725 (pods missed, a pod's
memory repeated once per replica) is what remains. A comparison that says only "the device's
values on every pod" is out of date, and one that leaves out #725 oversells the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPARISONS = ("README.md", "docs/migrating-from-dcgm-exporter.md")


@pytest.mark.parametrize("doc", COMPARISONS)
def test_the_shared_gpu_comparison_names_the_per_process_mode_and_its_limits(doc: str) -> None:
    text = " ".join((REPO / doc).read_text(encoding="utf-8").split())
    for fact in ("--kubernetes-virtual-gpus", "4.5.3-4.8.2", "#725", "hostPID"):
        assert fact in text, f"{doc}: the shared-GPU comparison does not say {fact}"
    stale = re.search(r"dcgm-exporter copies the device's values onto every sharing pod", text)
    assert not stale, f"{doc}: {stale.group(0) if stale else ''}"
