"""The server is a sealed room: exporter/httpd/ imports the standard library, its own modules
and its request-head parser (httptools), nothing else, so it can be read, fuzzed and replaced
as one piece. An import-linter contract cannot say "only these", so this walks the source.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOM = Path(__file__).resolve().parents[2] / "exporter" / "httpd"
OWN = "kube_gpu_exporter.exporter.httpd"
ALLOWED_THIRD_PARTY = frozenset({"httptools"})


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def _allowed(module: str) -> bool:
    top = module.partition(".")[0]
    return (
        module == OWN
        or module.startswith(OWN + ".")
        or top in sys.stdlib_module_names
        or top in ALLOWED_THIRD_PARTY
    )


def test_the_room_imports_only_the_standard_library_and_itself() -> None:
    strays = {
        f"{path.name}: {module}"
        for path in sorted(ROOM.glob("*.py"))
        for module in _imports(path)
        if not _allowed(module)
    }
    assert not strays, f"exporter/httpd/ reaches outside its room: {sorted(strays)}"


def test_the_room_has_no_relative_imports() -> None:
    """Relative imports would slip past the walk above; the project imports absolutely."""
    relative = [
        path.name
        for path in sorted(ROOM.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert not relative
