"""What a report is, apart from how it is written: tables of rounded numbers, charts of
series, and the facts of the period. HTML, JSON and CSV are all written from these values,
so the three formats cannot disagree.

A number is rounded once, when its table is built (`Column.cell`); the HTML and the CSV show
it with the column's decimals (`Column.show`) and the JSON carries the same rounded number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

Cell = str | float | None


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    decimals: int | None = None  # None: a text column

    def cell(self, value: object) -> Cell:
        """The value as the table keeps it: text as is, a number rounded, NaN as None."""
        if self.decimals is None:
            return None if value is None else str(value)
        if value is None or not isinstance(value, int | float) or math.isnan(value):
            return None
        rounded = round(float(value), self.decimals)
        return rounded + 0.0  # no "-0.00"

    def show(self, value: Cell) -> str:
        """The cell as HTML and CSV show it."""
        if value is None:
            return "—"
        if isinstance(value, str) or self.decimals is None:
            return str(value)
        return f"{value:.{self.decimals}f}"


@dataclass(frozen=True)
class Table:
    key: str  # the JSON key and the CSV file's suffix
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    empty: str = "none in the period"  # said instead of an empty table
    note: str = ""  # a sentence under the title: what the numbers are

    @staticmethod
    def of(
        key: str,
        title: str,
        columns: tuple[Column, ...],
        rows: Sequence[Sequence[object]],
        **text: str,
    ) -> Table:
        """A table whose raw values are rounded by their columns."""
        cells = tuple(
            tuple(col.cell(v) for col, v in zip(columns, row, strict=True)) for row in rows
        )
        return Table(key, title, columns, cells, **text)

    def records(self) -> list[dict[str, Cell]]:
        return [{col.key: v for col, v in zip(self.columns, row, strict=True)} for row in self.rows]

    def shown(self) -> list[list[str]]:
        return [
            [col.show(v) for col, v in zip(self.columns, row, strict=True)] for row in self.rows
        ]


@dataclass(frozen=True)
class Line:
    label: str
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str  # "ratio" draws 0–100 %, anything else is the y axis' label
    lines: tuple[Line, ...]
    target: float | None = None  # a dashed line (the efficiency target)
    empty: str = "no data in the period"


@dataclass(frozen=True)
class Report:
    title: str
    prometheus: str
    since: str
    start: float
    end: float
    step: int
    cluster: str | None
    namespaces: tuple[str, ...]
    currency: str
    gpu_hour: float
    target: float
    tables: tuple[Table, ...]
    charts: tuple[Chart, ...]
    notes: tuple[str, ...] = field(default=())

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == key)
