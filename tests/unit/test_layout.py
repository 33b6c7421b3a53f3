"""The layout reads like the data flow, and stays that way.

import-linter's contracts (pyproject.toml) fix the direction between layers; these tests add
what a contract cannot say: no import cycle anywhere (not even inside a subpackage), modules
of a readable size, and docs/architecture.md naming every module that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parents[2]
ROOTS = {
    "kube_gpu_exporter.exporter": REPO / "exporter",
    "kube_gpu_exporter.rules": REPO / "rules",
    "kube_gpu_exporter.grafana": REPO / "grafana",
    "kube_gpu_exporter.demo": REPO / "demo",
}
GENERATED = ("api_pb2.py", "api_pb2_grpc.py")  # protoc's output (make proto)
MAX_LINES = 400
MIN_LINES = 20


def _modules() -> dict[str, Path]:
    """Every source module by its import name."""
    found = {}
    for package, folder in ROOTS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def test_import_contracts_hold() -> None:
    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True) == 0


def test_no_module_imports_itself_back() -> None:
    """A depth-first walk over the module graph (type-only imports included): no cycle."""
    graph = grimp.build_graph(*ROOTS, cache_dir=None)
    modules = sorted(graph.modules)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in modules:
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(_modules()))
def test_module_size_is_readable(module: str) -> None:
    """Over ~400 lines a module holds more than one concept; under ~20 it is not one, unless it
    is a package's face or the `python -m` entry."""
    path = _modules()[module]
    if path.name in GENERATED:
        return
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines"
    if path.name not in ("__init__.py", "__main__.py"):
        assert lines >= MIN_LINES, f"{path.relative_to(REPO)} has only {lines} lines"


def test_architecture_doc_names_every_module() -> None:
    """The tree in docs/architecture.md has one line per module; a new module gets its line."""
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = doc.split("## Layout", 1)[1].split("```")[1]
    named = set(re.findall(r"[\w.]+\.py|[\w]+/", tree))
    missing = [
        str(path.relative_to(REPO))
        for path in _modules().values()
        if path.name != "__init__.py" and path.name not in GENERATED and path.name not in named
    ]
    missing += [f"{p.name}/" for p in _packages() if f"{p.name}/" not in named]
    assert not missing, f"docs/architecture.md's layout lacks: {missing}"


def _packages() -> list[Path]:
    return [
        path.parent
        for folder in ROOTS.values()
        for path in folder.rglob("__init__.py")
        if path.parent != folder
    ]
