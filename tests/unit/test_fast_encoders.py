"""The fast encoders write what prometheus-client's write, byte for byte.

Generated families of every type, with names our catalog uses and names it never does (a
colon, a reserved `__` prefix, UTF-8, empty), help texts and label values with backslashes,
quotes and newlines, every kind of number, and now and then a timestamp or an exemplar, go
through both for every Accept header a scraper sends (each escaping scheme). The node's and
the cluster's real bodies are held to the same, and the fast path must be the one taken for
them (a fast encoder that always fell back would pass the equality alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Metric as Family
from prometheus_client.exposition import choose_encoder
from prometheus_client.samples import Exemplar
from test_bodies import snapshot

from kube_gpu_exporter.exporter.exposition import fast_encoders
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


@pytest.mark.parametrize("accept", ACCEPTS[:3])
def test_our_families_take_the_fast_path(accept: str, monkeypatch: pytest.MonkeyPatch) -> None:
    found = node_families()
    assert found
    fast, slow = both(Families(found), accept)
    assert fast == slow

    def refuse(*_: object) -> bytes:
        raise AssertionError("a family of ours went to prometheus-client's encoder")

    encoder, content_type = choose_encoder(accept)
    monkeypatch.setattr(fast_encoders, "_One", refuse)
    assert faster(encoder, content_type)(Families(found)) == slow


def test_numbers_are_prometheus_clients() -> None:
    family = Family("x", "", "gauge")
    for value in (math.nan, math.inf, -math.inf, 1, 0.1, 1e22, 10**20):
        family.add_sample("x", {}, value)
    fast, slow = both(Families([family]), "")
    assert fast == slow
    assert isinstance(fast, bytes)
    assert b"x NaN\n" in fast and b"x +Inf\n" in fast
