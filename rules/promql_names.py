"""The metric names a PromQL expression reads, for the test that proves every name a rule or
panel uses is in the catalog (or is a named kube-state-metrics or recorded series).

A tokenizer, not a parser, and deliberately conservative: it drops string literals (label
values, regexes, label_replace arguments), label-matcher blocks (keeping a `__name__`
matcher's value), range and subquery brackets, grouping lists (`by`, `without`, `on`,
`ignoring`, `group_left`, `group_right`), Grafana variables, numbers and durations,
keywords, and identifiers followed by `(` (functions and aggregations). What is left are the
metric names.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r"__name__\s*=\s*\"([^\"]+)\"")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_TOKEN = re.compile(r"\d[\w.]*|[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?")
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "offset", "bool", "inf", "nan", "atan2", "start", "end",
    }
)  # fmt: skip
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\)\s*$", re.DOTALL)


def metric_names(expr: str) -> set[str]:
    """Names of the series `expr` selects (Grafana's `label_values(…)` queries included)."""
    if match := _LABEL_VALUES.match(expr):
        expr = match.group(1)
    names: set[str] = set()
    # `__name__` matchers name a metric inside a string: collect before strings go.
    for block in re.findall(r"\{[^{}]*\}", expr):
        names.update(_NAME_MATCHER.findall(block))
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = _GRAFANA_VARIABLE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    for token in _TOKEN.finditer(text):
        word = token.group(0)
        if word[0].isdigit() or word.endswith("(") or token.group(1):
            continue
        if word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names
