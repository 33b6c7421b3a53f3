"""Which Prometheus and Alertmanager the demo runs: the ones built from their Go modules
(Prometheus 3, a current Alertmanager) when `make prom-bin` has built them, else Debian's
(`apt-get install prometheus prometheus-alertmanager`), so a new user sees the Prometheus most
platforms run today and the demo still works with the packages alone.

The build cache's layout is tools/real_components.py's (a script outside the package, so not
importable here): `${KGE_BIN_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kube-gpu-exporter/bin}/
<component>-<version>/`, complete once its `.complete` stamp is written. The newest complete
build of each is taken.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kube_gpu_exporter.demo.children import DemoError

STAMP = ".complete"


@dataclass(frozen=True)
class Monitoring:
    """The Prometheus and Alertmanager binaries to run, and what to call them."""

    prometheus: str
    alertmanager: str
    built: bool  # from the Go modules (Prometheus 3), rather than Debian's packages

    def describe(self) -> str:
        """E.g. "Prometheus 3.16.0 and Alertmanager 0.35.0, built from their Go modules"."""
        versions = f"Prometheus {_version(self.prometheus)} and Alertmanager " + _version(
            self.alertmanager
        )
        return f"{versions}, built from their Go modules" if self.built else f"Debian's {versions}"


def cache_root() -> Path:
    """Where `make prom-bin` builds (tools/real_components.py: cache_root)."""
    configured = os.environ.get("KGE_BIN_CACHE")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kube-gpu-exporter" / "bin"


def built(component: str, binary: str) -> str | None:
    """The newest complete build of `binary` in `component`'s cache folders, if any."""
    found = [
        folder / binary
        for folder in cache_root().glob(f"{component}-v*")
        if (folder / STAMP).is_file() and (folder / binary).is_file()
    ]
    if not found:
        return None
    return str(max(found, key=lambda path: _version_key(path.parent.name)))


def find() -> Monitoring:
    """The built pair when both are built, else Debian's; one line naming both ways if
    neither is there."""
    prometheus, alertmanager = (
        built("prometheus", "prometheus"),
        built("alertmanager", "alertmanager"),
    )
    if prometheus and alertmanager:
        return Monitoring(prometheus, alertmanager, built=True)
    debian = {name: shutil.which(name) for name in ("prometheus", "prometheus-alertmanager")}
    if debian["prometheus"] and debian["prometheus-alertmanager"]:
        return Monitoring(debian["prometheus"], debian["prometheus-alertmanager"], built=False)
    missing = next(name for name, path in debian.items() if path is None)
    raise DemoError(
        f"`{missing}` is not installed: apt-get install prometheus prometheus-alertmanager "
        "(`make demo` does it), or build Prometheus 3 and Alertmanager with `make prom-bin`"
    )


def _version(binary: str) -> str:
    try:
        result = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return "(version unknown)"
    match = re.search(r"version (\S+)", result.stdout + result.stderr)
    return match.group(1) if match else "(version unknown)"


def _version_key(folder: str) -> tuple[int, ...]:
    """prometheus-v0.316.0 → (0, 316, 0): newest last."""
    return tuple(int(part) for part in re.findall(r"\d+", folder.rsplit("-v", 1)[-1]))
