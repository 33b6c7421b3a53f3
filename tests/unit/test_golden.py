"""The whole /metrics body for the demo scenario, against a committed golden file.

Any change to names, labels, help texts or ordering shows up here as a diff a reviewer reads.
Regenerate deliberately with `UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

from kube_gpu_exporter.exporter.exposition.render import render
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import ExporterState, Snapshot

ROOT = Path(__file__).parents[2]
GOLDEN = Path(__file__).parent / "golden" / "demo-t130.prom"


def test_demo_exposition_matches_golden_file() -> None:
    state = Scenario.load(ROOT / "exporter" / "simulated" / "scenarios" / "demo.yaml").state_at(130)
    exporter = ExporterState(
        collection_duration_seconds=0.0125,
        last_success_timestamp=1_790_000_000.0,
        collections_total=13,
        errors_total={"init": 0, "gpu_is_lost": 0},
    )
    snapshot = Snapshot(node=node_sample(state), exporter=exporter, taken_at=1_790_000_000.0)
    body, _ = render(snapshot).body("", gzipped=False)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_bytes(body)
    assert body.decode() == GOLDEN.read_text()


def test_the_demos_gpu_4_needs_a_reset_from_2_30() -> None:
    """The demo's story: GPU 4 reports Xid 109 at 2:30 and its recovery action asks for a GPU
    reset; before that it needs nothing."""
    from support import samples, values

    scenario = Scenario.load(ROOT / "exporter" / "simulated" / "scenarios" / "demo.yaml")
    exporter = ExporterState(0.0125, 1_790_000_000.0, 13, {})

    def body_at(t: float) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        node = node_sample(scenario.state_at(t), xid_watch_start=1_789_999_800.0)
        snapshot = Snapshot(node, exporter, 1_790_000_000.0)
        return samples(render(snapshot).body("", gzipped=False)[0])

    before, after = body_at(149), body_at(151)
    name = "nvidia_gpu_action_required"
    assert values(before, name, gpu="4", action="none") == [1]
    assert values(after, name, gpu="4", action="reset_gpu", source="recovery_action") == [1]
    assert values(after, name, gpu="4", action="none") == []
    assert values(after, "nvidia_gpu_xid_errors_total", gpu="4", xid="109") == [1]
