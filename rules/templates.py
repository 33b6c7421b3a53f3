"""The small subset of Prometheus' Go alert templates that our descriptions use, in Python.

The generated promtool tests must state each firing alert's annotations exactly, so the
generator renders the descriptions the way Prometheus will. Only these forms are allowed —
anything else raises, which keeps descriptions simple — and promtool checks that the result
matches what Prometheus renders:

    {{ $labels.NAME }}    {{ $value | humanize }}    {{ $value | humanize1024 }}
    {{ $value | printf "%.3g" }}
    {{ $value | humanizePercentage }}    {{ $value | humanizeDuration }}
    {{ with $labels.NAME }}…{{ . }}…{{ end }}
    {{ with query (printf "…" $labels.A …) | sortByLabel "L" }}
        …{{ range . }}…{{ .Labels.NAME }}…{{ end }}…{{ end }}

The last form lists what a query returns (the pods holding a device, the GPUs of a workload);
the generator cannot run the query, so the caller passes the rows the query is expected to
return, and promtool, which does run it, checks them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

_ACTION = re.compile(r"{{\s*(.*?)\s*}}")
_WITH = re.compile(r"{{\s*with \$labels\.(\w+)\s*}}(.*?){{\s*end\s*}}", re.DOTALL)
_QUERY = re.compile(
    r'{{ with query \(printf ".*?"(?: \$labels\.\w+)*\) \| sortByLabel "(\w+)" }}'
    r"(.*?){{ range \. }}(.*?){{ end }}(.*?){{ end }}",
    re.DOTALL,
)
_ROW_LABEL = re.compile(r"{{ \.Labels\.(\w+) }}")


class TemplateError(ValueError):
    pass


def _g(value: float) -> str:
    """Go's %.4g (the same as C's and Python's for finite values)."""
    return f"{value:.4g}"


def humanize(value: float) -> str:
    if value == 0 or math.isnan(value) or math.isinf(value):
        return _g(value)
    if abs(value) >= 1:
        prefix = ""
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix = p
            value /= 1000
        return _g(value) + prefix
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return _g(value) + prefix


def humanize1024(value: float) -> str:
    if abs(value) <= 1:
        return _g(value)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(value) < 1024:
            break
        prefix = p
        value /= 1024
    return _g(value) + prefix


def humanize_percentage(value: float) -> str:
    return _g(value * 100) + "%"


def humanize_duration(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return _g(value)
    if value == 0:
        return _g(value) + "s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        value = abs(value)
        whole = int(value)
        seconds, minutes = whole % 60, (whole // 60) % 60
        hours, days = (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g(value)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return f"{_g(value)}{prefix}s"


FUNCTIONS: dict[str, Callable[[float], str]] = {
    "humanize": humanize,
    "humanize1024": humanize1024,
    "humanizePercentage": humanize_percentage,
    "humanizeDuration": humanize_duration,
}


def _fill(item: str, row: Mapping[str, str]) -> str:
    return _ROW_LABEL.sub(lambda m: row.get(m.group(1), ""), item)


def render(
    template: str,
    labels: Mapping[str, str],
    value: float,
    rows: Sequence[Mapping[str, str]] = (),
) -> str:
    """`template` as Prometheus renders it for an alert with `labels` and `value`; `rows`
    are the label sets its `with query` block's query returns (in any order)."""

    def query_block(match: re.Match[str]) -> str:
        if not rows:
            return ""
        by, before, item, after = match.groups()
        ordered = sorted(rows, key=lambda row: row.get(by, ""))
        return before + "".join(_fill(item, row) for row in ordered) + after

    def with_block(match: re.Match[str]) -> str:
        label = labels.get(match.group(1), "")
        return match.group(2).replace("{{ . }}", label) if label else ""

    def action(match: re.Match[str]) -> str:
        text = match.group(1)
        if m := re.fullmatch(r"\$labels\.(\w+)", text):
            return labels.get(m.group(1), "")
        if (m := re.fullmatch(r"\$value \| (\w+)", text)) and m.group(1) in FUNCTIONS:
            return FUNCTIONS[m.group(1)](value)
        if text == '$value | printf "%.3g"':  # a count of GPUs, fractions included: 0.5, 2
            return f"{value:.3g}"
        raise TemplateError(f"template action not supported: {{{{ {text} }}}}")

    return _ACTION.sub(action, _WITH.sub(with_block, _QUERY.sub(query_block, template)))


def is_templated(text: str) -> bool:
    return bool(_ACTION.search(text))
