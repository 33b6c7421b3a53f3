"""Docs and docstrings speak only of what a reader of this repository has.

The project's design brief and its issue tracker live outside the repository; a reader who
meets "the brief" or "(issue 3)" in the docs, the bench report or a module docstring has
nothing to follow. Every tracked text file is checked, so a new file cannot bring them back;
test_cli_help.py holds every --help text to the same pattern.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".cfg", ".txt", ".c", ""}
# "issue 3", "Issue #5", "issues 3 and 5", "the brief", "The brief", "design brief", ../shared.
OUTSIDE_REFERENCES = re.compile(
    r"\.\./shared\b|\b[Ii]ssues?[- ]#?\d+|\bthe issue's\b|\b[Tt]he brief\b|\bdesign brief\b"
)


def tracked_text_files() -> list[Path]:
    listing = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    files = [ROOT / name for name in listing]
    return [
        f for f in files if f.suffix in TEXT_SUFFIXES and f.is_file() and "golden" not in f.parts
    ]


def test_git_lists_the_repository() -> None:
    assert len(tracked_text_files()) > 50


def test_no_reference_to_outside_documents() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tracked_text_files()
        if path != Path(__file__)
        for number, line in enumerate(
            path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        )
        if OUTSIDE_REFERENCES.search(line)
    ]
    assert not hits, "\n".join(hits)
