"""Writing the report: `--format html` (one file), `json` (one file) or `csv`.

CSV is one file per table, named after `--out` with the table's key before the suffix
(`gpu-report.csv` → `gpu-report.namespaces.csv`, `gpu-report.xids.csv`, …): the tables have
different columns, so one file with a `table` column would be a sparse sheet nobody can sort;
a file per table opens as a sheet as it is. Each cell is the text the HTML shows, and the
JSON carries the same rounded numbers (model.py), so the three formats agree.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from kube_gpu_exporter.exporter.output_paths import check_output_file, file_errors
from kube_gpu_exporter.exporter.report.model import Report, Table

FORMATS = ("html", "json", "csv")


def csv_paths(out: Path, report: Report) -> dict[str, Path]:
    """Each table's CSV file beside `out`."""
    suffix = out.suffix or ".csv"
    return {t.key: out.with_name(f"{out.stem}.{t.key}{suffix}") for t in report.tables}


def as_json(report: Report) -> dict[str, Any]:
    return {
        "title": report.title,
        "prometheus": report.prometheus,
        "period": {
            "since": report.since,
            "start": report.start,
            "end": report.end,
            "step_seconds": report.step,
        },
        "cluster": report.cluster,
        "namespaces": list(report.namespaces),
        "cost": {"gpu_hour": report.gpu_hour, "currency": report.currency},
        "efficiency_target": report.target,
        "tables": {
            t.key: {"title": t.title, "columns": [c.key for c in t.columns], "rows": t.records()}
            for t in report.tables
        },
    }


def as_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.key for c in table.columns])
    writer.writerows(table.shown())
    return buffer.getvalue()


def check_out(out: str) -> Path:
    """`--out` checked before any query is asked: a file in a folder that can be written (the
    CSV files sit beside it, in the same folder)."""
    return check_output_file(out, "--out")


def write(report: Report, out: str, fmt: str) -> list[Path]:
    """Write the report in `fmt`; the paths written."""
    path = Path(out)
    if fmt == "csv":
        written = []
        for table in report.tables:
            target = csv_paths(path, report)[table.key]
            with file_errors("write"):
                target.write_text(as_csv(table), encoding="utf-8")
            written.append(target)
        return written
    if fmt == "json":
        text = json.dumps(as_json(report), indent=2, ensure_ascii=False) + "\n"
    else:
        from kube_gpu_exporter.exporter.report.html import render_html

        text = render_html(report)
    with file_errors("write"):
        path.write_text(text, encoding="utf-8")
    return [path]
