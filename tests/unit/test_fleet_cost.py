"""The fleet cost (exporter/generate/fleet_cost.py): docs/metrics.md's table is what the code
renders, every reading group is counted, no code's Xid counter is served at 0 in advance, and
no series (the exporter's, the cluster view's, a recording rule's) can carry more label names
than Mimir's default limit of 30 once Prometheus and remote write have added theirs.

Assumed on top of a series' own labels (fleet_cost.py): the target labels `job`, `instance`,
`service`, `endpoint` and `node`; the operator's `namespace`, `pod`, `container` kept by a
ServiceMonitor of one's own, renaming the series' own to `exported_*`; the external labels
`cluster`, `prometheus`, `prometheus_replica`. `--kubernetes.pod-labels` adds a label per key:
the doc block says how many fit.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.catalog.metric import (
    DEVICE_LABELS,
    INFO_LABELS,
    MIG_LABELS,
    POD_LABELS,
    Scope,
)
from kube_gpu_exporter.exporter.generate import fleet_cost as fc
from kube_gpu_exporter.exporter.generate import fleet_renders as renders
from kube_gpu_exporter.exporter.generate.doc_blocks import BLOCK
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
from kube_gpu_exporter.rules.config import Config, parse_config
from kube_gpu_exporter.rules.promql_names import metric_names
from kube_gpu_exporter.rules.recording import recording_groups
from support import samples

REPO = Path(__file__).resolve().parents[2]
MULTI_CLUSTER = parse_config("labels: {node: node, cluster: cluster}")


def bodies() -> list[bytes]:
    """Everything rendered: both node shapes, with and without dcgm-exporter's names, and the
    cluster view with a namespace's wait histogram."""
    nodes = [renders.node_body(mig, dcgm) for mig in (False, True) for dcgm in (False, True)]
    return [*nodes, renders.cluster_body(2, 1)]


def test_the_docs_table_is_the_rendered_one() -> None:
    text = (REPO / "docs" / "metrics.md").read_text()
    blocks = {m.group(2): m.group(3) for m in BLOCK.finditer(text)}
    assert blocks["fleet-cost"] == fc.fleet_table(Config())


def test_the_table_reads_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """`generate --check` compares the table's bytes, so no clock may reach a render: under
    two clocks whose readings print with different digits, every body and the table are the
    same (the collection loop's own wall clock once leaked into the since-timestamps)."""

    def under(start: float) -> tuple[list[bytes], str]:
        ticks = itertools.count()
        monkeypatch.setattr(time, "time", lambda: start + 0.1234567 * next(ticks))
        monkeypatch.setattr(time, "monotonic", lambda: start + 0.0314159 * next(ticks))
        return bodies(), fc.fleet_table(Config())

    assert under(1.0) == under(1_795_884_613.4788544)


def test_every_sample_of_a_body_is_counted_in_one_group() -> None:
    for mig in (False, True):
        body = renders.node_body(mig, dcgm=True)
        counted = sum(cost.series for cost in fc.by_group(body).values())
        assert counted == len(samples(body))
        assert sum(cost.bytes for cost in fc.by_group(body).values()) == len(body)


def test_the_xid_group_is_the_watch_start_alone_until_an_xid() -> None:
    """What the alerts needed before: 16 codes at 0 on every GPU, 128 series of the 8 × 7
    node, served by `--collector.xid-codes` now only when asked for."""
    node = renders.node_body(mig=True)
    assert fc.by_group(node)[fc.XID].series == 1
    sampler = SimulatedSampler(
        renders.node_scenario(mig=True), clock=lambda: 0.0, xid_codes=tuple(range(1, 17))
    )
    zeros = CollectionLoop(sampler, 10).cycle().body("", False)[0]
    assert fc.by_group(zeros)[fc.XID].series == 1 + 16 * renders.GPUS


def test_recording_rules_are_counted_by_their_level() -> None:
    """Every rule's level is one the table knows (a new level fails `generate` here first),
    in a single-cluster setup and a multi-cluster one with another node label."""
    for cfg in (Config(), MULTI_CLUSTER):
        per = fc.recorded_per(cfg)
        assert sum(per.values()) == sum(len(g.rules) for g in recording_groups(cfg))
        assert per["node"] >= 1 and per["hold"] >= 1


def _catalog_labels(metric: c.Metric) -> frozenset[str]:
    """The most label names the catalog lets a series of `metric` carry by itself."""
    by_scope = {
        Scope.DEVICE: (*DEVICE_LABELS, *MIG_LABELS),
        Scope.POD: (*DEVICE_LABELS, *MIG_LABELS, *POD_LABELS, "owner_kind", "owner_name"),
    }
    info = INFO_LABELS if metric is c.GPU_INFO else ()
    return frozenset((*by_scope.get(metric.scope, ()), *info, *metric.labels))


def exporter_labels() -> dict[str, frozenset[str]]:
    """Each family's largest label-name set as stored: from every render and the catalog."""
    own: dict[str, frozenset[str]] = {m.name: _catalog_labels(m) for m in c.ALL_METRICS}
    for body in bodies():
        for family, names in fc.label_names(body).items():
            own[family] = own.get(family, frozenset()) | names
    return {family: fc.as_stored(names) for family, names in own.items()}


def recorded_labels(stored: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """An upper bound of each recorded series' label names: an aggregation or a join only
    drops labels, so a rule's output has at most the labels of every series it reads, plus
    those its `label_replace` writes and its own `labels`."""
    out: dict[str, frozenset[str]] = {}
    for group in recording_groups(Config()):
        for rule in group.rules:
            inputs = metric_names(rule.expr)
            read = frozenset().union(*(out.get(n) or stored[fc.family_of(n)] for n in inputs))
            written = frozenset(re.findall(r'label_replace\(.*?, "(\w+)", "', rule.expr, re.S))
            names = read | written | frozenset(rule.labels) | fc.EXTERNAL_LABELS
            out[rule.record] = out.get(rule.record, frozenset()) | names
    return out


def test_no_series_carries_more_label_names_than_mimir_allows() -> None:
    stored = exporter_labels()
    every = {**stored, **recorded_labels(stored)}
    over = {name: len(names) for name, names in every.items() if len(names) > 30}
    assert not over, over
    # the bound is not vacuous: the allocation series of a MIG instance held by a Job's pod
    largest = max(len(n) for n in every.values())
    assert len(stored[c.ALLOCATION_INFO.name]) >= 23 and largest <= fc.MIMIR_MAX_LABEL_NAMES
