"""The Dockerfile's structure, and the wheel it installs (no Docker engine runs here).

The Dockerfile is parsed as Docker reads it (continuation lines joined, comments dropped,
global ARG defaults substituted into FROM) and its stages checked: a builder that makes wheels
and a final slim stage that installs only those wheels, without a compiler or the source tree.
The wheel is built as the builder builds it and checked for what the image runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.serve_command import DEFAULT_PORT

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
PIP_WHEEL = ["pip", "wheel"]
# Source folder → the package it becomes (setuptools' package-dir).
SOURCE_DIRS = {
    "exporter": "kube_gpu_exporter/exporter",
    "rules": "kube_gpu_exporter/rules",
    "grafana": "kube_gpu_exporter/grafana",
    "demo": "kube_gpu_exporter/demo",
}
# Files of the source folders that are not installed, and why.
NOT_SHIPPED = {
    # Documents every key of the thresholds file; `generate` has its defaults in code
    # (rules/config.py) and reads a thresholds file only when --config names one.
    "rules/thresholds.example.yaml",
}
COMPILERS = ("gcc", "g++", "clang", "build-essential", "make", "cmake", "python3-dev")


def _footprint() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "image_footprint", REPO / "bench" / "image_footprint.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


footprint = _footprint()


# --- the Dockerfile, as Docker reads it -------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of a Dockerfile."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue  # comments (and parser directives), also inside continued instructions
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            image = re.sub(
                r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), words[0]
            )
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        elif not stages and keyword == "ARG":
            key, _, default = args.partition("=")
            global_args[key] = default
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, args))
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))[1]


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not the exec (JSON) form: {args}"
    return [str(v) for v in value]


def _commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line (after its --mount options), split on && ; |."""
    words = shlex.split(run)
    while words and words[0].startswith("--mount"):
        words.pop(0)
    commands: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";", "|"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _pip_installs(stage: Stage) -> list[list[str]]:
    """The arguments of every `pip install` the stage runs."""
    found = []
    for run in stage.all("RUN"):
        for cmd in _commands(run):
            if cmd[:2] in (["pip", "install"], ["pip3", "install"]):
                found.append(cmd[2:])
            elif cmd[:4] in (
                ["python", "-m", "pip", "install"],
                ["python3", "-m", "pip", "install"],
            ):
                found.append(cmd[4:])
    return found


def test_two_stages_on_one_slim_python_base(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    builder = stages[0]
    assert builder.name == "builder"
    for stage in stages:
        assert re.fullmatch(r"python:3\.\d+-slim(-[a-z]+)?", stage.image), stage.image
    assert stages[-1].image == builder.image, "the wheels are built for the final stage's Python"


def _pip_wheels(stage: Stage) -> list[list[str]]:
    """The arguments of every `pip wheel` the stage runs."""
    return [cmd[2:] for run in stage.all("RUN") for cmd in _commands(run) if cmd[:2] == PIP_WHEEL]


def _option(args: list[str], name: str) -> str | None:
    """The value of `--name value` or `--name=value` in pip's arguments."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


def test_the_builder_makes_wheels_of_the_locked_dependencies_then_the_project(
    stages: list[Stage],
) -> None:
    builder = stages[0]
    dependencies, project = _pip_wheels(builder)
    # Exactly the lock, hash-checked; without --no-deps, a dependency missing from the lock
    # fails the build instead of being fetched unpinned.
    assert _option(dependencies, "-r") == LOCK.name and "--require-hashes" in dependencies
    assert "--no-deps" not in dependencies and "." not in dependencies
    # The project's own wheel: its dependencies are already there.
    assert project[-1] == "." and "--no-deps" in project
    for args in (dependencies, project):
        assert _option(args, "--wheel-dir") == "/wheels"
        assert not any("[test]" in a for a in args)
    assert any(LOCK.name in copy.split()[:-1] for copy in builder.all("COPY"))


# --- the lock -----------------------------------------------------------------------------------


def locked() -> dict[str, tuple[Version, list[str]]]:
    """name → (the version requirements.lock pins, the sha256 hashes it allows)."""
    text = LOCK.read_text(encoding="utf-8").replace("\\\n", " ")
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, _, version = words[0].partition("==")
        hashes = [w.removeprefix("--hash=sha256:") for w in words[1:]]
        assert version and all(w.startswith("--hash=sha256:") for w in words[1:]), line
        pins[canonicalize_name(name)] = (Version(version), hashes)
    return pins


def _runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(d) for d in project["dependencies"]]


def test_the_lock_pins_each_runtime_dependency_within_pyprojects_range() -> None:
    pins = locked()
    for requirement in _runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: run `make lock`"
        version, _ = pins[name]
        assert version in requirement.specifier, (
            f"requirements.lock pins {name}=={version}, outside pyproject's "
            f"{requirement.specifier}: run `make lock`"
        )
    for pinned, (_, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), pinned


def test_the_lock_holds_what_its_packages_require() -> None:
    """Checked for each locked package installed here at the locked version (the others'
    requirements are on the index only; the image's build, hash-checked, refuses anything
    unlocked): what it requires on the image's Python and Linux is locked too, at a version it
    accepts."""
    pins = locked()
    python = parse(DOCKERFILE.read_text(encoding="utf-8"))[0]["PYTHON_IMAGE"]
    version = re.match(r"python:(\d+\.\d+)", python)
    assert version, python
    environment = {key: str(value) for key, value in default_environment().items()} | {
        "python_version": version.group(1),
        "python_full_version": f"{version.group(1)}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "extra": "",
    }
    missing = []
    for name, (pinned, _) in pins.items():
        try:
            installed = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Version(installed.version) != pinned:
            continue
        for line in installed.requires or []:
            needed = Requirement(line)
            if needed.marker is not None and not needed.marker.evaluate(environment):
                continue
            dependency = canonicalize_name(needed.name)
            if dependency not in pins or pins[dependency][0] not in needed.specifier:
                missing.append(f"{name} requires {needed}")
    assert not missing, f"{missing}: run `make lock`"


def test_the_final_stage_installs_only_the_builders_wheels(final: Stage) -> None:
    (install,) = _pip_installs(final)
    for flag in footprint.PIP_INSTALL_FLAGS:  # the flags the footprint measurement uses
        assert flag in install, f"{flag} missing from the final stage's pip install"
    assert "--no-compile" not in install, (
        "the root filesystem is read-only: without .pyc every start compiles again"
    )
    links = next(a.split("=", 1)[1] for a in install if a.startswith("--find-links="))
    requirements = [a for a in install if not a.startswith("-")]
    assert requirements == ["kube-gpu-exporter"], "a distribution name, never a source tree"
    mounts = re.findall(r"--mount=(\S+)", " ".join(final.all("RUN")))
    assert f"type=bind,from=builder,source=/wheels,target={links}" in mounts
    assert not any(a.split()[0].startswith("--from=") for a in final.all("COPY")), (
        "wheels are bind-mounted, not copied (a COPY stays in the image as a layer)"
    )


def test_the_final_stage_has_no_compiler_and_no_source(final: Stage) -> None:
    for run in final.all("RUN"):
        for cmd in _commands(run):
            if cmd[:1] in (["apt-get"], ["apt"]) and "install" in cmd:
                assert not set(cmd) & set(COMPILERS), f"a compiler in the final stage: {cmd}"
    for copy in final.all("COPY") + final.all("ADD"):
        assert not re.search(r"(^|\s)(\.|exporter|rules|grafana|pyproject\.toml)(\s|$)", copy)


def test_no_bench_code_in_the_image_build() -> None:
    """What pip installs is the image: no measurement script trims or checks it in the build."""
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    instructions = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in instructions if "bench/" in line or "image_footprint" in line]


def test_entrypoint_port_and_environment(final: Stage) -> None:
    assert _exec_form(final.all("ENTRYPOINT")[-1]) == ["kube-gpu-exporter"]
    assert _exec_form(final.all("CMD")[-1]) == ["serve"]
    assert final.all("EXPOSE") == [str(DEFAULT_PORT)]
    env = " ".join(final.all("ENV"))
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"):
        assert setting in env
    assert final.all("USER")[-1] in ("0", "0:0", "root"), "root: the pod-resources socket"


def test_oci_labels(final: Stage) -> None:
    labels = " ".join(final.all("LABEL"))
    for key in ("title", "description", "version", "source", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    args = dict(a.partition("=")[::2] for a in final.all("ARG"))
    assert args.get("VERSION") == __version__, "the image's version label is the package's"
    for used in re.findall(r"\$\{(\w+)\}", labels):
        assert used in args, f"${{{used}}} is empty in the final stage: declare ARG {used} there"


def test_the_build_context_keeps_what_the_build_reads() -> None:
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    for needed in (
        "pyproject.toml",
        "README.md",
        LOCK.name,
        "exporter",
        "rules",
        "grafana",
    ):
        assert needed not in ignored
    for heavy in (".venv", ".git", "bench/results", "**/__pycache__"):
        assert heavy in ignored


# --- the wheel ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel, built by `pip wheel --no-deps` from a copy of what the builder copies."""
    path = footprint.build_wheel(tmp_path_factory.mktemp("wheel"))
    return zipfile.ZipFile(path)


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{name}", n)]
    return wheel.read(path).decode()


def test_the_wheel_holds_what_the_image_runs(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for needed in (
        "kube_gpu_exporter/exporter/cli.py",
        "kube_gpu_exporter/exporter/kubelet/v1/api_pb2.py",
        "kube_gpu_exporter/exporter/kubelet/v1/api_pb2_grpc.py",
        # `serve --simulate` in the image
        "kube_gpu_exporter/exporter/simulated/scenarios/demo.yaml",
        "kube_gpu_exporter/exporter/generate/command.py",
        "kube_gpu_exporter/grafana/dashboards/__init__.py",  # `generate` builds the dashboards
    ):
        assert needed in names, needed
    assert all(n.startswith("kube_gpu_exporter") for n in names), "one top-level package"


def test_the_wheel_holds_every_file_of_the_source_folders(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    missing = []
    for folder, package in SOURCE_DIRS.items():
        for path in sorted((REPO / folder).rglob("*")):
            relative = path.relative_to(REPO).as_posix()
            if path.is_dir() or "__pycache__" in path.parts or relative in NOT_SHIPPED:
                continue
            if f"{package}/{path.relative_to(REPO / folder).as_posix()}" not in names:
                missing.append(relative)
    assert not missing, (
        f"not in the wheel: {missing}; add the package to [tool.setuptools] packages "
        "or the file to package-data in pyproject.toml"
    )


def test_the_console_script(wheel: zipfile.ZipFile) -> None:
    entry_points = _dist_info(wheel, "entry_points.txt")
    section = entry_points.split("[console_scripts]", 1)[1].split("[", 1)[0]
    scripts = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in section.splitlines())
    )
    assert scripts.get("kube-gpu-exporter") == "kube_gpu_exporter.exporter.cli:main"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_the_wheel_requires_the_runtime_dependencies_and_no_test_extra(
    wheel: zipfile.ZipFile,
) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    metadata = _dist_info(wheel, "METADATA")
    requires = [
        line.split(":", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    runtime = {_name(r) for r in requires if "extra ==" not in r}
    extra_test = {_name(r) for r in requires if re.search(r"extra\s*==\s*['\"]test['\"]", r)}
    assert runtime == {_name(d) for d in project["dependencies"]}
    assert extra_test == {_name(d) for d in project["optional-dependencies"]["test"]}
    assert "grpcio-tools" not in runtime and "pytest" not in runtime
