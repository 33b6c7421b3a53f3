"""Refresh exporter/catalog/xid_catalog.csv from NVIDIA's published Xid catalog.

NVIDIA publishes the catalog as a table on its "XID Errors" pages (docs/xid-catalog.md gives
the address). Save that table as CSV (a spreadsheet's export of the page's table will do): a
header row naming at least `Xid` (or the page's `Code`) and `Immediate Action` (or the page's
"Resolution Bucket (Immediate Action)"), and where present `Mnemonic`, `Investigatory Action`
and `Architectures` (or the page's "Applies to A100" … YES/NO columns); case, spaces and
underscores are ignored. Then:

    .venv/bin/python tools/xid_catalog.py SAVED.csv --checked YYYY-MM-DD

rewrites the table: the catalog's columns from the saved file (where the page writes a sentence
instead of an immediate-action bucket the table records NOTE, where it writes nothing NONE),
every code of either file kept (a code the saved file lacks keeps its row and is reported), our
own `name` and `description` columns untouched, the header's date set to --checked and its
version raised by one. The table is loaded back before it is written, so an action (immediate
or investigatory) that no class knows fails here, and a person decides its class
(exporter/catalog/xid.py). Each change is printed; review them, run `kube-gpu-exporter
generate` (the alerts' default lists follow) and commit.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

from kube_gpu_exporter.exporter.catalog import xid

TABLE = Path(__file__).resolve().parents[1] / "exporter" / "catalog" / xid.TABLE
CATALOG_COLUMNS = ("mnemonic", "immediate_action", "investigatory_action", "architectures")
COLUMNS = ("xid", *CATALOG_COLUMNS, "name", "description")


def _key(header: str) -> str:
    """Our column for a saved header: ours as they are, and the page's own ("Code",
    "Resolution Bucket (Immediate Action)", "... (Investigatory Action)")."""
    key = re.sub(r"[\s_]+", "_", header.strip().lower())
    for column in ("immediate_action", "investigatory_action"):
        if column in key:
            return column
    return "xid" if key == "code" else key


def _architectures(fields: dict[str, str]) -> str:
    """The page's "Applies to A100" … YES/NO columns as one cell, `A100,H100`."""
    return ",".join(
        k.removeprefix("applies_to_").upper()
        for k, v in fields.items()
        if k.startswith("applies_to_") and v.upper() == "YES"
    )


def _bucket(cell: str) -> str:
    """An immediate-action cell as the table records it: the catalog's bucket (RESET_GPU,
    CHECK_APP/CUDA), or NOTE for a sentence, NONE for nothing: each is classed once in
    exporter/catalog/xid.py rather than a sentence per code."""
    if not cell:
        return "NONE"
    return cell if re.fullmatch(r"[A-Z0-9_/]+", cell) else "NOTE"


def published(text: str) -> dict[int, dict[str, str]]:
    """The saved catalog's rows by code, with our column names."""
    rows: dict[int, dict[str, str]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        fields = {_key(k): (v or "").strip() for k, v in row.items() if k}
        code = fields.get("xid", "")
        if code.isdigit():
            fields.setdefault("architectures", _architectures(fields))
            fields["immediate_action"] = _bucket(fields.get("immediate_action", ""))
            rows[int(code)] = {c: fields.get(c, "") for c in CATALOG_COLUMNS}
    if not rows:
        raise SystemExit("no rows with an `Xid` column of numbers in the saved catalog")
    return rows


def merged(table: str, catalog: dict[int, dict[str, str]], checked: str) -> tuple[str, list[str]]:
    """The new table's text and the changes, one line each."""
    header = [line for line in table.splitlines() if line.startswith("#")]
    ours = {x.code: x for x in xid.load(table)}
    changes: list[str] = []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for code in sorted({*ours, *catalog}):
        old = ours.get(code)
        was = {c: getattr(old, c) for c in CATALOG_COLUMNS} if old else {}
        now = catalog.get(code)
        if now is None:
            changes.append(f"Xid {code}: not in the saved catalog; row kept")
            now = was
        for column in CATALOG_COLUMNS:
            if was.get(column, "") != now[column]:
                changes.append(f"Xid {code}: {column} {was.get(column, '')!r} -> {now[column]!r}")
        writer.writerow(
            (code, *(now[c] for c in CATALOG_COLUMNS))
            + ((old.name, old.meaning) if old else ("", ""))
        )
    version = int(xid.header_fact(table, "Table version")) + (1 if changes else 0)
    dated = [
        f"# Catalog checked: {checked}. Table version: {version}."
        if line.startswith("# Catalog checked:")
        else line
        for line in header
    ]
    text = "\n".join(dated) + "\n" + out.getvalue()
    xid.load(text)  # an action no class knows, or a bad code, fails before anything is written
    return text, changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved", help="NVIDIA's catalog table, saved as CSV")
    parser.add_argument("--checked", required=True, help="the day the page was read (YYYY-MM-DD)")
    parser.add_argument("--table", default=str(TABLE), help="the table to rewrite")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.checked):
        parser.error("--checked: YYYY-MM-DD")
    table = Path(args.table)
    try:
        saved = Path(args.saved).read_text(encoding="utf-8-sig")
    except OSError as exc:  # a path typed wrong: one line, not a traceback
        parser.error(f"{args.saved}: {exc.strerror}")
    catalog = published(saved)
    try:
        text, changes = merged(table.read_text(encoding="utf-8"), catalog, args.checked)
    except ValueError as exc:
        print(f"xid_catalog: {exc}", file=sys.stderr)
        return 1
    table.write_text(text, encoding="utf-8")
    print(*changes or ["no change to the catalog's columns"], sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
