"""The reference server: Go's net/http serving the very bytes our exporter just served.

A wrk figure on this 2-core machine mixes our server's cost with the machine's: wrk and the
server share the cores, and loopback copies every body (2 MB × 16 connections for the cluster
view). So beside ours, in the same run and under the same conditions, the bench captures what
our `/metrics` served (the plain body, its gzip variant, their Content-Type) and serves those
bytes from `bench/reference_server/` (stdlib only; net/http is what node_exporter and
kube-state-metrics serve with) to the same wrk load. Ours ÷ the reference is our server's
share; where the reference misses a target too, the machine does.

The binary is built on demand with `go build` into the bin cache `tools/real_components.py`
builds into (${KGE_BIN_CACHE:-~/.cache/kube-gpu-exporter/bin}), named with a hash of its
source, so a changed source is built again and an unchanged one is reused; nothing built is
written into the checkout.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import procs
from errors import BenchError
from wrk import GZIP_HEADERS

SOURCE = Path(__file__).resolve().with_name("reference_server")
NAME = "reference-server"
_BUILD_SCRIPT = SOURCE.parents[1] / "tools" / "real_components.py"


@dataclass(frozen=True)
class Captured:
    """One plain and one gzipped body as our server sent them on the wire."""

    plain: bytes
    gzip: bytes
    content_type: str


def _real_components() -> ModuleType:
    """tools/real_components.py, loaded by path (a script, not a package): the one place that
    knows the bin cache and how Go builds are run there."""
    loaded = sys.modules.get("real_components")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("real_components", _BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None, _BUILD_SCRIPT
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def source_hash() -> str:
    """Of every file of the Go source, names included: any change makes a new binary."""
    digest = hashlib.sha256()
    for path in sorted(p for p in SOURCE.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary_path() -> Path:
    return Path(_real_components().cache_root()) / f"{NAME}-{source_hash()}"


def binary(say: Callable[[str], None] | None = None) -> Path:
    """The built reference server, built first when the cache lacks this source's build."""
    path = binary_path()
    if path.is_file():
        return path
    build = _real_components()
    go = shutil.which(build.go_command())
    if go is None:
        raise BenchError(
            "go is not installed: the reference server (bench/reference_server) needs Go 1.22+"
        )
    if say is not None:
        say(f"building {SOURCE.relative_to(SOURCE.parents[1])} into {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of our own in the same folder, then an atomic rename: two builds at once
    # (test workers) never leave a half-written binary under the final name.
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [go, "build", "-trimpath", "-o", partial, "."],
            cwd=SOURCE,
            env=build.go_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise BenchError(f"go build of bench/reference_server failed: {' '.join(said)}")
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
    return path


def _get(url: str, headers: dict[str, str]) -> tuple[bytes, str, str]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:  # never decompresses
        return (
            response.read(),
            response.headers.get("Content-Type", ""),
            response.headers.get("Content-Encoding", ""),
        )


def capture(url: str) -> Captured:
    """Our /metrics as wrk gets it: plain (no Accept-Encoding but identity) and gzipped."""
    plain, plain_type, plain_coding = _get(url, {})
    zipped, gzip_type, gzip_coding = _get(url, GZIP_HEADERS)
    if plain_coding or gzip_coding != "gzip":
        raise BenchError(f"{url}: Content-Encoding {plain_coding!r} plain, {gzip_coding!r} gzip")
    if plain_type != gzip_type:
        raise BenchError(f"{url}: Content-Type {plain_type!r} plain but {gzip_type!r} gzipped")
    gzip.decompress(zipped)  # a broken body would make the reference's figures meaningless
    return Captured(plain, zipped, plain_type)


@contextmanager
def serving(captured: Captured, work: Path) -> Iterator[procs.Server]:
    """The reference server on a free port with the captured bytes, stopped afterwards."""
    command = binary()
    port = procs.free_port()
    bodies = work / f"reference-{port}"
    bodies.mkdir()
    (bodies / "plain").write_bytes(captured.plain)
    (bodies / "gzip").write_bytes(captured.gzip)
    argv = [
        str(command),
        f"-listen={procs.HOST}:{port}",
        f"-plain={bodies / 'plain'}",
        f"-gzip={bodies / 'gzip'}",
        f"-content-type={captured.content_type}",
    ]
    with procs.running("reference", argv, port, {}, work, "/metrics") as server:
        yield server
