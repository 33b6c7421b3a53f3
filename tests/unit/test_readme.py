"""The README's flags table and the metric names of the README and docs/, held to the code.

The table is the first place an operator looks; a flag missing from it, one it names that the
parser does not know, or a default it states that the code does not use all mislead. Each row's
flags must be `serve` flags; every `serve` flag must have a row; a stated default is parsed by
the flag's own parser and must equal the value `serve` runs with when the flag is not given
(the parser's default, or where that is None the value app.py falls back to); prose such as
"none" or "off" means the flag is unset by default; every choice of a flag with choices is named
in its row. Metric names anywhere in the README and docs/ must be in the catalog.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.exporter.catalog import BY_NAME
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.pci_bus import DEFAULT_SYSFS
from kube_gpu_exporter.exporter.serve.collection import default_stall_timeout

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
# Where the parser's default is None, the value `serve` falls back to (exporter/app.py).
FALLBACKS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "pod_resources_socket": lambda args: DEFAULT_SOCKET,
    "resource_names": lambda args: list(DEFAULT_RESOURCE_PATTERNS),
    "sysfs": lambda args: DEFAULT_SYSFS,
    "stall_timeout": lambda args: default_stall_timeout(args.interval),
}
METRIC = re.compile(r"(?<![\w:.])((?:nvidia_gpu|kube_gpu)_[a-z0-9_]*[a-z0-9])(?![\w:])")
# Names of that shape that are not our metrics, and what they are.
NOT_METRICS = {
    "nvidia_gpu_exporter": "another exporter, named beside dcgm-exporter",
    "kube_gpu_exporter": "the Python package",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    serve: argparse.ArgumentParser = action.choices["serve"]
    return serve


def flags_table() -> list[tuple[list[str], str, str]]:
    """(flags, default cell, whole row) of each row of the table under "Running the exporter"."""
    section = README.read_text(encoding="utf-8").split("## Running the exporter", 1)[1]
    table = section.split("| flag | default | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        flags = [re.sub(r"\[.*", "", f) for f in re.findall(r"`(--[^`]+)`", cells[0])]
        rows.append((flags, cells[1], line))
    return rows


def stated_defaults(flags: list[str], cell: str) -> dict[str, list[str] | None]:
    """Each flag's stated default: its backticked values, or None for prose ("none", "off")."""
    parts = cell.split(", ") if len(flags) > 1 else [cell]
    assert len(parts) == len(flags), f"{cell!r}: one default per flag of {flags}"
    return {
        flag: re.findall(r"`([^`]+)`", part) or None
        for flag, part in zip(flags, parts, strict=True)
    }


def run_default(parser: argparse.ArgumentParser, action: argparse.Action) -> Any:
    """What `serve` runs with when the flag is not given."""
    args = parser.parse_args([])
    value = getattr(args, action.dest)
    if value is None and action.dest in FALLBACKS:
        return FALLBACKS[action.dest](args)
    return value


def test_the_table_has_a_row_for_every_serve_flag() -> None:
    listed = {flag for flags, _, _ in flags_table() for flag in flags}
    every = {
        flag
        for action in serve_parser()._actions
        if not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
        if not flag.startswith("--no-")  # the negation of a listed flag
    }
    assert not every - listed, f"serve flags missing from the README's table: {every - listed}"
    assert not listed - every, f"not serve flags: {listed - every}"


@pytest.mark.parametrize(("flags", "cell", "row"), flags_table(), ids=lambda x: str(x)[:40])
def test_a_stated_default_is_what_serve_runs_with(
    flags: list[str], cell: str, row: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for flag, values in stated_defaults(flags, cell).items():
        env = [v[1:] for v in values or () if v.startswith("$")]
        for name in env:  # a default read from the environment
            monkeypatch.setenv(name, f"value-of-{name}")
        parser = serve_parser()
        action = parser._option_string_actions[flag]
        default = run_default(parser, action)
        if values is None:
            assert not default, f"{flag}: the README says unset, serve runs with {default!r}"
        elif env:
            assert default == f"value-of-{env[0]}", f"{flag}: not read from ${env[0]}"
        else:
            given = parser.parse_args([f"{flag}={value}" for value in values])
            assert getattr(given, action.dest) == default, (
                f"{flag}: the README says {values}, serve runs with {default!r}"
            )
        if action.choices:
            named = set(re.findall(r"`([^`]+)`", row)) | set(re.split(r"[=|\\\]\[`]+", row))
            missing = {str(c) for c in action.choices} - named
            assert not missing, f"{flag}: choices not in the README's row: {missing}"


def test_every_metric_name_in_the_docs_is_in_the_catalog() -> None:
    known = set(BY_NAME) | {f"{n}{s}" for n in BY_NAME for s in HISTOGRAM_SUFFIXES}
    unknown = {
        f"{path.relative_to(REPO)}: {name}"
        for path in DOCS
        for name in METRIC.findall(path.read_text(encoding="utf-8"))
        if name not in known and name not in NOT_METRICS
    }
    assert not unknown, f"not in exporter/catalog/: {sorted(unknown)}"


def test_every_metric_wildcard_in_the_docs_names_some_metric() -> None:
    """`nvidia_gpu_pod_*` in prose must still stand for metrics that exist."""
    for path in DOCS:
        for prefix in re.findall(r"`((?:nvidia_gpu|kube_gpu)_[a-z0-9_]*)\*`", path.read_text()):
            assert any(name.startswith(prefix) for name in BY_NAME), f"{path.name}: {prefix}*"
