"""Each process sets its GIL switch interval in one place, its command's module, with one value.

It was once set in three places with three values (serve's command, cluster's command, and the
cluster view's loop, whose later call made the command's value dead). A library module setting
a process-wide knob hides it from whoever reads the command; this walk keeps it where it is read.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kube_gpu_exporter.exporter import app, cluster_app

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"


def _callers(name: str) -> list[str]:
    """Modules (paths under exporter/) that call `sys.<name>`, once per call."""
    found = []
    for path in sorted(EXPORTER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == name
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sys"
            ):
                found.append(str(path.relative_to(EXPORTER)))
    return found


def test_the_switch_interval_is_set_once_per_process_by_its_command() -> None:
    assert sorted(_callers("setswitchinterval")) == ["app.py", "cluster_app.py"]


def test_each_command_keeps_its_one_value() -> None:
    """serve renders on its collector thread (1 ms); the cluster view's cycle is long pure
    Python beside the scrapes (0.2 ms, the value that was in force)."""
    assert app.GIL_SWITCH_SECONDS == 0.001
    assert cluster_app.SWITCH_INTERVAL == 0.0002


def test_the_collector_policy_is_set_in_one_module() -> None:
    """gc.set_threshold and gc.freeze: the cluster process's frozen heap alone."""
    found = set()
    for path in sorted(EXPORTER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("set_threshold", "freeze", "disable")
                and isinstance(node.value, ast.Name)
                and node.value.id == "gc"
            ):
                found.add(str(path.relative_to(EXPORTER)))
    assert found == {"serve/frozen_heap.py"}


def _calls_in(function: str, module: Path, callee: str) -> bool:
    """Whether `function` in `module` calls `callee` by name."""
    tree = ast.parse(module.read_text(), str(module))
    (found,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == callee
        for node in ast.walk(found)
    )


def test_each_command_caps_malloc_arenas_before_its_threads() -> None:
    """malloc_arenas.py: before the command starts a thread, whatever env it was started with."""
    assert _calls_in("serve", EXPORTER / "app.py", "cap_arenas")
    assert _calls_in("run", EXPORTER / "cluster_app.py", "cap_arenas")
