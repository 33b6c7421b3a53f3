"""A container image without a registry: a static `pause` binary built from a few lines of Go,
wrapped in a docker-archive tarball that `ctr images import` loads.

Nothing is pulled on the test node (no registry is reachable), so the sandbox image that
containerd's CRI plugin starts for every pod and the image of the test pods' containers are
this one: one layer holding `/pause`, which waits for SIGTERM or SIGINT and exits 0, as
Kubernetes' own pause container does (k8s.io/kubernetes/build/pause is C; Go with cgo off
gives a static binary without a C toolchain for the target).

The binary is built once into the bin cache (`pause-<hash of the source>/pause`, beside the
components of tools/real_components.py); the archive is written by `write_archive` in a few
milliseconds, so each test node makes its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

from real_binaries import real_components

IMAGE = "kge.local/pause:1"

PAUSE_GO = """\
// The pause container of the test node: sleeps until SIGTERM or SIGINT, then exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
"""


def pause_binary() -> Path:
    """The static pause binary, built (about 2 s warm) unless the cache has it."""
    digest = hashlib.sha256(PAUSE_GO.encode()).hexdigest()[:12]
    folder = real_components.cache_root() / f"pause-{digest}"
    binary = folder / "pause"
    if binary.is_file():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        (folder / "go.mod").write_text("module kge.local/pause\n\ngo 1.21\n")
        (folder / "main.go").write_text(PAUSE_GO)
        env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
        done = subprocess.run(
            [real_components.go_command(), "build", "-trimpath", "-ldflags=-s -w",
             "-o", str(folder / "pause.tmp"), "."],
            cwd=folder, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"go build of the pause binary failed:\n{done.stderr}")
        os.replace(folder / "pause.tmp", binary)
    return binary


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def write_archive(path: Path, image: str = IMAGE) -> Path:
    """A docker-archive (`docker save` layout: manifest.json, the config, one layer) of the
    pause binary as `/pause`, tagged `image`."""
    layer_buffer = io.BytesIO()
    with tarfile.open(fileobj=layer_buffer, mode="w", format=tarfile.USTAR_FORMAT) as layer:
        _tar_member(layer, "pause", pause_binary().read_bytes(), 0o755)
    layer_bytes = layer_buffer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "tests/fakes/local_image.py"}],
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [image], "Layers": ["layer.tar"]}]
    ).encode()
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
        _tar_member(archive, "layer.tar", layer_bytes)
        _tar_member(archive, config_name, config)
        _tar_member(archive, "manifest.json", manifest)
    return path
