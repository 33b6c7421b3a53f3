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
