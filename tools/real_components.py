"""Build the real Kubernetes control plane, Prometheus 3, Alertmanager, Helm, the
prometheus-operator and Kueue from Go modules.

The tests that run against the real kube-apiserver, kube-scheduler, Prometheus 3 … need those
binaries, and the only place this project may fetch them from is the Go module proxy: no release
download site is assumed. So each component is compiled from its module at a pinned version
(`PINS` below) into a cache folder outside the checkout, one folder per component and version:

    ${KGE_BIN_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kube-gpu-exporter/bin}/<component>-<version>/

A folder counts as built only when its stamp file (`.complete`, written last, after every
binary) is there; a present stamp makes a build a no-op, so `make k8s-bin` costs nothing the
second time. Nothing built is ever written into the checkout.

Why a generated module: `k8s.io/kubernetes` requires its staging modules (`k8s.io/api`,
`k8s.io/apimachinery`, …) at `v0.0.0` and replaces them with `./staging/src/…` paths, and etcd's
server module replaces its siblings with `../api`, `../client/v3`, … Replace directives count
only in the main module, so `go install module/cmd/x@version` is refused. The fix is a small
main module of our own that requires the upstream module and repeats each of its replace
directives, the relative ones pointing at the sibling module's own release instead (`k8s.io/api
=> k8s.io/api v0.37.2` for Kubernetes v1.37.2; `go.etcd.io/etcd/api/v3 => … v3.7.3`). The list
is read from the upstream go.mod at that very version, so a new release needs only a new pin.

Usage (stdlib only; any Python 3.11+):

    python3 tools/real_components.py build k8s|prom|node|kueue|all|<component>...
    python3 tools/real_components.py path <binary>     # prints the binary's path, exit 1 if absent
    python3 tools/real_components.py list              # each component, its pin and its state

Environment: KGE_BIN_CACHE (the cache root), GO (the go command; default `go` on PATH, else
/usr/local/go/bin/go), KGE_GO_JOBS (go build -p, default 2), and Go's own GOMODCACHE / GOCACHE /
GOPROXY, passed through untouched. A component the proxy refuses is reported (module, version,
the go command's error) and written next to the cache as `<component>-<version>.error`; the
others are still built, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

STAMP = ".complete"


@dataclass(frozen=True)
class Component:
    """One upstream module at one pinned version and the commands built from it."""

    name: str
    module: str
    version: str
    # binary name -> package path inside the build's module graph
    binaries: dict[str, str]
    # -X settings, so that `--version` and the API server's /version say what was built
    ldflags_x: dict[str, str] = field(default_factory=dict)
    # how a relatively replaced sibling module's version follows from `version`
    sibling_version: str = ""
    # files the upstream build makes with other tools (npm) before `go build`, absent from the
    # module: path under the module's root -> what stands in for it. Go refuses overlays into
    # the module cache, so such a module is built from a copy with the stand-ins added
    placeholders: dict[str, str] = field(default_factory=dict)
    # files copied from the module beside the binaries: name in the cache folder -> path
    # under the module's root (the prometheus-operator's CRD manifests)
    files: dict[str, str] = field(default_factory=dict)


K8S = "v1.37.2"
# the oldest kubelet minor the version-skew policy allows beside a 1.37 API server (three
# minors older), for the node tests of an older kubelet's pod-resources answers
K8S_OLDEST_KUBELET = "v1.34.4"
_K8S_BUILD_DATE = "1970-01-01T00:00:00Z"  # builds are reproducible: no wall-clock date


def k8s_staging(version: str) -> str:
    """v1.37.2 -> v0.37.2: the staging modules' tag of a Kubernetes release."""
    return "v0." + version.split(".", 1)[1]


def _k8s_version(version: str) -> dict[str, str]:
    """The version variables Kubernetes' own build sets (`--version`, /version, the Node's
    kubeletVersion)."""
    return {
        f"{pkg}.{var}": value
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for var, value in (
            ("gitVersion", version),
            ("gitMajor", version[1:].split(".")[0]),
            ("gitMinor", version.split(".")[1]),
            ("gitTreeState", "archive"),
            ("buildDate", _K8S_BUILD_DATE),
        )
    }


K8S_STAGING = k8s_staging(K8S)


def _prom_version(version: str, module_version: str) -> dict[str, str]:
    """prometheus/common's version variables, as Prometheus' own promu build sets them."""
    pkg = "github.com/prometheus/common/version"
    return {
        f"{pkg}.Version": version,
        f"{pkg}.Revision": module_version,
        f"{pkg}.Branch": "HEAD",
        f"{pkg}.BuildUser": "kube-gpu-exporter",
        f"{pkg}.BuildDate": "19700101-00:00:00",
    }


PROMETHEUS = "v0.316.0"  # the module's v0.3MM.P is Prometheus 3.MM.P


def prometheus_release(module_version: str) -> str:
    """v0.316.0 -> 3.16.0: Prometheus tags v3.x.y, its Go module v0.3xx.y."""
    _, minor, patch = module_version.split(".")
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


ALERTMANAGER = "v0.35.0"
HELM = "v3.22.0"
# Alertmanager embeds its web UI (ui/app/dist, made by npm and the Elm compiler) and the
# module does not carry it: a page saying so stands in, the API and amtool are unaffected
_NO_UI = (
    "<!doctype html><title>Alertmanager</title><p>This Alertmanager was built from its Go "
    "module without its web UI (built by npm, not part of the module). The API is at "
    "<a href=api/v2/status>/api/v2</a>.</p>\n"
)
ETCD = "v3.7.3"  # Kubernetes v1.37's client is etcd v3.7
# the newest (and only) version of the operator's root module the proxy serves; its two
# sibling modules (pkg/apis/monitoring, pkg/client) are fetched at the same version
PROMETHEUS_OPERATOR = "v0.85.0"
OPERATOR_CRDS = tuple(
    f"monitoring.coreos.com_{kind}.yaml"
    for kind in (
        "alertmanagerconfigs",
        "alertmanagers",
        "podmonitors",
        "probes",
        "prometheusagents",
        "prometheuses",
        "prometheusrules",
        "scrapeconfigs",
        "servicemonitors",
        "thanosrulers",
    )
)
# the newest (and only) version of Kueue the proxy serves (2026-11-28; upstream's newest is
# v0.20.5). Its CRDs (v1beta2 stored, v1beta1 still served) and its webhook configurations are
# copied from the module: the test fixture points their service references at a URL
KUEUE = "v0.17.0"
KUEUE_CRDS = tuple(
    f"kueue.x-k8s.io_{kind}.yaml"
    for kind in (
        "admissionchecks",
        "clusterqueues",
        "cohorts",
        "localqueues",
        "multikueueclusters",
        "multikueueconfigs",
        "provisioningrequestconfigs",
        "resourceflavors",
        "topologies",
        "workloadpriorityclasses",
        "workloads",
    )
)

PINS: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "kubernetes",
            "k8s.io/kubernetes",
            K8S,
            {
                b: f"k8s.io/kubernetes/cmd/{b}"
                for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
            },
            _k8s_version(K8S),
            K8S_STAGING,
        ),
        # the node's agent, a component of its own (its own cache folder, built only for the
        # node-marked tests); it imports k8s.io/cri-streaming, a staging module the control
        # plane does not, which -mod=mod adds to the generated module's go.sum
        Component(
            "kubelet",
            "k8s.io/kubernetes",
            K8S,
            {"kubelet": "k8s.io/kubernetes/cmd/kubelet"},
            _k8s_version(K8S),
            K8S_STAGING,
        ),
        Component(
            "etcd",
            "go.etcd.io/etcd/server/v3",
            ETCD,
            {"etcd": "go.etcd.io/etcd/server/v3"},
            {},
            ETCD,
        ),
        Component(
            "prometheus",
            "github.com/prometheus/prometheus",
            PROMETHEUS,
            {
                "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
                "promtool": "github.com/prometheus/prometheus/cmd/promtool",
            },
            _prom_version(prometheus_release(PROMETHEUS), PROMETHEUS),
        ),
        Component(
            "alertmanager",
            "github.com/prometheus/alertmanager",
            ALERTMANAGER,
            {
                "alertmanager": "github.com/prometheus/alertmanager/cmd/alertmanager",
                "amtool": "github.com/prometheus/alertmanager/cmd/amtool",
            },
            _prom_version(ALERTMANAGER[1:], ALERTMANAGER),
            placeholders={
                "ui/app/dist/elm/index.html": _NO_UI,
                "ui/app/dist/mantine/index.html": _NO_UI,
            },
        ),
        Component(
            "helm",
            "helm.sh/helm/v3",
            HELM,
            {"helm": "helm.sh/helm/v3/cmd/helm"},
            {
                "helm.sh/helm/v3/internal/version.version": HELM,
                "helm.sh/helm/v3/internal/version.gitTreeState": "archive",
            },
        ),
        Component(
            "prometheus-operator",
            "github.com/prometheus-operator/prometheus-operator",
            PROMETHEUS_OPERATOR,
            {
                "prometheus-operator": (
                    "github.com/prometheus-operator/prometheus-operator/cmd/operator"
                )
            },
            _prom_version(PROMETHEUS_OPERATOR[1:], PROMETHEUS_OPERATOR),
            PROMETHEUS_OPERATOR,
            files={f"crds/{n}": f"example/prometheus-operator-crd/{n}" for n in OPERATOR_CRDS},
        ),
        Component(
            "kueue",
            "sigs.k8s.io/kueue",
            KUEUE,
            {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
            {
                "sigs.k8s.io/kueue/pkg/version.GitVersion": KUEUE,
                "sigs.k8s.io/kueue/pkg/version.GitCommit": "module-" + KUEUE,
                "sigs.k8s.io/kueue/pkg/version.BuildDate": _K8S_BUILD_DATE,
            },
            files={
                **{f"crds/{n}": f"config/components/crd/bases/{n}" for n in KUEUE_CRDS},
                "webhook/manifests.yaml": "config/components/webhook/manifests.yaml",
            },
        ),
    )
}

# the older kubelet: the same binary name in a folder of its own version (kubelet-v1.34.4/),
# found by version (binary_path's `version`); listed under a key of its own
OLDEST_KUBELET = "kubelet-" + K8S_OLDEST_KUBELET.rsplit(".", 1)[0].lstrip("v")  # kubelet-1.34
PINS[OLDEST_KUBELET] = Component(
    "kubelet",
    "k8s.io/kubernetes",
    K8S_OLDEST_KUBELET,
    {"kubelet": "k8s.io/kubernetes/cmd/kubelet"},
    _k8s_version(K8S_OLDEST_KUBELET),
    k8s_staging(K8S_OLDEST_KUBELET),
)

GROUPS: dict[str, tuple[str, ...]] = {
    "k8s": ("kubernetes", "etcd"),
    "prom": ("prometheus", "alertmanager", "helm", "prometheus-operator"),
}
GROUPS["node"] = ("kubelet", OLDEST_KUBELET)
GROUPS["kueue"] = ("kueue",)
GROUPS["all"] = GROUPS["k8s"] + GROUPS["prom"] + GROUPS["node"] + GROUPS["kueue"]


def cache_root() -> Path:
    """The bin cache: $KGE_BIN_CACHE, else the XDG cache folder's kube-gpu-exporter/bin."""
    if env := os.environ.get("KGE_BIN_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kube-gpu-exporter" / "bin"


def component_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version}"


def is_built(component: Component) -> bool:
    return (component_dir(component) / STAMP).is_file()


def component_of(binary: str, version: str | None = None) -> Component:
    """The component that builds `binary` (at `version`; None: the first pinned, the control
    plane's version)."""
    for component in PINS.values():
        if binary in component.binaries and version in (None, component.version):
            return component
    raise KeyError(binary if version is None else f"{binary} {version}")


def binary_path(binary: str, version: str | None = None) -> Path | None:
    """Where the built `binary` is, or None when its component's build is not complete."""
    component = component_of(binary, version)
    return component_dir(component) / binary if is_built(component) else None


def go_command() -> str:
    return os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"


def go_env() -> dict[str, str]:
    """The build's environment: modules resolved and go.sum written on the fly (-mod=mod),
    no toolchain download (a module needing a newer Go fails with Go's own message), static
    binaries (no C compiler needed, and they run on any Linux of the same architecture)."""
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    env["GOFLAGS"] = " ".join([f for f in flags if not f.startswith("-mod=")] + ["-mod=mod"])
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    return env


class Refused(Exception):
    """The go command failed for a component; the message carries its own error text."""


def run_go(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(
        [go_command(), *args], cwd=cwd, env=go_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        said = [ln for ln in proc.stderr.splitlines() if not ln.startswith("go: downloading ")]
        raise Refused(f"go {' '.join(args[:2])} …: " + ("\n".join(said).strip() or proc.stdout))
    return proc.stdout


def upstream(component: Component, work: Path) -> tuple[Path, list[str]]:
    """The upstream module's folder in the module cache, and its go.mod's replace directives
    rewritten to hold outside its repository."""
    info = json.loads(
        run_go(["mod", "download", "-json", f"{component.module}@{component.version}"], work)
    )
    if info.get("Error"):
        raise Refused(info["Error"])
    modfile = json.loads(run_go(["mod", "edit", "-json", info["GoMod"]], work))
    lines = []
    for rep in modfile.get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        left = old["Path"] + (f" {old['Version']}" if old.get("Version") else "")
        if new.get("Version"):
            lines.append(f"\t{left} => {new['Path']} {new['Version']}")
        elif "FORBIDDEN" in new["Path"]:
            continue  # etcd's guard against importing its root module: nothing to point at
        elif new["Path"].startswith("."):
            if not component.sibling_version:
                raise Refused(f"{old['Path']} is replaced by {new['Path']}: no sibling version")
            lines.append(f"\t{left} => {old['Path']} {component.sibling_version}")
    return Path(info["Dir"]), lines


def write_module(component: Component, work: Path) -> Path:
    """The generated main module: require the upstream, repeat its replaces; a module with
    placeholders is replaced by a copy of itself (`./src`) that has them."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("go.mod", "go.sum"):
        (work / name).unlink(missing_ok=True)
    (work / "go.mod").write_text(f"module kge.local/build/{component.name}\n\ngo 1.26\n")
    module_dir, replaces = upstream(component, work)
    shutil.rmtree(work / "src", ignore_errors=True)
    if component.placeholders:
        shutil.copytree(module_dir, work / "src", copy_function=shutil.copyfile)
        for relative, content in component.placeholders.items():
            (work / "src" / relative).parent.mkdir(parents=True, exist_ok=True)
            (work / "src" / relative).write_text(content)
        replaces.append(f"\t{component.module} => ./src")
    text = (
        f"module kge.local/build/{component.name}\n\ngo 1.26\n\n"
        f"require {component.module} {component.version}\n"
    )
    if replaces:
        text += "\nreplace (\n" + "\n".join(replaces) + "\n)\n"
    (work / "go.mod").write_text(text)
    return module_dir


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One build per component at a time (parallel test workers may ask together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build(component: Component) -> dict[str, object]:
    """Build one component unless its stamp is there; returns what the stamp records."""
    out = component_dir(component)
    with locked(cache_root() / f".{component.name}-{component.version}.lock"):
        if is_built(component):
            return dict(json.loads((out / STAMP).read_text()), reused=True)
        started = time.monotonic()
        work = cache_root() / ".work" / f"{component.name}-{component.version}"
        error_file = cache_root() / f"{component.name}-{component.version}.error"
        shutil.rmtree(out, ignore_errors=True)
        try:
            module_dir = write_module(component, work)
            ldflags = "-s -w" + "".join(f" -X {k}={v}" for k, v in component.ldflags_x.items())
            jobs = os.environ.get("KGE_GO_JOBS", "2")
            with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
                run_go(
                    [
                        "build",
                        "-trimpath",
                        f"-p={jobs}",
                        f"-ldflags={ldflags}",
                        "-o",
                        tmp + "/",
                        *component.binaries.values(),
                    ],
                    work,
                )
                built = {Path(p).name for p in os.listdir(tmp)}
                # `go build -o dir/` names each binary after its package's last element
                out.mkdir(parents=True)
                for binary, package in component.binaries.items():
                    produced = package.rstrip("/").rsplit("/", 1)[1]
                    if produced not in built and re.fullmatch(r"v\d+", produced):
                        produced = package.rsplit("/", 2)[1]  # a major-version suffix: …/server/v3
                    os.replace(Path(tmp) / produced, out / binary)
                for name, relative in component.files.items():
                    (out / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(module_dir / relative, out / name)
        except Refused as refused:
            shutil.rmtree(out, ignore_errors=True)
            error_file.write_text(f"{component.module}@{component.version}\n{refused}\n")
            raise
        error_file.unlink(missing_ok=True)
        record: dict[str, object] = {
            "component": component.name,
            "module": component.module,
            "version": component.version,
            "go": run_go(["env", "GOVERSION"], work).strip(),
            "seconds": round(time.monotonic() - started, 1),
            "bytes": {b: (out / b).stat().st_size for b in component.binaries},
        }
        (out / STAMP).write_text(json.dumps(record, indent=1) + "\n")
        return dict(record, reused=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build components (a group: k8s, prom, all)")
    b.add_argument("names", nargs="+", choices=sorted([*GROUPS, *PINS]))
    p = sub.add_parser("path", help="print a built binary's path")
    p.add_argument("binary")
    sub.add_parser("list", help="components, pins and whether they are built")
    args = parser.parse_args(argv)

    if args.command == "path":
        try:
            found = binary_path(args.binary)
        except KeyError:
            print(f"unknown binary {args.binary!r}", file=sys.stderr)
            return 2
        if found is None:
            return 1
        print(found)
        return 0
    if args.command == "list":
        for c in PINS.values():
            state = "built" if is_built(c) else "missing"
            print(f"{c.name:19} {c.module}@{c.version}  {state}  {component_dir(c)}")
        return 0

    names = [n for name in args.names for n in GROUPS.get(name, (name,))]
    os.nice(10)  # the machine is shared: compiles yield to everything else
    failed = 0
    for name in dict.fromkeys(names):
        component = PINS[name]
        print(f"{name} {component.module}@{component.version}: ", end="", flush=True)
        try:
            record = build(component)
        except Refused as refused:
            failed += 1
            print(f"REFUSED\n  {component.module}@{component.version}: {refused}", flush=True)
            continue
        sizes = ", ".join(f"{b} {n / 2**20:.0f} MiB" for b, n in record["bytes"].items())  # type: ignore[attr-defined]
        how = "present" if record["reused"] else f"built in {record['seconds']} s"
        print(f"{how} ({sizes}) in {component_dir(component)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
