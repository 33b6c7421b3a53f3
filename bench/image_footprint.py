"""The container image's size, measured without a Docker engine.

The Dockerfile's final stage is `python:3.12-slim` plus what pip installs there: the project's
wheel and the wheels of its runtime dependencies, built by the builder stage, nothing removed
afterwards (no bench code runs in the image's build). This script repeats that install
outside Docker and adds the base image's size:

1. builds the wheel (`pip wheel <copy of the checkout> --no-deps`, in a temporary copy so that
   setuptools' `build/` stays out of the working tree);
2. collects the wheels the builder stage would hand over: the dependencies as CPython 3.12
   manylinux wheels for this machine's architecture (`pip download --only-binary=:all:
   --python-version 3.12 --platform manylinux_…`), from the configured index;
3. installs them as the final stage does (`pip install --no-cache-dir --no-index
   --find-links`, here with `--target`; pip compiles .pyc with this interpreter, so their
   sizes are this Python's, within a few percent of 3.12's) and measures the tree: apparent
   size (what a layer holds, as Docker counts it) and `du` (disk blocks), per distribution;
4. adds the base image's uncompressed size (a published figure, see BASE_SIZE_SOURCE) and
   compares the total with the 200 MB target (MB = 10^6 bytes, as `docker images` prints);
5. smoke-runs the install with this interpreter (its own wheels for this Python): the CPU
   time and peak memory of importing what `serve --kubernetes.enabled` loads, `serve
   --simulate` answering /metrics, `generate`, that the `kubernetes` package (the optional
   `auth-provider` extra) is not there, and that no file under the install was written or
   changed meanwhile (the DaemonSet mounts the root filesystem read-only).

Usage (from the repository root; stdlib only, so any Python 3.11+ runs it):

    .venv/bin/python bench/image_footprint.py [--json FILE] [--no-smoke]

Figures are reported, never asserted: the exit status is non-zero only when a step the
measurement needs fails (no index to download from, pip errors).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BASE_IMAGE = "python:3.12-slim"
TARGET_PYTHON = "3.12"
# Uncompressed ("virtual") size of python:3.12-slim for linux/amd64, as Docker counts it.
BASE_SIZE_MB = 119.25
BASE_SIZE_SOURCE = (
    "docker-library/repo-info, repos/python/local/3.12-slim.md at commit "
    "6cb269bacb2ec7c48739894a0edb63acc8f63a6e: python:3.12.14-slim-trixie, linux/amd64, "
    "'Virtual Size: ~ 119.25 Mb (total size of all layers on-disk)', image created 2026-08-25"
)
BASE_COMPRESSED_MB = 43.2
BASE_COMPRESSED_SOURCE = (
    "docker-library/repo-info, repos/python/remote/3.12-slim.md at commit "
    "2986dca3a80cb11b70fc4599941096374ea9e509: python:3.12-slim (3.12.13) linux/amd64, "
    "'Total Size: 43.2 MB (43188023 bytes), compressed transfer size'"
)
TARGET_MB = 200.0
MB, MIB = 1_000_000, 1 << 20

# The final stage's `pip install` flags; tests/test_dockerfile.py checks the Dockerfile has them.
PIP_INSTALL_FLAGS = ("--no-cache-dir", "--no-index")
# Highest glibc of the base image's Debian (trixie: 2.41); wheels needing more cannot load.
GLIBC_MINOR_MAX = 41

# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Footprint:
    apparent: int = 0  # sum of file sizes: what a layer holds, as Docker counts image size
    du: int = 0  # allocated blocks, as `du` reports
    files: int = 0
    by_distribution: Counter[str] = field(default_factory=Counter)


def _owners(site: Path) -> dict[str, str]:
    """Top-level names in site-packages → the distribution that installed them (from RECORD)."""
    owners: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        owners[info.name] = name
        record = info / "RECORD"
        if not record.is_file():
            continue
        for line in record.read_text(encoding="utf-8").splitlines():
            first = line.split(",", 1)[0].split("/", 1)[0]
            if first and first != "..":
                owners.setdefault(first, name)
    return owners


def measure(site: Path) -> Footprint:
    owners = _owners(site)
    result = Footprint()
    for path in site.rglob("*"):
        if path.is_dir() or path.is_symlink():
            continue
        stat = path.lstat()
        top = path.relative_to(site).parts[0]
        owner = owners.get(top)
        if top == "bin":
            owner = "(console scripts)"
        result.apparent += stat.st_size
        result.du += stat.st_blocks * 512
        result.files += 1
        result.by_distribution[owner or f"(unowned) {top}"] += stat.st_size
    return result


def snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    """Every file under `tree` with its size and mtime, to tell whether anything wrote there."""
    files: dict[str, tuple[int, int]] = {}
    for path in tree.rglob("*"):
        if not path.is_dir():
            stat = path.lstat()
            files[path.relative_to(tree).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return files


# --- installing as the image does ----------------------------------------------------------------


class StepError(Exception):
    """A step the measurement needs failed; the message says which and why."""


def _pip(*args: str, what: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
        raise StepError(f"{what} failed: {(errors or proc.stderr.splitlines() or ['?'])[-1]}")


def build_wheel(work: Path) -> Path:
    """The project's wheel, built from a copy of the files the Dockerfile's builder copies."""
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("exporter", "rules", "grafana", "demo"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    out = work / "wheel"
    _pip("wheel", str(src), "--no-deps", "--quiet", "--wheel-dir", str(out), what="pip wheel")
    (wheel,) = out.glob("kube_gpu_exporter-*.whl")
    return wheel


def target_platform_args(python_version: str) -> list[str]:
    """pip's options selecting CPython `python_version` manylinux wheels for this machine."""
    arch = platform.machine()
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for minor in range(GLIBC_MINOR_MAX, 4, -1):
        args += ["--platform", f"manylinux_2_{minor}_{arch}"]
    for legacy in ("manylinux2014", "manylinux2010", "manylinux1"):
        args += ["--platform", f"{legacy}_{arch}"]
    return args


def collect_wheels(wheel: Path, out: Path, target: list[str]) -> list[Path]:
    """The wheel and its runtime dependencies' wheels, as the builder's `pip wheel` leaves."""
    _pip("download", "--quiet", "--dest", str(out), *target, str(wheel), what="pip download")
    shutil.copy2(wheel, out / wheel.name)
    return sorted(out.glob("*.whl"))


def install(wheels: Path, site: Path, target: list[str], flags: tuple[str, ...]) -> None:
    _pip(
        "install",
        "--quiet",
        *flags,
        "--find-links",
        str(wheels),
        "--target",
        str(site),
        *target,
        "kube-gpu-exporter",
        what="pip install",
    )


# --- smoke run of the install -------------------------------------------------------------

# Runs the CLI from `site` only: -I -S keep this interpreter's own site-packages (the .venv,
# with an editable install of the checkout) off sys.path.
_RUN = (
    "import site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[1:]; "
    "from kube_gpu_exporter.exporter.cli import main; sys.exit(main(sys.argv[1:]))"
)
_KUBERNETES = (
    "import importlib.util, site, sys; site.addsitedir(sys.argv[1]); "
    "print(importlib.util.find_spec('kubernetes') is not None)"
)


_IMPORT_COST = (
    "import site, sys, time, resource; site.addsitedir(sys.argv[1]); "
    "import kube_gpu_exporter.exporter.cli, kube_gpu_exporter.exporter.nvml.sampler, "
    "kube_gpu_exporter.exporter.kubelet.client, kube_gpu_exporter.exporter.kubernetes.pods; "
    "print(time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def _python(*args: str) -> list[str]:
    return [sys.executable, "-I", "-S", "-B", *args]  # -B: PYTHONDONTWRITEBYTECODE, as the image


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


def smoke_import_cost(site: Path) -> str:
    proc = subprocess.run(
        _python("-c", _IMPORT_COST, str(site)), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return f"FAILED: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    cpu, max_rss_kib = proc.stdout.split()
    return f"{float(cpu):.2f} s CPU, peak RSS {int(max_rss_kib) / 1024:.0f} MiB"


def smoke_serve(site: Path) -> str:
    port = _free_port()
    scenario = site / "kube_gpu_exporter" / "exporter" / "simulated" / "scenarios" / "demo.yaml"
    args = ["serve", f"--simulate={scenario}", f"--web.listen-address=127.0.0.1:{port}"]
    proc = subprocess.Popen(
        _python("-c", _RUN, str(site), *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            status, body = _get(f"http://127.0.0.1:{port}/metrics")
            if status == 200 and "nvidia_gpu_up" in body:
                series = sum(1 for line in body.splitlines() if line and line[0] != "#")
                return f"ok: /metrics answered 200 with {series} series"
            time.sleep(0.2)
        return f"FAILED: no metrics (exit {proc.poll()})"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.returncode not in (0, None) and stderr:
            print(stderr[-2000:], file=sys.stderr)


def smoke_kubernetes(site: Path) -> str:
    """The `kubernetes` package is the auth-provider extra's: not in the image."""
    proc = subprocess.run(
        _python("-c", _KUBERNETES, str(site)), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return f"FAILED: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    return "FAILED: installed" if proc.stdout.strip() == "True" else "ok: not installed"


def smoke_generate(site: Path, work: Path) -> str:
    out = work / "generated"
    args = ["generate", f"--out={out}", f"--runbooks={out / 'runbooks.md'}"]
    proc = subprocess.run(
        _python("-c", _RUN, str(site), *args), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return f"FAILED: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    return f"ok: wrote {sum(1 for p in out.rglob('*') if p.is_file())} files"


def smoke(wheel: Path, work: Path) -> dict[str, str]:
    """The install run by this interpreter (its own wheels for this Python version)."""
    wheels, site = work / "host-wheels", work / "host-site"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = target_platform_args(here)
    collect_wheels(wheel, wheels, target)
    install(wheels, site, target, PIP_INSTALL_FLAGS)
    before = snapshot(site)
    results = {
        "python": f"CPython {platform.python_version()}",
        "importing what serve --kubernetes.enabled loads": smoke_import_cost(site),
        "serve --simulate": smoke_serve(site),
        "kubernetes": smoke_kubernetes(site),
        "generate": smoke_generate(site, work),
    }
    after = snapshot(site)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    results["files written under the install"] = ", ".join(changed[:10]) or "none"
    return results


# --- report ---------------------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


@dataclass
class Result:
    wheels: list[str]
    wheels_bytes: int
    image: Footprint
    smoke: dict[str, str] = field(default_factory=dict)

    @property
    def total_mb(self) -> float:
        return BASE_SIZE_MB + self.image.apparent / MB

    def as_json(self) -> dict[str, object]:
        def sizes(f: Footprint) -> dict[str, int]:
            return {"apparent_bytes": f.apparent, "du_bytes": f.du, "files": f.files}

        return {
            "base_image": BASE_IMAGE,
            "base_uncompressed_mb": BASE_SIZE_MB,
            "base_source": BASE_SIZE_SOURCE,
            "base_compressed_mb": BASE_COMPRESSED_MB,
            "base_compressed_source": BASE_COMPRESSED_SOURCE,
            "target_python": TARGET_PYTHON,
            "arch": platform.machine(),
            "wheels": self.wheels,
            "wheels_bytes": self.wheels_bytes,
            "image": sizes(self.image),
            "image_by_distribution": dict(self.image.by_distribution.most_common()),
            "added_mb": round(self.image.apparent / MB, 1),
            "total_mb": round(self.total_mb, 1),
            "target_mb": TARGET_MB,
            "smoke": self.smoke,
        }

    def render(self) -> str:
        image, total = self.image, self.total_mb
        verdict = "under" if total < TARGET_MB else "OVER"
        lines = [
            f"Image footprint: {BASE_IMAGE} + the installed wheels "
            f"(CPython {TARGET_PYTHON}, manylinux {platform.machine()})",
            f"  wheels from the builder stage: {len(self.wheels)} files, "
            f"{_mib(self.wheels_bytes)} (bind-mounted into the install step, not a layer)",
            "",
            "  what the final stage adds          apparent          du   files",
            f"  pip install (Dockerfile)         {_mib(image.apparent):>10}  "
            f"{_mib(image.du):>10}  {image.files:>6}",
            "",
            "  top 10 distributions in the image (apparent size):",
            *(
                f"    {name:<28} {_mib(size):>10}"
                for name, size in image.by_distribution.most_common(10)
            ),
            "",
            f"  base {BASE_IMAGE}, uncompressed, linux/amd64: {BASE_SIZE_MB} MB",
            f"    source: {BASE_SIZE_SOURCE}",
            f"    (compressed pull {BASE_COMPRESSED_MB} MB; source: {BASE_COMPRESSED_SOURCE})",
            f"  added by the final stage: {image.apparent / MB:.1f} MB "
            f"({_mib(image.apparent)} apparent, {_mib(image.du)} du)",
            f"  total: {BASE_SIZE_MB} + {image.apparent / MB:.1f} = {total:.1f} MB, "
            f"{verdict} the {TARGET_MB:.0f} MB target by {abs(TARGET_MB - total):.1f} MB "
            "(MB = 10^6 bytes, as docker images prints)",
        ]
        if self.smoke:
            lines += ["", "  smoke run of the install with this interpreter:"]
            lines += [f"    {key}: {value}" for key, value in self.smoke.items()]
        return "\n".join(lines)


def run(work: Path, with_smoke: bool) -> Result:
    wheel = build_wheel(work)
    target = target_platform_args(TARGET_PYTHON)
    wheels = collect_wheels(wheel, work / "wheels", target)
    image_site = work / "site-image"
    install(work / "wheels", image_site, target, PIP_INSTALL_FLAGS)
    result = Result(
        wheels=[w.name for w in wheels],
        wheels_bytes=sum(w.stat().st_size for w in wheels),
        image=measure(image_site),
    )
    if with_smoke:
        result.smoke = smoke(wheel, work)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="image-footprint-") as tmp:
        try:
            result = run(Path(tmp), with_smoke=not args.no_smoke)
        except StepError as exc:
            print(f"image_footprint: {exc}", file=sys.stderr)
            return 1
    print(result.render())
    if args.json:
        args.json.write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
