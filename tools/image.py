"""Build the Dockerfile's image with buildah, on a base made from Debian's packages, no registry.

The Dockerfile starts `FROM ${PYTHON_IMAGE}` (python:3.12-slim by default), which needs a
registry. Its PYTHON_IMAGE build argument takes any local image, so this script makes one from
Debian bookworm's packages and builds the Dockerfile itself on it, unchanged:

1. the base (once): `debootstrap --variant=minbase` of bookworm with python3, python3-pip,
   python-is-python3 and ca-certificates, from the mirror apt uses here; trimmed the way
   Debian's slim images are (no docs, man pages, locales, apt lists or .debs) and without
   Debian's EXTERNALLY-MANAGED marker (python:*-slim has none: pip installs into
   /usr/local); committed with `buildah` as `localhost/kube-gpu-exporter-base:bookworm-<key>`.
   Its Python is Debian's 3.11, so requirements.lock also holds the CPython 3.11 wheels'
   hashes (tools/lock.py);
2. the image, whenever its inputs change: `buildah bud --layers --isolation chroot
   --build-arg PYTHON_IMAGE=<base>`, then exported as a docker-archive tarball (what
   `ctr images import` loads into containerd).

Everything lives in a cache outside the checkout (buildah's own storage included):

    ${KGE_IMAGE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kube-gpu-exporter/image}/
        storage/ run/                    buildah's --root and --runroot
        kube-gpu-exporter-<key>/         image.json, build.log, kube-gpu-exporter.tar, .complete

<key> hashes the Dockerfile, .dockerignore, every file its COPY and bind mounts read, and the
base's id; a present `.complete` makes `build` a no-op. The RUN steps see this machine's CA
bundle (bind-mounted, never copied into a layer), so pip reaches the index through a
TLS-inspecting proxy where there is one.

Usage (root; stdlib only, any Python 3.11+; `make image` installs buildah and debootstrap):

    python3 tools/image.py build          # prints the image's name, size and archive
    python3 tools/image.py info           # image.json of the current build; exit 1 if stale
    python3 tools/image.py run -- CMD...  # CMD in a throwaway container of the built image

Environment: KGE_IMAGE_CACHE (the cache root), KGE_DEBIAN_MIRROR (else apt's own),
KGE_IMAGE_STORAGE_DRIVER (overlay where this machine can mount it, else vfs).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
STAMP = ".complete"
ARCHIVE = "kube-gpu-exporter.tar"
NAME = "localhost/kube-gpu-exporter"

SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
# What Debian's slim images leave out (their dpkg path-excludes), the apt state, and pip's
# PEP 668 marker; /dev entries debootstrap made (a container runtime mounts its own /dev).
BASE_TRIM = (
    "usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*",
    "usr/share/lintian/*", "var/cache/apt/*", "var/lib/apt/lists/*", "var/log/*",
    "usr/lib/python3.*/EXTERNALLY-MANAGED", "dev/*",
)  # fmt: skip
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
BASE_RECIPE = json.dumps([SUITE, BASE_PACKAGES, BASE_TRIM, BASE_ENV, "minbase"])
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt",)


def cache_root() -> Path:
    if env := os.environ.get("KGE_IMAGE_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kube-gpu-exporter" / "image"


def _can_mount_overlay() -> bool:
    with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
        for part in ("l", "u", "w", "m"):
            (Path(tmp) / part).mkdir()
        options = f"lowerdir={tmp}/l,upperdir={tmp}/u,workdir={tmp}/w"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, f"{tmp}/m"],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            subprocess.run(["umount", f"{tmp}/m"], check=False)
        return done.returncode == 0


def storage_driver() -> str:
    if env := os.environ.get("KGE_IMAGE_STORAGE_DRIVER"):
        return env
    marker = cache_root() / "storage-driver"
    if marker.exists():  # one storage, one driver: buildah refuses to switch an existing one
        return marker.read_text().strip()
    cache_root().mkdir(parents=True, exist_ok=True)
    driver = "overlay" if _can_mount_overlay() else "vfs"
    marker.write_text(driver + "\n")
    return driver


def buildah_argv(*args: str) -> list[str]:
    """buildah on this cache's own storage."""
    root = cache_root()
    command = ["buildah", "--root", str(root / "storage"), "--runroot", str(root / "run")]
    return [*command, "--storage-driver", storage_driver(), *args]


def buildah(*args: str, log: Path | None = None) -> str:
    """buildah's output; its output goes to `log` instead when one is given."""
    command = buildah_argv(*args)
    if log is not None:
        with log.open("a") as out:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
        if code != 0:
            tail = "".join(log.read_text(errors="replace").splitlines(True)[-40:])
            raise SystemExit(f"buildah {args[0]} failed (exit {code}):\n{tail}")
        return ""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"buildah {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout.strip()


def debian_mirror() -> str:
    """The Debian mirror apt uses here (sources.list or deb822 .sources), for SUITE."""
    if env := os.environ.get("KGE_DEBIAN_MIRROR"):
        return env
    apt = Path("/etc/apt")
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]:
        text = path.read_text(errors="replace") if path.is_file() else ""
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.findall(r"^URIs:\s*(.+)$", stanza, re.MULTILINE)
            suites = re.findall(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
            if uris and suites and SUITE in suites[0].split():
                return str(uris[0].split()[0])
        for uri, suite in re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
            if suite == SUITE:
                return str(uri)
    return "http://deb.debian.org/debian"


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_name() -> str:
    return f"{NAME}-base:{SUITE}-{_short(BASE_RECIPE)}"


def _inspect(name: str) -> dict[str, Any] | None:
    """`buildah inspect` of a local image, or None when storage has no such image."""
    command = buildah_argv("inspect", "--type", "image", name)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found: dict[str, Any] | None = json.loads(done.stdout) if done.returncode == 0 else None
    return found


def _image_id(name: str) -> str | None:
    found = _inspect(name)
    return str(found["FromImageID"]) if found else None


def build_base(log: Path) -> str:
    """The base image's id, made (debootstrap, trim, commit) only when it is not there."""
    name = base_name()
    if found := _image_id(name):
        return found
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
        command += [SUITE, str(rootfs), debian_mirror()]
        with log.open("a") as out:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode:
                tail = "".join(log.read_text(errors="replace").splitlines(True)[-20:])
                raise SystemExit(f"debootstrap failed (see {log}):\n{tail}")
        for pattern in BASE_TRIM:
            for path in rootfs.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        container = buildah("from", "--quiet", "scratch")
        try:
            mount = buildah("mount", container)
            # cp -a keeps owners, modes, links and special files (buildah add would chown)
            subprocess.run(["cp", "-a", f"{rootfs}/.", mount], check=True)
            buildah("umount", container)
            config = ["config", "--cmd", "python3"]
            for env in BASE_ENV:
                config += ["--env", env]
            config += ["--label", f"description=Debian {SUITE} minbase with "
                       f"{' '.join(BASE_PACKAGES)}, made by tools/image.py"]  # fmt: skip
            buildah(*config, container)
            buildah("commit", "--quiet", container, name)
        finally:
            buildah("rm", container)
    return _image_id(name) or ""


def _dockerfile_inputs() -> list[Path]:
    """The Dockerfile, .dockerignore, and the local files its COPY and bind mounts read."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    sources: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split() if not line.lstrip().startswith("#") else []
        copies = words and words[0].upper() in ("COPY", "ADD")
        if copies and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
        for mount in re.findall(r"--mount=(\S+)", line):
            options = dict(o.partition("=")[::2] for o in mount.split(","))
            if options.get("type") == "bind" and "from" not in options and "source" in options:
                sources.append(options["source"])
    files = [DOCKERFILE, REPO / ".dockerignore"]
    for source in sources:
        path = REPO / source
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        else:
            files.append(path)
    return files


def image_key(base_id: str) -> str:
    digest = hashlib.sha256(f"{base_id}\n{storage_driver()}\n".encode())
    for path in _dockerfile_inputs():
        digest.update(f"{path.relative_to(REPO)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest() if path.exists() else b"-")
    return digest.hexdigest()[:16]


def version() -> str:
    found = re.search(r"^ARG VERSION=(\S+)", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    return found.group(1) if found else "latest"


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One build at a time (make and parallel test workers may ask together)."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _current_dir() -> Path | None:
    base_id = _image_id(base_name())
    return cache_root() / f"kube-gpu-exporter-{image_key(base_id)}" if base_id else None


def info() -> dict[str, object] | None:
    """What the current inputs' build recorded, or None when they have not been built."""
    out = _current_dir()
    if out is None or not (out / STAMP).exists():
        return None
    facts: dict[str, object] = json.loads((out / "image.json").read_text())
    return facts


def build() -> dict[str, object]:
    with locked():
        started = time.monotonic()
        log = cache_root() / "last-build.log"  # kept with the image once it is built
        log.write_text("")
        base_id = build_base(log)
        base_seconds = time.monotonic() - started
        out = cache_root() / f"kube-gpu-exporter-{image_key(base_id)}"
        if (out / STAMP).exists():
            return dict(json.loads((out / "image.json").read_text()), reused=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        name = f"{NAME}:{version()}"
        # The base under a name of this build's own: buildah 1.28 reuses a cached `RUN
        # --mount=type=bind,from=<stage>` layer when only that stage's files changed
        # (containers/buildah#4522 and #6609, fixed upstream by #6845), which would ship the old
        # wheels. buildah keys a RUN's cache by the build arguments its stage declares, and the
        # final stage declares ARG PYTHON_IMAGE, so a new name makes its install run again; the
        # builder stage declares none, so its layers (the locked wheels, downloaded once) still
        # hit as long as what they copy is unchanged.
        base_alias = f"{base_name()}-{out.name.rsplit('-', 1)[1]}"
        buildah("tag", base_name(), base_alias)
        command = ["bud", "--isolation", "chroot", "--layers", "--file", str(DOCKERFILE)]
        command += ["--build-arg", f"PYTHON_IMAGE={base_alias}", "--tag", name]
        for bundle in CA_BUNDLES:
            if Path(bundle).is_file():
                command += ["--volume", f"{bundle}:{bundle}:ro"]
        try:
            buildah(*command, str(REPO), log=log)
        finally:
            buildah("rmi", base_alias)  # the name only: the base keeps its own
        image_id = _image_id(name) or ""
        buildah("push", "--quiet", name, f"docker-archive:{out / ARCHIVE}:{name}")
        inspect = _inspect(name) or {}
        base = _inspect(base_name()) or {}
        layers = _layer_sizes(out / ARCHIVE)
        size = sum(layers.values())
        base_size = sum(layers.get(d, 0) for d in base["OCIv1"]["rootfs"]["diff_ids"])
        facts: dict[str, object] = {
            "name": name,
            "id": image_id,
            "stage_ids": _stage_tips(log),
            "base": base_name(),
            "base_id": base_id,
            "storage_driver": storage_driver(),
            "size_bytes": size,
            "base_size_bytes": base_size,
            "added_bytes": size - base_size,
            "archive": str(out / ARCHIVE),
            "archive_bytes": (out / ARCHIVE).stat().st_size,
            "config": inspect["OCIv1"]["config"],
            "base_seconds": round(base_seconds, 1),
            "seconds": round(time.monotonic() - started, 1),
        }
        shutil.copy(log, out / "build.log")
        (out / "image.json").write_text(json.dumps(facts, indent=2) + "\n")
        (out / STAMP).write_text("")
        _forget_older(out)
        return facts


def _layer_sizes(archive: Path) -> dict[str, int]:
    """diff_id -> uncompressed size of each layer in a docker-archive (what `docker images`
    adds up for an image's size)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        layers = zip(config["rootfs"]["diff_ids"], manifest["Layers"], strict=True)
        return {diff_id: tar.getmember(layer).size for diff_id, layer in layers}


def _stage_tips(log: Path) -> list[str]:
    """The short id each earlier stage ended with, from buildah's `[i/n] STEP` log lines."""
    tips: list[str] = []
    stage, last = "", ""
    for line in log.read_text(errors="replace").splitlines():
        if found := re.match(r"\[(\d+)/(\d+)\] STEP", line):
            if stage and found.group(1) != stage and last:
                tips.append(last)
            stage = found.group(1)
        elif found := re.fullmatch(r"--> ([0-9a-f]{11,64})", line):
            last = found.group(1)
    return tips


def _forget_older(keep: Path) -> None:
    """Earlier builds go: their folders, final images and builder stages' last images; the
    layers later builds share (the base, the locked wheels) stay in storage as buildah's
    cache."""
    for old in cache_root().glob("kube-gpu-exporter-*"):
        if old == keep or not old.is_dir():
            continue
        with contextlib.suppress(OSError, ValueError, KeyError):
            facts = json.loads((old / "image.json").read_text())
            for old_id in [facts["id"], *facts.get("stage_ids", [])]:
                # refused (and kept) while a later build still uses it
                subprocess.run(buildah_argv("rmi", old_id), capture_output=True, check=False)
        shutil.rmtree(old, ignore_errors=True)


def run(command: list[str]) -> int:
    """`command` in a fresh container of the built image (`buildah run`, chroot isolation:
    the host's network, so a server listening in it is reachable on this machine). The image's
    ENV, WORKDIR and USER apply; its ENTRYPOINT does not (name the command). SIGTERM and
    Ctrl-C stop it; the container is removed either way."""
    facts = info()
    if facts is None:
        raise SystemExit("the image is not built for this checkout: run `make image`")
    container = buildah("from", "--quiet", str(facts["id"]))
    try:
        proc = subprocess.Popen(
            buildah_argv("run", "--isolation", "chroot", container, "--", *command)
        )
        signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            return proc.wait()
    finally:
        buildah("rm", container)


def _mb(n: object) -> str:
    return f"{int(str(n)) / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the base (once) and the image (when stale)")
    commands.add_parser("info", help="print image.json of the current build (exit 1 if none)")
    runner = commands.add_parser("run", help="run a command in the built image")
    runner.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "build":
        facts = build()
        state = "up to date" if facts.get("reused") else f"built in {facts['seconds']} s"
        print(
            f"{facts['name']} ({str(facts['id'])[:12]}), {state}: {_mb(facts['size_bytes'])} "
            f"({_mb(facts['base_size_bytes'])} base + {_mb(facts['added_bytes'])} the Dockerfile "
            f"adds); docker-archive {facts['archive']} ({_mb(facts['archive_bytes'])})"
        )
        return 0
    if args.command == "info":
        found = info()
        if found is None:
            print("not built for this checkout: run `make image`", file=sys.stderr)
            return 1
        print(json.dumps(found, indent=2))
        return 0
    return run(args.argv[1:] if args.argv[:1] == ["--"] else args.argv)


if __name__ == "__main__":
    sys.exit(main())
