"""Snapshot → exposition bytes: each body rendered once per snapshot, and only if wanted.

A scrape only picks ready bytes. Which bytes depends on the format its `Accept` negotiates
(text or OpenMetrics) and on gzip; rendering every variant each cycle cost most of a cycle
(bench/README.md), mostly for variants nobody asked for. So the collector thread pre-renders
only the variants scrapes asked for lately (`Demand`), before the snapshot is published; any
other is rendered on its first request and kept for the rest of the snapshot.

A body is rendered in two parts: the data (devices, attribution, `extra`), nearly all of its
bytes, then the exporter's own families, last. The cycle's duration is read between the two,
so `kube_gpu_exporter_collection_duration_seconds` covers reading, attributing and rendering
(gzip included) of the very body that carries it; only those few closing lines are not in it.
prometheus-client's encoders decide the formatting, and fast_encoders.py writes the same bytes
faster for the families snapshot_families.py builds.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import zlib
from collections.abc import Callable, Sequence

from prometheus_client import Metric as Family
from prometheus_client.exposition import choose_encoder

from kube_gpu_exporter.exporter.exposition.fast_encoders import (
    OPENMETRICS,
    OPENMETRICS_EOF,
    Encoder,
    faster,
)
from kube_gpu_exporter.exporter.exposition.snapshot_families import SnapshotCollector
from kube_gpu_exporter.exporter.exposition.text_counters import text_families
from kube_gpu_exporter.exporter.snapshot import Snapshot

GZIP_LEVEL = 6
GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib writes a gzip member (header and trailer)
EOF_LINE = OPENMETRICS_EOF.encode()
# A variant asked for within this long is pre-rendered each cycle: longer than any common
# scrape interval, so a Prometheus that scrapes every minute finds its bytes ready.
DEMAND_SECONDS = 300.0
# The Accept headers of curl, Prometheus 2.x and Prometheus 3.x (what tests and the bench ask).
COMMON_ACCEPT_HEADERS = (
    "",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
)


class _Families:
    """A collector over families already built, so text and OpenMetrics share one build."""

    def __init__(self, families: Sequence[Family]) -> None:
        self._families = families

    def collect(self) -> Sequence[Family]:
        return self._families


class Demand:
    """The body variants scrapes asked for lately: the ones the collector pre-renders.

    Noted on the event loop, read on the collector thread, hence the lock (uncontended: one
    note per scrape, one read per cycle).
    """

    def __init__(
        self, keep_seconds: float = DEMAND_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._keep = keep_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._asked: dict[tuple[str, bool], tuple[Encoder, float]] = {}

    def note(self, fmt: str, gzipped: bool, encoder: Encoder) -> None:
        with self._lock:
            self._asked[(fmt, gzipped)] = (encoder, self._clock())

    def wanted(self) -> list[tuple[str, bool, Encoder]]:
        """(format, gzipped, encoder) of every variant asked for within `keep_seconds`."""
        horizon = self._clock() - self._keep
        with self._lock:
            self._asked = {k: v for k, v in self._asked.items() if v[1] >= horizon}
            return [(fmt, gz, encoder) for (fmt, gz), (encoder, _) in self._asked.items()]


class Rendered:
    """One snapshot's bodies by format, plain and gzipped, each rendered at most once.

    What the collector pre-renders is in place before the object is published; after that only
    the event loop touches it, so a variant asked for the first time is rendered there and
    kept, without a lock. `snapshot` is final once published.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        extra: Sequence[Family] = (),
        demand: Demand | None = None,
        data: dict[str, bytes] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.extra = extra  # built once per cycle; never changed after publishing
        self._demand = demand
        self._families: list[Family] | None = None
        self._data: dict[str, bytes] = dict(data or {})  # format → data part of its body
        self._closing: dict[str, bytes] = {}  # format → the exporter's families, last
        self._bodies: dict[tuple[str, bool], bytes] = {}

    def body(self, accept: str, gzipped: bool) -> tuple[bytes, str]:
        encoder, content_type, fmt = negotiate(accept)
        if self._demand is not None:
            self._demand.note(fmt, gzipped, encoder)
        body = self._bodies.get((fmt, gzipped))
        if body is None:
            compressor = _gzip() if gzipped else None
            data = self._data_part(encoder, fmt)
            head = compressor.compress(data) if compressor else b""
            body = self._finish(encoder, fmt, data, compressor, head)
        return body, content_type

    def rendered_variants(self) -> set[tuple[str, bool]]:
        """(format, gzipped) of every body rendered so far."""
        return set(self._bodies)

    def with_snapshot(self, snapshot: Snapshot) -> Rendered:
        """The same data under other exporter families (NVML stalled: `nvml_up` 0, one more
        error): the data parts already rendered are reused, the rest is rendered on request."""
        copy = Rendered(snapshot, self.extra, self._demand, self._data)
        copy._families = self._families
        return copy

    def _data_part(self, encoder: Encoder, fmt: str) -> bytes:
        data = self._data.get(fmt)
        if data is None:
            if self._families is None:
                self._families = list(SnapshotCollector(self.snapshot).data_families())
            if fmt.startswith(OPENMETRICS):
                # One OpenMetrics exposition ends in `# EOF`: the exporter's part adds it.
                both = _Families([*self._families, *self.extra])
                data = encoder(both).removesuffix(EOF_LINE)
            else:
                data = encoder(_Families(self._families)) + text_families(encoder, self.extra)
            self._data[fmt] = data
        return data

    def _finish(
        self,
        encoder: Encoder,
        fmt: str,
        data: bytes,
        compressor: zlib._Compress | None,
        head: bytes,
    ) -> bytes:
        exporter = self._closing.get(fmt)
        if exporter is None:
            families = list(SnapshotCollector(self.snapshot).exporter_families())
            exporter = self._closing[fmt] = encoder(_Families(families))
        plain = self._bodies.get((fmt, False)) or data + exporter
        self._bodies[(fmt, False)] = plain
        if compressor is None:
            return plain
        zipped = head + compressor.compress(exporter) + compressor.flush()
        self._bodies[(fmt, True)] = zipped
        return zipped


def negotiate(accept: str) -> tuple[Encoder, str, str]:
    """prometheus_client's choice of encoder and content type for `Accept` (the encoder as
    fast_encoders.py writes it), and the format the body depends on. A scraper sends the same
    Accept every time: short ones are remembered."""
    if len(accept) <= ACCEPT_MEMO_CHARS:
        return _negotiated(accept)
    return _negotiate(accept)


def _negotiate(accept: str) -> tuple[Encoder, str, str]:
    encoder, content_type = choose_encoder(accept)
    return faster(encoder, content_type), content_type, _without_escaping(content_type)


ACCEPT_MEMO_CHARS = 512  # Prometheus 3's Accept is ~250 characters; 64 remembered
_negotiated = functools.lru_cache(maxsize=64)(_negotiate)


def _gzip() -> zlib._Compress:
    return zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)


def _without_escaping(content_type: str) -> str:
    """The format a body depends on. Every name we emit is a legacy-valid Prometheus name
    (the catalog and dcgm-compat tests check it), so the UTF-8 escaping scheme Prometheus 3
    negotiates cannot change the bytes: Prometheus 2 and 3 share one rendered body."""
    params = [p.strip() for p in content_type.split(";")]
    return "; ".join(p for p in params if not p.startswith("escaping="))


def render(
    snapshot: Snapshot,
    extra: Sequence[Family] = (),
    *,
    demand: Demand | None = None,
    started: float | None = None,
) -> Rendered:
    """The snapshot's bodies, those `demand` wants rendered now, the rest on request.

    `started`: the cycle's `time.monotonic()` at its start. The snapshot's
    `collection_duration_seconds` then becomes the time from it until the wanted bodies are
    rendered and compressed but for their closing exporter families, which carry that number.
    """
    rendered = Rendered(snapshot, extra, demand)
    pending = []
    for fmt, gzipped, encoder in demand.wanted() if demand is not None else ():
        data = rendered._data_part(encoder, fmt)
        compressor = _gzip() if gzipped else None
        head = compressor.compress(data) if compressor else b""
        pending.append((encoder, fmt, data, compressor, head))
    if started is not None:
        duration = time.monotonic() - started
        state = dataclasses.replace(snapshot.exporter, collection_duration_seconds=duration)
        rendered.snapshot = dataclasses.replace(snapshot, exporter=state)
    for encoder, fmt, data, compressor, head in pending:
        rendered._finish(encoder, fmt, data, compressor, head)
    # The bytes are what the scrapes take until the next cycle; the families they were made
    # of would be held beside them, and beside the next cycle's while it builds its own. A
    # variant first asked for later builds them again.
    rendered._families = None
    return rendered


class FamiliesBody:
    """Bodies of families built once (the cluster view's), each variant rendered at most once:
    the cluster loop pre-renders the variants scrapes asked for lately (`demand`, as the node
    exporter's collector does), so a scrape only picks bytes; a variant asked for the first
    time is rendered on request and kept."""

    def __init__(self, families: Sequence[Family], demand: Demand | None = None) -> None:
        self._families = _Families(families)
        self._demand = demand
        self._bodies: dict[tuple[str, bool], bytes] = {}

    def body(self, accept: str, gzipped: bool) -> tuple[bytes, str]:
        encoder, content_type, fmt = negotiate(accept)
        if self._demand is not None:
            self._demand.note(fmt, gzipped, encoder)
        return self._render(encoder, fmt, gzipped), content_type

    def prerender(self) -> None:
        """Render the variants scrapes asked for lately; before the body is published."""
        for fmt, gzipped, encoder in self._demand.wanted() if self._demand else ():
            self._render(encoder, fmt, gzipped)

    def rendered_variants(self) -> set[tuple[str, bool]]:
        """(format, gzipped) of every body rendered so far."""
        return set(self._bodies)

    def _render(self, encoder: Encoder, fmt: str, gzipped: bool) -> bytes:
        body = self._bodies.get((fmt, gzipped))
        if body is None:
            plain = self._bodies.get((fmt, False)) or encoder(self._families)
            self._bodies[(fmt, False)] = plain
            if gzipped:
                compressor = _gzip()
                body = compressor.compress(plain) + compressor.flush()
                self._bodies[(fmt, gzipped)] = body
            else:
                body = plain
        return body
