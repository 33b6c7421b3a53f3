"""The report's tables from query answers: namespaces' GPU-hours and cost, rounding shared by
the formats, the pending table without scheduling data, and the CSV/JSON writers."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from kube_gpu_exporter.exporter.report.collect import Progress, Results
from kube_gpu_exporter.exporter.report.files import as_csv, csv_paths, write
from kube_gpu_exporter.exporter.report.model import Column, Report, Table
from kube_gpu_exporter.exporter.report.period import parse_since
from kube_gpu_exporter.exporter.report.prometheus_api import Sample
from kube_gpu_exporter.exporter.report.queries import ReportQueries
from kube_gpu_exporter.exporter.report.tables import namespaces, pending
from kube_gpu_exporter.rules.config import Config, parse_config

RQ = ReportQueries(Config(), parse_since("7d", now=1_000_000_000))


def _ns(values: dict[str, float]) -> list[Sample]:
    return [Sample({"namespace": ns}, v) for ns, v in values.items()]


def test_namespaces_busy_idle_and_cost_sorted_by_cost() -> None:
    """At the thresholds file's price (3.20 EUR a GPU-hour, not the default 2.50 USD), 10 idle
    GPU-hours cost 32.00 and 24 cost 76.80."""
    priced = ReportQueries(
        parse_config("cost: {gpu_hour: 3.2, currency: EUR}\n"), parse_since("7d", now=1e9)
    )
    results = Results(
        instant={
            "namespace_allocated": _ns({"ml": 100.0, "notebooks": 24.0, "quiet": 10.0}),
            "namespace_idle": _ns({"ml": 10.0, "notebooks": 24.0}),  # quiet: none recorded
        }
    )
    table = namespaces(priced, results)
    assert table.records() == [
        {
            "namespace": "notebooks",
            "allocated_gpu_hours": 24.0,
            "busy_gpu_hours": 0.0,
            "idle_gpu_hours": 24.0,
            "idle_percent": 100.0,
            "idle_cost": 76.8,
        },
        {
            "namespace": "ml",
            "allocated_gpu_hours": 100.0,
            "busy_gpu_hours": 90.0,
            "idle_gpu_hours": 10.0,
            "idle_percent": 10.0,
            "idle_cost": 32.0,
        },
        {
            "namespace": "quiet",
            "allocated_gpu_hours": 10.0,
            "busy_gpu_hours": 10.0,
            "idle_gpu_hours": 0.0,
            "idle_percent": 0.0,
            "idle_cost": 0.0,
        },
    ]
    assert [column.title for column in table.columns][-1] == "Idle cost (EUR)"
    assert "Cost at 3.2 EUR per GPU-hour" in (table.note or "")


def test_a_number_is_rounded_once_and_shown_as_kept() -> None:
    column = Column("h", "Hours", 2)
    assert column.cell(1.23456) == 1.23
    # Halves that binary floating point holds exactly go to the even digit: 0.125 → 0.12 (half
    # up would give 0.13), 0.375 → 0.38, 2.5 → 2 and 3.5 → 4 with no decimals.
    assert [column.cell(v) for v in (0.125, 0.375, -0.125)] == [0.12, 0.38, -0.12]
    assert [Column("n", "N", 0).cell(v) for v in (2.5, 3.5, 0.5)] == [2.0, 4.0, 0.0]
    assert column.cell(-0.0001) == 0.0 and column.show(column.cell(-0.0001)) == "0.00"
    assert column.cell(float("nan")) is None and column.show(None) == "—"
    assert Column("name", "Name").cell("ml") == "ml"


def test_pending_without_scheduling_data_says_so() -> None:
    table = pending(RQ, Results(scheduling=False))
    assert table.rows == () and table.empty.startswith("no scheduling data")


def _report() -> Report:
    table = Table.of(
        "ns",
        "Namespaces",
        (Column("namespace", "NS"), Column("h", "H", 2)),
        [("ml", 0.125), ("a,b", 0.375)],
    )
    return Report("t", "http://p", "7d", 0, 1, 60, None, (), "USD", 2.5, 0.7, (table,), ())


def test_csv_is_one_file_per_table_with_the_html_text(tmp_path: Path) -> None:
    report = _report()
    out = tmp_path / "gpu-report.csv"
    assert csv_paths(out, report) == {"ns": tmp_path / "gpu-report.ns.csv"}
    (written,) = write(report, str(out), "csv")
    assert list(csv.reader(io.StringIO(written.read_text()))) == [
        ["namespace", "h"],
        ["ml", "0.12"],  # exact halves to the even digit, rounded once, as in the JSON
        ["a,b", "0.38"],
    ]
    assert as_csv(report.tables[0]) == written.read_text()


def test_json_carries_the_rounded_numbers(tmp_path: Path) -> None:
    (written,) = write(_report(), str(tmp_path / "r.json"), "json")
    data = json.loads(written.read_text())
    assert data["tables"]["ns"]["rows"] == [
        {"namespace": "ml", "h": 0.12},
        {"namespace": "a,b", "h": 0.38},
    ]
    assert data["cost"] == {"gpu_hour": 2.5, "currency": "USD"}


def test_progress_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    plain, tty = io.StringIO(), Tty()
    for stream in (plain, tty):
        progress = Progress(2, stream)
        progress.step()
        progress.step()
        progress.close()
    assert plain.getvalue() == ""
    assert tty.getvalue() == "\r[1/2] queries\r[2/2] queries\r\033[K"
