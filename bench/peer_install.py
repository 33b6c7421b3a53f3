"""nvitop-exporter, the peer the node bench compares against, in a virtual environment of its own.

It is installed from PyPI at a pinned version into a cache folder outside the checkout
(${XDG_CACHE_HOME:-~/.cache}/kube-gpu-exporter/peers/nvitop-<version>), created the first time
and reused after, so it never mixes its dependencies with ours (nvitop pins nvidia-ml-py to a
range of its own) and nothing of it is committed. A folder whose command does not answer
the pinned version is built again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from errors import BenchError

NVITOP_VERSION = "1.7.2"
# nvitop-exporter is released with nvitop under the same number.
REQUIREMENTS = (f"nvitop=={NVITOP_VERSION}", f"nvitop-exporter=={NVITOP_VERSION}")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kube-gpu-exporter" / "peers" / f"nvitop-{NVITOP_VERSION}"


def _installed_version(command: Path) -> str:
    if not command.is_file():
        return ""
    done = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=False)
    words = done.stdout.split()  # "nvitop-exporter 1.7.2 (nvitop 1.7.2)"
    return words[1] if done.returncode == 0 and len(words) > 1 else ""


def nvitop_exporter(say: Callable[[str], None] = print) -> Path:
    """The nvitop-exporter command, installed first when the cache lacks it."""
    venv = cache_dir()
    command = venv / "bin" / "nvitop-exporter"
    if _installed_version(command) == NVITOP_VERSION:
        return command
    say(f"installing {' '.join(REQUIREMENTS)} into {venv}")
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *REQUIREMENTS],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise BenchError(f"{' '.join(step[:3])} failed: {' '.join(tail)}")
    version = _installed_version(command)
    if version != NVITOP_VERSION:
        raise BenchError(f"{command} --version says {version!r}, not {NVITOP_VERSION}")
    return command
