"""Bodies rendered only when asked for, and a cycle duration that includes rendering them."""

from __future__ import annotations

import dataclasses
import gzip
import time
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import Metric as Family

from kube_gpu_exporter.exporter.exposition import render as render_module
from kube_gpu_exporter.exporter.exposition.render import (
    COMMON_ACCEPT_HEADERS,
    Demand,
    FamiliesBody,
    render,
)
from kube_gpu_exporter.exporter.exposition.snapshot_families import SnapshotCollector
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler, node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import ExporterState, Snapshot
from support import samples, values

SCENARIO = Scenario.parse(
    """
devices:
  - uuid: GPU-aaaaaaaa-0000-4000-8000-000000000000
    readings: {utilization: 0.5, temperature_celsius: 60}
  - uuid: GPU-bbbbbbbb-0000-4000-8000-000000000000
    mig:
      - {profile: 1g.10gb, gpu_instance_id: 7, uuid: MIG-cccccccc-0000-4000-8000-000000000000,
         memory_total_bytes: 9984MiB}
"""
)
TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
RENDER_SECONDS = 0.2  # what the slowed-down renderer costs per body


def snapshot() -> Snapshot:
    state = ExporterState(0.0, 1_790_000_000.0, 3, {"init": 0})
    return Snapshot(node_sample(SCENARIO.state_at(0)), state, taken_at=1_790_000_000.0)


def loop() -> CollectionLoop:
    return CollectionLoop(SimulatedSampler(SCENARIO, clock=lambda: 0.0), 10)


class SlowCollector(SnapshotCollector):
    """Building the data families takes RENDER_SECONDS: rendering, made easy to see."""

    def data_families(self) -> Iterator[Family]:
        time.sleep(RENDER_SECONDS)
        yield from super().data_families()


def test_nothing_is_rendered_before_anyone_asks() -> None:
    rendered = render(snapshot(), demand=Demand())
    assert rendered.rendered_variants() == set()
    body, _ = rendered.body("", gzipped=False)
    assert b"nvidia_gpu_up" in body
    assert rendered.rendered_variants() == {(TEXT, False)}  # the OpenMetrics body never was


def test_the_collector_prerenders_only_the_variants_scrapes_asked_for() -> None:
    collection = loop()
    first = collection.cycle()
    assert first.rendered_variants() == set()
    first.body(COMMON_ACCEPT_HEADERS[2], gzipped=True)  # Prometheus 3, gzipped
    second = collection.cycle()
    assert second.rendered_variants() == {(OPENMETRICS, False), (OPENMETRICS, True)}
    zipped, _ = second.body(COMMON_ACCEPT_HEADERS[1], gzipped=True)  # Prometheus 2: same bytes
    plain, _ = second.body(COMMON_ACCEPT_HEADERS[1], gzipped=False)
    assert gzip.decompress(zipped) == plain and plain.endswith(b"# EOF\n")
    assert (TEXT, False) not in second.rendered_variants()


def test_demand_forgets_a_variant_nobody_asked_for_lately() -> None:
    now = [0.0]
    demand = Demand(keep_seconds=300, clock=lambda: now[0])
    render(snapshot(), demand=demand).body("", gzipped=False)
    assert [(fmt, gz) for fmt, gz, _ in demand.wanted()] == [(TEXT, False)]
    now[0] = 299.0
    assert len(demand.wanted()) == 1
    now[0] = 301.0
    assert demand.wanted() == []
    assert render(snapshot(), demand=demand).rendered_variants() == set()


def test_prerendered_and_lazy_bodies_are_the_same_bytes() -> None:
    demand = Demand()
    for accept in COMMON_ACCEPT_HEADERS:
        for gzipped in (False, True):
            render(snapshot(), demand=demand).body(accept, gzipped)
    eager = render(snapshot(), demand=demand)
    lazy = render(snapshot())
    assert eager.rendered_variants() == {(TEXT, False), (TEXT, True)} | {
        (OPENMETRICS, False),
        (OPENMETRICS, True),
    }
    for accept in COMMON_ACCEPT_HEADERS:
        plain = lazy.body(accept, gzipped=False)[0]
        assert eager.body(accept, gzipped=False)[0] == plain
        assert gzip.decompress(eager.body(accept, gzipped=True)[0]) == plain
        assert gzip.decompress(lazy.body(accept, gzipped=True)[0]) == plain


def test_the_reported_duration_includes_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_module, "SnapshotCollector", SlowCollector)
    collection = loop()
    first = collection.cycle()  # nobody asked for a body yet: nothing rendered in the cycle
    assert first.snapshot.exporter.collection_duration_seconds < RENDER_SECONDS
    first.body("", gzipped=True)
    started = time.monotonic()
    second = collection.cycle()
    wall = time.monotonic() - started
    reported = second.snapshot.exporter.collection_duration_seconds
    assert RENDER_SECONDS <= reported <= wall
    # The body carries that duration: it was rendered after the measurement, last.
    parsed = samples(gzip.decompress(second.body("", gzipped=True)[0]))
    assert values(parsed, "kube_gpu_exporter_collection_duration_seconds") == [reported]


def test_a_stalled_copy_keeps_the_data_and_changes_only_the_exporter_families() -> None:
    rendered = render(snapshot(), demand=Demand())
    before, _ = rendered.body("", gzipped=False)
    old = rendered.snapshot
    stalled_state = ExporterState(0.0, 1_790_000_000.0, 3, {"init": 0, "stalled": 1})
    node = dataclasses.replace(old.node, nvml_up=False)
    stalled = rendered.with_snapshot(Snapshot(node, stalled_state, old.taken_at))
    after, _ = stalled.body("", gzipped=False)
    data = before.split(b"# HELP kube_gpu_exporter_build_info")[0]
    assert after.startswith(data)
    parsed = samples(after)
    assert values(parsed, "kube_gpu_exporter_nvml_up") == [0]
    assert values(parsed, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
    assert len(values(parsed, "nvidia_gpu_up")) == 3


def test_the_cluster_view_prerenders_what_scrapes_asked_for() -> None:
    """The cluster loop's bodies follow the same demand: Prometheus' OpenMetrics + gzip,
    asked of one cycle's body, is rendered ahead in the next, off the event loop."""
    families = list(SnapshotCollector(snapshot()).collect())
    demand = Demand()
    first = FamiliesBody(families, demand)
    first.prerender()
    assert first.rendered_variants() == set()
    asked, content_type = first.body(COMMON_ACCEPT_HEADERS[1], gzipped=True)
    assert content_type.startswith(OPENMETRICS)
    following = FamiliesBody(families, demand)
    following.prerender()
    assert following.rendered_variants() == {(OPENMETRICS, False), (OPENMETRICS, True)}
    assert gzip.decompress(following.body(COMMON_ACCEPT_HEADERS[1], gzipped=True)[0]) == (
        gzip.decompress(asked)
    )


def test_a_cycle_keeps_its_bytes_not_the_families_they_were_made_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between cycles only the bytes are served: the families would be held twice while the
    next cycle builds its own. A variant asked for later is built again, to the same bytes."""
    made: list[weakref.ref[Family]] = []

    class Watched(SnapshotCollector):
        def data_families(self) -> Iterator[Family]:
            for family in super().data_families():
                made.append(weakref.ref(family))
                yield family

    monkeypatch.setattr(render_module, "SnapshotCollector", Watched)
    demand = Demand()
    render(snapshot(), demand=demand).body(OPENMETRICS, gzipped=True)
    rendered = render(snapshot(), demand=demand)
    assert rendered.rendered_variants() == {(OPENMETRICS, False), (OPENMETRICS, True)}
    assert made and all(ref() is None for ref in made)
    later, _ = rendered.body("", gzipped=False)
    assert later == render(snapshot()).body("", gzipped=False)[0]
    assert (TEXT, False) in rendered.rendered_variants()
