"""The bench's fleet in a real etcd, created once through the API and then kept.

Creating 150,000 pods through the real kube-apiserver (a create and a status update each,
sixteen connections) takes the two-core machine 13 to 24 minutes; starting an API server on
an etcd that already holds them, about 35 seconds. So the first run seeds: it
creates the fleet through the API as a cluster's clients would, compacts etcd to the last
revision and defragments it (the create-then-status history is half the database), stops
the API server and etcd cleanly, and keeps etcd's data directory in
~/.cache/kube-gpu-exporter/fleets/<key>/ (`$XDG_CACHE_HOME` honoured). Later runs copy it into
their own temporary folder and start the plane on the copy with new certificates and a new
admin token (tests/fakes/control_plane.py, `etcd_data`); the cached copy is never served.

The key names the etcd and Kubernetes versions, the scale, FORMAT and a hash of the fleet's
objects as JSON, so a change to bench/cluster_fleet.py (or to the tests' builders under it)
seeds anew. A seeding is written to a temporary folder beside the cache and renamed into
place only once complete: an interrupted one is never reused, and its leftovers are removed
by the next seeding.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import fake
from cluster_fleet import Fleet
from real_api import MERGE, Api, fresh

sys.path.insert(0, str(fake.REPO / "tests"))  # control_plane imports the tests' support

from control_plane import run_control_plane
from real_binaries import real_components

CONNECTIONS = 16
FORMAT = "1"  # how load() lays the fleet into the API: changed with it, it seeds anew
# etcd's default backend quota is 2 GiB; the fleet and its churn must never reach it (an
# etcd over quota refuses every write with `mvcc: database space exceeded`)
QUOTA_BYTES = 8 << 30
ETCD_ARGS = (f"--quota-backend-bytes={QUOTA_BYTES}",)
# kube-apiserver's heap while it creates 150,000 pods (its watch cache holds each create and
# status update): a soft limit, so that on a 23 GiB machine it collects harder rather than
# being killed for memory; kept only for the seeding
SEED_GOMEMLIMIT = "12GiB"
READY_TIMEOUT_S = 600.0  # the API server on 150,000 pods, on a loaded two-core machine
ABOUT = "fleet.json"
_UID = re.compile(rb'"uid": "[^"]*"')


@dataclass(frozen=True)
class Seeding:
    """How the cached fleet was made (kept beside it, reported by every run)."""

    when: str
    nodes_s: float
    pods_s: float
    quotas_s: float
    total_s: float  # plane start → data dir in the cache
    db_bytes: int  # etcd's database before compaction
    compacted_bytes: int  # ... after compaction and defragmentation


def versions() -> str:
    pins = real_components.PINS
    return f"k8s-{pins['kubernetes'].version}-etcd-{pins['etcd'].version}"


def fingerprint(fleet: Fleet) -> tuple[str, int]:
    """A hash of every object of the fleet, its uids left out (the builders draw them at
    random, and the server gives each object its own), and the pods' JSON size in bytes."""
    digest = hashlib.sha256(FORMAT.encode())
    raw = 0
    for group in (fleet.nodes, fleet.quotas, fleet.pods):
        for obj in group:
            text = json.dumps(obj, sort_keys=True).encode()
            digest.update(_UID.sub(b'"uid": ""', text))
            raw += len(text) if group is fleet.pods else 0
    return digest.hexdigest()[:16], raw


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kube-gpu-exporter" / "fleets"


def key(scale: float, digest: str) -> str:
    return f"{versions()}-scale-{scale:g}-{digest}"


def cached(folder: Path) -> Seeding | None:
    """The seeding kept in `folder`, or None when there is none (or it is incomplete)."""
    about = folder / ABOUT
    if not (folder / "etcd").is_dir() or not about.is_file():
        return None
    return Seeding(**json.loads(about.read_text()))


def _each(work: Callable[[Any], None], objects: Iterable[Any]) -> None:
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        for _ in pool.map(work, objects):
            pass


def load(api: Api, fleet: Fleet) -> tuple[float, float, float]:
    """Namespaces, nodes (status kept on create, checked), pods then their status, quotas
    last (so that quota admission does not weigh on the pods) then their status: seconds
    for the nodes, the pods and the quotas."""
    namespaces = {o["metadata"]["namespace"] for o in [*fleet.pods, *fleet.quotas]}
    _each(
        lambda ns: api.call("POST", "/api/v1/namespaces", ns),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces),
    )
    began = time.monotonic()

    def node(obj: dict[str, Any]) -> None:
        made = api.call("POST", "/api/v1/nodes", fresh(obj))
        if made.get("status", {}).get("allocatable") != obj["status"].get("allocatable"):
            path = f"/api/v1/nodes/{obj['metadata']['name']}/status"
            api.call("PATCH", path, {"status": obj["status"]}, MERGE)

    _each(node, fleet.nodes)
    nodes_s = time.monotonic() - began

    def namespaced(kind: str) -> Callable[[dict[str, Any]], None]:
        def create(obj: dict[str, Any]) -> None:
            base = f"/api/v1/namespaces/{obj['metadata']['namespace']}/{kind}"
            api.call("POST", base, fresh(obj))
            path = f"{base}/{obj['metadata']['name']}/status"
            api.call("PATCH", path, {"status": obj["status"]}, MERGE)

        return create

    began = time.monotonic()
    _each(namespaced("pods"), fleet.pods)
    pods_s = time.monotonic() - began
    began = time.monotonic()
    _each(namespaced("resourcequotas"), fleet.quotas)
    return nodes_s, pods_s, time.monotonic() - began


def _etcd(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call to etcd's v3 JSON gateway."""
    request = urllib.request.Request(
        f"{etcd_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def compact(etcd_url: str) -> tuple[int, int]:
    """Compact to the current revision and defragment: the database's size before, after."""
    before = int(_etcd(etcd_url, "/v3/maintenance/status", {})["dbSize"])
    probe = {"key": base64.b64encode(b"/registry/").decode(), "limit": 1}
    revision = int(_etcd(etcd_url, "/v3/kv/range", probe)["header"]["revision"])
    _etcd(etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
    _etcd(etcd_url, "/v3/maintenance/defragment", {})
    return before, int(_etcd(etcd_url, "/v3/maintenance/status", {})["dbSize"])


def _remove_leftovers(root: Path, name: str) -> None:
    """Temporary folders of earlier seedings of this key whose process is gone."""
    for folder in root.glob(f".{name}.tmp-*"):
        pid = folder.name.rsplit("-", 1)[1]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Environment variables for the processes started meanwhile (the plane's)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def seed(fleet: Fleet, folder: Path, work: Path, say: Callable[[str], None]) -> Seeding:
    """Create `fleet` through a new plane's API and keep its etcd data in `folder`."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(folder.parent, folder.name)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    began = time.monotonic()
    with (
        _environment(GOMEMLIMIT=SEED_GOMEMLIMIT),
        run_control_plane(
            work / "seed",
            etcd_data=tmp / "etcd",
            extra_etcd_args=ETCD_ARGS,
            timeout=READY_TIMEOUT_S,
        ) as plane,
    ):
        say(f"seeding: {len(fleet.nodes):,} nodes and {len(fleet.pods):,} pods through the API")
        nodes_s, pods_s, quotas_s = load(Api(plane), fleet)
        say(f"created: nodes {nodes_s:.0f} s, pods {pods_s:.0f} s; compacting etcd")
        db, compacted = compact(plane.etcd_url)
    # the plane is stopped: SIGTERM to the API server then etcd, each waited for
    seeding = Seeding(
        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        nodes_s=nodes_s,
        pods_s=pods_s,
        quotas_s=quotas_s,
        total_s=time.monotonic() - began,
        db_bytes=db,
        compacted_bytes=compacted,
    )
    (tmp / ABOUT).write_text(json.dumps(asdict(seeding), indent=1))
    try:
        tmp.rename(folder)
    except OSError:  # another seeding of the same key finished first: keep that one
        shutil.rmtree(tmp, ignore_errors=True)
    return seeding


def copy_data(folder: Path, work: Path) -> Path:
    """A copy of the cached etcd data for one run to serve (and change)."""
    target = work / "etcd"
    shutil.copytree(folder / "etcd", target)
    return target
