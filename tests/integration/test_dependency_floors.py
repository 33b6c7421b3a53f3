"""pyproject.toml's lower bounds are releases the tests pass with, not hopes.

A bound is a promise to whoever installs the exporter beside other packages: pip may pick the
bound itself. tests/floors.txt names, for each runtime dependency (a runtime extra's too:
RUNTIME_EXTRAS), the oldest release the tests were run against; pyproject's bound must be
exactly that release. The tests that exercise each
dependency then run again, in a subprocess whose imports find those releases first: installed
(by pip, with what they require) once into a cache folder outside the checkout, keyed by the
floors file, so only the first run needs the package index.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
FLOORS = REPO / "tests" / "floors.txt"

_DECODE = "tests/unit/test_cluster_decode.py::"
_BASIC_AUTH = "tests/integration/test_webconfig.py::"
_REGEX = "tests/integration/test_selector_regex.py::test_a_selector_prometheus_"
_GENERATE = "tests/integration/test_generate.py::test_check_passes_on_the_committed_output"
# Per dependency, the tests that use what the exporter takes from it.
TESTS: dict[str, tuple[str, ...]] = {
    "nvidia-ml-py": ("tests/integration/test_nvml_sampler.py",),
    "prometheus-client": ("tests/unit/test_golden.py", "tests/unit/test_render.py"),
    "pyyaml": ("tests/unit/test_scenario.py", _GENERATE),
    "bcrypt": (
        _BASIC_AUTH + "test_basic_auth",
        _BASIC_AUTH + "test_passwords_over_72_bytes_never_match",
    ),
    # The scenario and thresholds models, and the JSON schema of the Helm chart's values.
    "pydantic": ("tests/unit/test_scenario.py", _GENERATE),
    "google-re2": (_REGEX + "refuses_is_one_line", _REGEX + "accepts_is_accepted"),
    "grpclib": ("tests/integration/test_podresources.py",),
    # The `auth-provider` extra's one use (exporter/kubernetes/plugin_auth.py).
    "kubernetes": (
        "tests/integration/test_kube_client.py::"
        "test_an_auth_provider_token_through_the_kubernetes_loader",
    ),
    # The server's request heads: the parser's own tests and the differential fuzz.
    "httptools": ("tests/unit/test_request_head.py", "tests/integration/test_http_fuzz.py"),
    "msgspec": (
        _DECODE + "test_the_parse_cases_decode_alike_without_the_fallback",
        _DECODE + "test_mutated_cases_decode_alike_in_pages_and_events",
        _DECODE + "test_lists_longer_than_read_are_cut_alike",
    ),
}


def floors() -> dict[str, Version]:
    """name → the release tests/floors.txt pins."""
    pinned: dict[str, Version] = {}
    for line in FLOORS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"tests/floors.txt: not `name==version`: {line}"
            pinned[canonicalize_name(name)] = Version(version)
    return pinned


# Extras a user installs to run the exporter (not to develop it): their bounds are promises too.
RUNTIME_EXTRAS = ("auth-provider",)


def runtime_requirements() -> dict[str, Requirement]:
    """The [project] dependencies and the runtime extras' (not the ones on the project itself)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    lines = [*project["dependencies"], *(d for e in RUNTIME_EXTRAS for d in extras[e])]
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


def lower_bound(requirement: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return max(bounds) if bounds else None


def test_every_lower_bound_is_the_release_the_tests_pass_with() -> None:
    pinned = floors()
    required = runtime_requirements()
    assert set(pinned) == set(required), "tests/floors.txt names each runtime dependency once"
    assert set(TESTS) == set(required), "each runtime dependency has tests run on its floor"
    wrong = {
        name: f"pyproject says {requirement.specifier}, the tests pass from {pinned[name]}"
        for name, requirement in required.items()
        if lower_bound(requirement) != pinned[name] or pinned[name] not in requirement.specifier
    }
    assert not wrong, wrong


def _cache() -> Path:
    """The floors' install folder, one per floors file, Python version and machine."""
    key = f"{FLOORS.read_text(encoding='utf-8')}\n{sys.version_info[:2]}\n{platform.machine()}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "kube-gpu-exporter" / "floors" / digest


def installed_floors() -> Path:
    """The floors and what they require, installed by pip (the index once, then cached)."""
    folder = _cache()
    if folder.is_dir():
        return folder
    partial = folder.with_name(f"{folder.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*pip, "--only-binary=:all:", "--target", str(partial), "-r", str(FLOORS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(
            f"pip could not install tests/floors.txt (needs the index once):\n{done.stderr}"
        )
    try:
        partial.rename(folder)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def test_the_tests_of_each_dependency_pass_on_its_floor() -> None:
    folder = installed_floors()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])])
    pinned = floors()

    # The subprocess imports the floors, not the virtual environment's newer releases.
    probe = (
        "import importlib.metadata as m, json, sys\n"
        "print(json.dumps({n: [m.version(n), str(m.distribution(n).locate_file(''))]"
        " for n in sys.argv[1:]}))"
    )
    found = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe, *pinned],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    for name, (version, where) in found.items():
        assert Version(version) == pinned[name], (name, version)
        assert Path(where).resolve() == folder.resolve(), (name, where)

    tests = sorted({test for selected in TESTS.values() for test in selected})
    pytest_args = ["-q", "-n", "0", "-p", "no:cacheprovider", *tests]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, f"on the floors in {folder}:\n{run.stdout[-6000:]}{run.stderr}"
