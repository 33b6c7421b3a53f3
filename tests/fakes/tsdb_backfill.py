"""A Prometheus with history: series written as OpenMetrics, turned into TSDB blocks by
promtool, the recording rules backfilled over them, and Debian's Prometheus serving the result.

Only what a real Prometheus would have after hours of scraping and rule evaluation, made in
seconds: `promtool tsdb create-blocks-from openmetrics` for the exporter's series, then
`promtool tsdb create-blocks-from rules` for the recorded ones. promtool cannot backfill a rule
that reads another rule's output in the same run, so the rules go in levels (a rule's level is
one above the highest level of the recorded series it reads) and Prometheus is restarted on
the blocks after each level.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from prometheus_server import Generation, Prometheus, start_prometheus, stop_prometheus
from support import free_port

Labels = Mapping[str, str]
Point = tuple[float, float]  # Unix time, value


def openmetrics(series: Sequence[tuple[str, Labels, Sequence[Point]]]) -> str:
    """OpenMetrics text of `series` (name, labels, points): one metric's series together, each
    series' points in time order, no metadata (every family `unknown`)."""
    lines = []
    for name, labels, points in sorted(series, key=lambda s: s[0]):
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines += [f"{name}{{{text}}} {value:.17g} {at:.3f}" for at, value in points]
    return "\n".join([*lines, "# EOF"]) + "\n"


def levels(rules: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Recording rules in levels: a rule reads only recorded series of lower levels."""
    level: dict[str, int] = {}
    for rule in rules:  # a rules file lists a rule after those it reads
        reads = [level[n] for n in level if n in rule["expr"]]
        level[rule["record"]] = 1 + max(reads, default=-1)
    out: list[list[Mapping[str, Any]]] = [[] for _ in range(max(level.values()) + 1)]
    for rule in rules:
        out[level[rule["record"]]].append(rule)
    return out


@contextmanager
def backfilled(
    workdir: Path,
    series: Sequence[tuple[str, Labels, Sequence[Point]]],
    rules_file: Path,
    start: float,
    end: float,
    eval_interval: str = "30s",
    lookback: str = "2m",
    *,
    generation: Generation,
) -> Iterator[Prometheus]:
    """`generation`'s Prometheus over `series` and the recording rules of `rules_file`
    evaluated from `start` to `end`, backfilled by its promtool."""
    promtool = generation.promtool
    data = workdir / "data"
    source = workdir / "series.om"
    source.write_text(openmetrics(series))
    _run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)])
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    recording = [r for g in groups for r in g["rules"] if "record" in r]
    prometheus = _start(workdir, data, lookback, generation)
    try:
        for index, level in enumerate(levels(recording)):
            level_file = workdir / f"rules-{index}.yaml"
            level_file.write_text(
                yaml.safe_dump({"groups": [{"name": f"l{index}", "rules": level}]})
            )
            blocks = workdir / f"blocks-{index}"
            _run(
                [
                    promtool,
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--start={int(start)}",
                    f"--end={int(end)}",
                    f"--url={prometheus.url}",
                    f"--output-dir={blocks}",
                    f"--eval-interval={eval_interval}",
                    str(level_file),
                ]
            )
            for block in blocks.iterdir():
                if block.is_dir():
                    shutil.move(str(block), data / block.name)
            stop_prometheus(prometheus)
            prometheus = _start(workdir, data, lookback, generation)
        yield prometheus
    finally:
        stop_prometheus(prometheus)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command[:4])}: {done.stderr[-2000:]}"


def _start(workdir: Path, data: Path, lookback: str, generation: Generation) -> Prometheus:
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}}))
    log = workdir / f"prometheus-{port}.log"
    return start_prometheus(config, data, port, log, lookback, generation=generation)
