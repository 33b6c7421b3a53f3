"""prometheus-client's text and OpenMetrics encoders, byte for byte, for the families we build.

Rendering was most of a collection cycle, and most of rendering was prometheus-client checking
and escaping every name again on every sample: a regex per label name, and in OpenMetrics a
rune-by-rune walk of every sample's name. Our names never need it: the catalog's names and
label names are plain `[a-zA-Z_][a-zA-Z0-9_]*`, which every escaping scheme leaves as they
are. So a family whose names are all of that form, and
whose samples carry no timestamp, exemplar or native histogram, is written here with the
same lines prometheus-client writes (label values escaped alike, numbers by its own
`floatToGoString`); any other family, or any scheme but `underscores` and `allow-utf-8`, goes
to prometheus-client's encoder itself. tests/unit/test_fast_encoders.py holds the two to the
same bytes over generated families, special characters and unusual names included, and checks
that the node's and the cluster's families all take the fast path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from prometheus_client import Metric as Family
from prometheus_client.openmetrics.exposition import ALLOWUTF8, UNDERSCORES
from prometheus_client.utils import floatToGoString as _untyped_float

from kube_gpu_exporter.exporter.exposition.text_counters import OneFamily

Encoder = Callable[..., bytes]
OPENMETRICS: Final = "application/openmetrics-text"
TEXT: Final = "text/plain"
OPENMETRICS_EOF: Final = "# EOF\n"
# Names every escaping scheme leaves unchanged: legacy-valid, no colon, not reserved ("__").
_PLAIN_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Text-format samples that prometheus-client moves to a gauge family of their own, at the end
_MOVED_SUFFIXES: Final = ("_created", "_gsum", "_gcount")
# Text-format TYPE names for OpenMetrics types (prometheus-client's munging)
_TEXT_TYPES: Final = {
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
    "unknown": "untyped",
}


# prometheus-client's number formatting (Go's: +Inf, NaN, exponents from 1e21), typed
_number: Callable[[float], str] = _untyped_float

# `{name="value",...}` by the sorted label pairs, for one body
Labelled = dict[tuple[tuple[str, str], ...], str]


class Collector(Protocol):
    def collect(self) -> Iterable[Family]: ...


def faster(encoder: Encoder, content_type: str) -> Encoder:
    """What `encoder` (prometheus-client's, chosen for `content_type`) writes, faster; the
    encoder itself where the escaping scheme could change a name."""
    keywords: dict[str, Any] = getattr(encoder, "keywords", {})
    if keywords.get("escaping", UNDERSCORES) not in (UNDERSCORES, ALLOWUTF8):
        return encoder
    if content_type.startswith(OPENMETRICS):
        return functools.partial(
            _encode, family_lines=_openmetrics_family, fallback=encoder, end=OPENMETRICS_EOF
        )
    if content_type.startswith(TEXT):
        return functools.partial(_encode, family_lines=_text_family, fallback=encoder, end="")
    return encoder


def _encode(
    collector: Collector,
    family_lines: Callable[[Family, Labelled], str | None],
    fallback: Encoder,
    end: str,
) -> bytes:
    """Every family by `family_lines`, or by `fallback` alone where it cannot; `end` closes the
    body (OpenMetrics' `# EOF`, which a fallback's one-family body also ends with)."""
    out: list[str] = []
    labelled: Labelled = {}
    for family in collector.collect():
        lines = family_lines(family, labelled)
        if lines is None:
            lines = fallback(OneFamily(family)).decode().removesuffix(end)
        out.append(lines)
    out.append(end)
    return "".join(out).encode()


@functools.lru_cache(maxsize=4096)
def _plain(name: str) -> bool:
    return _PLAIN_NAME.fullmatch(name) is not None and not name.startswith("__")


def _value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _samples(family: Family, moved: tuple[str, ...], labelled: Labelled) -> list[str] | None:
    """`name{labels} value` lines, or None where a sample needs prometheus-client.
    `labelled`: label sets written so far in this body (a device's set recurs in every family)."""
    lines = []
    for sample in family.samples:
        name, labels = sample.name, sample.labels
        if (
            sample.timestamp is not None
            or sample.exemplar is not None
            or getattr(sample, "native_histogram", None) is not None
            or sample.value is None
            or name in moved
            or not _plain(name)
        ):
            return None
        if labels:
            items = tuple(sorted(labels.items()))
            text = labelled.get(items)
            if text is None:
                if not all(_plain(key) for key, _ in items):
                    return None
                text = labelled[items] = (
                    "{" + ",".join([f'{key}="{_value(value)}"' for key, value in items]) + "}"
                )
            lines.append(f"{name}{text} {_number(sample.value)}\n")
        else:
            lines.append(f"{name} {_number(sample.value)}\n")
    return lines


def _text_family(family: Family, labelled: Labelled) -> str | None:
    """The family as prometheus-client's text encoder writes it, or None."""
    name, kind = family.name, family.type
    if not _plain(name):
        return None
    shown = name + "_total" if kind == "counter" else name + "_info" if kind == "info" else name
    lines = _samples(family, tuple(name + suffix for suffix in _MOVED_SUFFIXES), labelled)
    if lines is None:
        return None
    documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    head = f"# HELP {shown} {documentation}\n# TYPE {shown} {_TEXT_TYPES.get(kind, kind)}\n"
    return head + "".join(lines)


def _openmetrics_family(family: Family, labelled: Labelled) -> str | None:
    """The family as prometheus-client's OpenMetrics encoder writes it (no `# EOF`), or None."""
    name = family.name
    if not _plain(name):
        return None
    lines = _samples(family, (), labelled)
    if lines is None:
        return None
    head = f"# HELP {name} {_value(family.documentation)}\n# TYPE {name} {family.type}\n"
    if family.unit:
        head += f"# UNIT {name} {family.unit}\n"
    return head + "".join(lines)
