"""bench/cluster.py's verdict on the views after its churn: an event still on its way is not
a lost one (a later view holds it), and a lost one is never called anything else."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # bench's flat imports

from cluster_report import After, View, agreement

AGREED = View(3.0, 150_009, 38_708)


def test_the_first_view_agrees() -> None:
    assert agreement(After(AGREED, AGREED, 1), 150_009, 38_708) == "no watch event lost"


def test_a_later_view_agrees_after_events_still_on_their_way() -> None:
    late = View(3.2, 150_009, 38_709)
    said = agreement(After(late, AGREED, 2), 150_009, 38_708)
    assert said.startswith("events were still on their way") and "no watch event lost" in said


def test_no_view_agrees() -> None:
    late = View(3.2, 150_009, 38_709)
    said = agreement(After(late, None, 4), 150_009, 38_708)
    assert said.startswith("**events lost**") and "4 views" in said
