"""Counters whose samples keep a name without `_total`, typed `counter` in the Prometheus text
format and `unknown` in OpenMetrics.

dcgm-exporter's counters (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`,
…) have no `_total` suffix, and it serves them as `# TYPE <name> counter` in the 0.0.4 text
format. prometheus-client cannot write that: its text encoder names a counter family's TYPE line
`<name>_total` whatever its samples are called, so the samples would fall outside the typed
family, and OpenMetrics requires a counter's samples to end in `_total` (prometheus-client's own
OpenMetrics parser rejects the body otherwise). So such a family is an `UnsuffixedCounter`:

- in OpenMetrics it is `unknown`, which is valid for any sample name and keeps the names that
  dashboards and alerts query (renaming the samples to `…_total` would break every one of them);
- in the text format, `text_families` writes it through the same prometheus-client encoder as
  an `unknown` family and replaces only its TYPE line with `counter`, so label escaping and
  number formatting stay prometheus-client's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import Metric as Family

UNKNOWN = "unknown"


class UnsuffixedCounter(Family):
    """A counter named without `_total`: `unknown` to every encoder but `text_families`."""

    def __init__(self, name: str, documentation: str) -> None:
        super().__init__(name, documentation, UNKNOWN)


class OneFamily:
    """A collector of one family, for the encoders (they take anything with `collect()`)."""

    def __init__(self, family: Family) -> None:
        self._family = family

    def collect(self) -> Iterator[Family]:
        yield self._family


def text_families(encoder: Callable[..., bytes], families: Iterable[Family]) -> bytes:
    """`families` in the Prometheus text format by `encoder` (prometheus-client's text encoder,
    as content negotiation chose it), each `UnsuffixedCounter` typed `counter`."""
    out: list[bytes] = []
    for family in families:
        text = encoder(OneFamily(family))
        if isinstance(family, UnsuffixedCounter):
            # The encoder writes exactly `# HELP` then `# TYPE` (HELP escapes its newlines).
            help_line, _type_line, samples = text.split(b"\n", 2)
            text = b"%s\n# TYPE %s counter\n%s" % (help_line, family.name.encode(), samples)
        out.append(text)
    return b"".join(out)
