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
from kube_gpu_exporter.rules.config import Config

RQ = ReportQueries(Config(), parse_since("7d", now=1_000_000_000))


def _ns(values: dict[str, float]) -> list[Sample]:
    return [Sample({"namespace": ns}, v) for ns, v in values.items()]


def test_namespaces_busy_idle_and_cost_sorted_by_cost() -> None:
    results = Results(
        instant={
            "namespace_allocated": _ns({"ml": 100.0, "notebooks": 24.0, "quiet": 10.0}),
            "namespace_idle": _ns({"ml": 10.0, "notebooks": 24.0}),  # quiet: none recorded
        }
    )
    table = namespaces(RQ, results)
    assert [r["namespace"] for r in table.records()] == ["notebooks", "ml", "quiet"]
    ml = table.records()[1]
    assert (ml["busy_gpu_hours"], ml["idle_gpu_hours"], ml["idle_percent"]) == (90.0, 10.0, 10.0)
    assert ml["idle_cost"] == 10.0 * Config().cost.gpu_hour
    assert table.records()[2]["idle_cost"] == 0.0


def test_a_number_is_rounded_once_and_shown_as_kept() -> None:
    column = Column("h", "Hours", 2)
    assert column.cell(1.23456) == 1.23
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
        [("ml", 1.005), ("a,b", 2.0)],
    )
    return Report("t", "http://p", "7d", 0, 1, 60, None, (), "USD", 2.5, 0.7, (table,), ())


def test_csv_is_one_file_per_table_with_the_html_text(tmp_path: Path) -> None:
    report = _report()
    out = tmp_path / "gpu-report.csv"
    assert csv_paths(out, report) == {"ns": tmp_path / "gpu-report.ns.csv"}
    (written,) = write(report, str(out), "csv")
    assert list(csv.reader(io.StringIO(written.read_text()))) == [
        ["namespace", "h"],
        ["ml", "1.00"],  # round half to even, once, as the JSON
        ["a,b", "2.00"],
    ]
    assert as_csv(report.tables[0]) == written.read_text()


def test_json_carries_the_rounded_numbers(tmp_path: Path) -> None:
    (written,) = write(_report(), str(tmp_path / "r.json"), "json")
    data = json.loads(written.read_text())
    assert data["tables"]["ns"]["rows"] == [
        {"namespace": "ml", "h": 1.0},
        {"namespace": "a,b", "h": 2.0},
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
