"""The fast encoders write what prometheus-client's write, byte for byte.

Generated families of every type, with names our catalog uses and names it never does (a
colon, a reserved `__` prefix, UTF-8, empty), help texts and label values with backslashes,
quotes and newlines, every kind of number, and now and then a timestamp or an exemplar, go
through both for every Accept header a scraper sends (each escaping scheme). The node's and
the cluster's real bodies are held to the same, and the fast path must be the one taken for
them (a fast encoder that always fell back would pass the equality alone).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Metric as Family
from prometheus_client.exposition import choose_encoder
from prometheus_client.samples import Exemplar
from test_bodies import snapshot

from kube_gpu_exporter.exporter.cluster import ClusterView, Node, Pod, Quota
from kube_gpu_exporter.exporter.cluster.transitions import Histogram, TransitionCounts
from kube_gpu_exporter.exporter.exposition.cluster_families import (
    ClusterState,
    WatchHealth,
    cluster_families,
)
from kube_gpu_exporter.exporter.exposition.fast_encoders import faster
from kube_gpu_exporter.exporter.exposition.render import COMMON_ACCEPT_HEADERS
from kube_gpu_exporter.exporter.exposition.snapshot_families import SnapshotCollector

ACCEPTS = (
    *COMMON_ACCEPT_HEADERS,
    "text/plain;version=1.0.0;escaping=underscores",
    "text/plain;version=1.0.0;escaping=dots",
    "text/plain;version=1.0.0;escaping=values",
    "application/openmetrics-text;version=1.0.0;escaping=dots",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "application/openmetrics-text;version=0.0.1",
    "application/openmetrics-text",
)
TYPES = ("gauge", "counter", "info", "unknown", "stateset", "histogram", "summary")
NAMES = st.one_of(
    st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
    st.sampled_from(("nvidia_gpu_up", "a:b", "__reserved", "ünïcode", "x.y", "_", "a__b")),
)
LABEL_NAMES = st.one_of(
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
    st.sampled_from(("uuid", "gpu", "__name", "le", "a:b", "lä", "")),
)
TEXTS = st.text(st.sampled_from('ab \\"\n\tü{}=,#'), max_size=12)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.sampled_from((0.0, -0.0, 1e-300, 1.5e21, 123456789.0)),
)


class Families:
    def __init__(self, families: Iterable[Family]) -> None:
        self._families = list(families)

    def collect(self) -> list[Family]:
        return self._families


@st.composite
def families(draw: st.DrawFn) -> Family:
    name = draw(NAMES)
    kind = draw(st.sampled_from(TYPES))
    unit = draw(st.sampled_from(("", "", "bytes")))
    family = Family(name, draw(TEXTS), kind, unit)
    suffixes = ("", "_total", "_created", "_bucket", "_gsum", "_sum", "_count", "_info")
    for _ in range(draw(st.integers(0, 4))):
        sample = family.name + draw(st.sampled_from(suffixes))
        labels = draw(st.dictionaries(LABEL_NAMES, TEXTS, max_size=3))
        timestamp = draw(st.one_of(st.none(), st.none(), st.floats(0, 2e9)))
        exemplar = None
        if draw(st.integers(0, 9)) == 0:
            exemplar = Exemplar({"trace_id": draw(TEXTS)}, draw(VALUES), None)
        family.add_sample(sample, labels, draw(VALUES), timestamp, exemplar)
    return family


def both(collector: object, accept: str) -> tuple[object, object]:
    """Each encoder's bytes, or the type of what it raised (prometheus-client refuses an
    exemplar outside a counter or a bucket: the fast one must refuse it too)."""
    encoder, content_type = choose_encoder(accept)
    return outcome(faster(encoder, content_type), collector), outcome(encoder, collector)


def outcome(encoder: Callable[[object], bytes], collector: object) -> object:
    try:
        return encoder(collector)
    except ValueError as error:
        return type(error)


@settings(max_examples=400, deadline=None)
@given(st.lists(families(), max_size=4), st.sampled_from(ACCEPTS))
def test_the_same_bytes_as_prometheus_client(found: list[Family], accept: str) -> None:
    fast, slow = both(Families(found), accept)
    assert fast == slow


def node_families() -> list[Family]:
    """A node's families: two GPUs, one split into a MIG instance (test_bodies' scenario)."""
    return list(SnapshotCollector(snapshot()).collect())


def cluster_families_now() -> list[Family]:
    """The cluster view's families: capacity, a pending GPU pod, a quota, the watches'
    health, and the scheduling-wait histogram."""
    gpu = "nvidia.com/gpu"
    node = Node("gpu-a", allocatable=MappingProxyType({gpu: 8, "cpu": 2000, "pods": 10}))
    bound = Pod("ml", "train", phase="Running", node_name="gpu-a")
    bound = dataclasses.replace(bound, requests=MappingProxyType({gpu: 6}))
    waiting = Pod("ml", "wait", requests=MappingProxyType({gpu: 4}), created_at=100.0)
    quota = Quota("ml", "gpus", hard=MappingProxyType({gpu: 8}), used=MappingProxyType({gpu: 6}))
    view = ClusterView.build([node], [bound, waiting], [quota])
    wait = Histogram()
    wait.observe(12.5)
    counts = TransitionCounts({("ml", gpu): wait}, {("ml", gpu, "PreemptionByScheduler"): 1})
    health = {"pods": WatchHealth(True, {"timeout": 2}, 2)}
    return list(cluster_families(ClusterState(view, health, 1_000.0, transitions=counts)))


def _refuse(*_: object, **__: object) -> bytes:
    raise AssertionError("a family of ours went to prometheus-client's encoder")


@pytest.mark.parametrize("made", [node_families, cluster_families_now], ids=["node", "cluster"])
@pytest.mark.parametrize("accept", ACCEPTS[:3])
def test_our_families_take_the_fast_path(accept: str, made: Callable[[], list[Family]]) -> None:
    found = made()
    assert found
    fast, slow = both(Families(found), accept)
    assert fast == slow
    # the same bytes with prometheus-client's encoder out of reach: no family fell back to it
    encoder, content_type = choose_encoder(accept)
    refusing = functools.partial(_refuse, **getattr(encoder, "keywords", {}))
    assert faster(refusing, content_type)(Families(found)) == slow


def test_numbers_are_prometheus_clients() -> None:
    family = Family("x", "", "gauge")
    for value in (math.nan, math.inf, -math.inf, 1, 0.1, 1e22, 10**20):
        family.add_sample("x", {}, value)
    fast, slow = both(Families([family]), "")
    assert fast == slow
    assert isinstance(fast, bytes)
    assert b"x NaN\n" in fast and b"x +Inf\n" in fast
