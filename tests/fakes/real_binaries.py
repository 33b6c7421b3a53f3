"""Where the tests find the binaries built from Go modules (kube-apiserver, etcd, Prometheus 3 …).

`tools/real_components.py` builds them into a cache outside the checkout and is the one place
that knows their versions and that cache's layout; this module loads it by path (it is a
script, not a package of the project) so that the tests look exactly where the build writes.
A missing binary fails the test with the make target that builds it: a test that needs the
real API server and quietly skips would prove nothing while looking green."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "real_components.py"


def _load_build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("real_components", _SCRIPT)
    assert spec is not None and spec.loader is not None, _SCRIPT
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


real_components = sys.modules.get("real_components") or _load_build_script()


def make_target(binary: str) -> str:
    """`make k8s-bin`, `make prom-bin`, `make node-bin` or `make kueue-bin`: the target that
    builds `binary`."""
    component = real_components.component_of(binary).name
    groups = ("k8s", "prom", "node", "kueue")
    group = next(g for g in groups if component in real_components.GROUPS[g])
    return f"make {group}-bin"


def find(binary: str, version: str | None = None) -> Path | None:
    """The built binary (at `version`, where several are pinned: the kubelet), or None when
    its component's build is not complete."""
    found: Path | None = real_components.binary_path(binary, version)
    return found


def require(binary: str, version: str | None = None) -> Path:
    """The built binary; fails the calling test with the command that builds it."""
    found = find(binary, version)
    if found is None:
        component = real_components.component_of(binary, version)
        pytest.fail(
            f"{binary} ({component.module}@{component.version}) is not built under "
            f"{real_components.cache_root()}: run `{make_target(binary)}`",
            pytrace=False,
        )
    return found
