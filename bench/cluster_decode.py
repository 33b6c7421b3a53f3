"""Decoding the cluster watches' JSON: json.loads + parse.py against msgspec (cluster/decode.py).

In-process, no server: bench/cluster_fleet.py's cluster at `--scale 3` (6,000 nodes, 150,000
pods of 4-6 KiB of JSON each) is written to a file as the API server sends it — list pages
of paged_list.PAGE objects, then pod watch events (MODIFIED) — and each decoder reads it in a
fresh process of its own, so that each has its own peak RSS. A process reads a page's bytes
(untimed), decodes it and parses every object as `ListWatch` and `ClusterWatches` do, keeping
the values by key (ended pods and pending pods without GPUs dropped); then the events. The
paths alternate for `--rounds` rounds; per path the median is shown of:

- CPU µs per pod and per node listed, and per pod watch event (decode + parse);
- msgspec's decoding alone, in a process of its own that keeps nothing (every pod page into
  the structs, not turned into Pods): what another encoding (the API's protobuf) could at
  most save;
- VmHWM above the process's RSS before the first page (the peak the decoding adds), and
  VmRSS at the end (what the kept values hold);
- a digest of the kept values, which must be the same for both paths.

Figures are printed, not asserted. Usage: bench/cluster_decode.py [--scale 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, BinaryIO

from cluster_fleet import build
from report import _cpu_model, load_average

from kube_gpu_exporter.exporter.cluster.parse import parse_node, parse_pod
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.kubernetes.paged_list import PAGE

PATHS = ("json", "msgspec")
DECODE_ONLY = "msgspec-decode-only"
EVENTS = 20_000  # pod watch events decoded after the lists
MIB = 1 << 20


def say(message: str) -> None:
    print(f"[cluster_decode {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the file: what the API server would send -----------------------------------------------


def _record(out: BinaryIO, kind: bytes, data: bytes) -> None:
    out.write(struct.pack("<1sI", kind, len(data)))
    out.write(data)


def records(path: Path) -> Iterator[tuple[str, bytes]]:
    with path.open("rb") as source:
        while header := source.read(5):
            kind, size = struct.unpack("<1sI", header)
            yield {b"n": "nodes", b"p": "pods", b"e": "event"}[kind], source.read(size)


def write_cluster(path: Path, scale: float) -> dict[str, int]:
    """The fleet as list pages (nodes, then pods) and pod MODIFIED events; returns counts."""
    fleet = build(scale)
    raw = {"nodes": 0, "pods": 0}
    with path.open("wb") as out:
        for kind, tag, objects in (("nodes", b"n", fleet.nodes), ("pods", b"p", fleet.pods)):
            for start in range(0, len(objects), PAGE):
                items = [json.dumps(o) for o in objects[start : start + PAGE]]
                raw[kind] += sum(map(len, items))
                token = f', "continue": "{start + PAGE}"' if start + PAGE < len(objects) else ""
                head = f'{{"kind": "List", "metadata": {{"resourceVersion": "9"{token}}}, '
                _record(out, tag, f'{head}"items": [{", ".join(items)}]}}'.encode())
        for i, pod in enumerate(fleet.pods[:EVENTS]):
            pod["metadata"]["resourceVersion"] = str(10 + i)
            pod["metadata"]["labels"]["changed"] = "true"
            _record(out, b"e", json.dumps({"type": "MODIFIED", "object": pod}).encode())
    return {
        "nodes": len(fleet.nodes),
        "pods": len(fleet.pods),
        "events": min(EVENTS, len(fleet.pods)),
        "pod_bytes": raw["pods"] // len(fleet.pods),
        "node_bytes": raw["nodes"] // len(fleet.nodes),
    }


# --- one path, in its own process ------------------------------------------------------------


def memory() -> tuple[int, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(rest.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def _pod_key(obj: Any) -> tuple[str, Any] | None:
    """ClusterWatches._pod without the observer: what the pod watch keeps."""
    pod = parse_pod(obj)
    if pod is None:
        return None
    key = f"{pod.namespace}/{pod.name}"
    if pod.terminated or (pod.unscheduled and not DEFAULT_SETTINGS.gpu_part(pod.requests)):
        return key, None
    return key, pod


def _node_key(obj: Any) -> tuple[str, Any] | None:
    node = parse_node(obj)
    return None if node is None else (node.name, node)


def child(path: Path, which: str) -> dict[str, Any]:
    from kube_gpu_exporter.exporter.kubernetes.decoding import JSON, Decoder

    decoders: dict[str, Decoder] = {"nodes": JSON, "pods": JSON}
    if which == "msgspec":
        from kube_gpu_exporter.exporter.cluster.decode import decoders as struct_decoders

        decoders = dict(struct_decoders(DEFAULT_SETTINGS))
    parsers = {"nodes": _node_key, "pods": _pod_key}
    held: dict[str, dict[str, Any]] = {"nodes": {}, "pods": {}}
    cpu = {"nodes": 0.0, "pods": 0.0, "event": 0.0}
    count = {"nodes": 0, "pods": 0, "event": 0}
    rss_start, _ = memory()
    for kind, data in records(path):
        began = time.process_time()
        if kind == "event":
            event = decoders["pods"].event(data)
            parsed = _pod_key(event.obj)
            if parsed is not None and parsed[1] is None:
                held["pods"].pop(parsed[0], None)
            elif parsed is not None:
                held["pods"][parsed[0]] = parsed[1]
            count[kind] += 1
        else:
            page = decoders[kind].page(data)
            for obj in page.items:  # the JSON decoder's items are read as they are decoded
                count[kind] += 1
                parsed = parsers[kind](obj)
                if parsed is not None and parsed[1] is not None:
                    held[kind][parsed[0]] = parsed[1]
            del page
        cpu[kind] += time.process_time() - began
        del data
    rss_end, hwm = memory()
    result = {
        "us_per": {k: 1e6 * cpu[k] / max(1, count[k]) for k in cpu},
        "counts": count,
        "held": {k: len(v) for k, v in held.items()},
        "hwm_above_start": hwm - rss_start,
        "rss_start": rss_start,
        "rss_end": rss_end,
        "digest": _digest(held),
    }
    return result


def decode_only(path: Path) -> dict[str, Any]:
    """µs per pod of msgspec's decoding alone: every pod page into the structs, dropped."""
    import msgspec

    from kube_gpu_exporter.exporter.cluster import decode

    decoder = msgspec.json.Decoder(decode._Page[decode._Pod])
    cpu, pods = 0.0, 0
    for kind, data in records(path):
        if kind == "pods":
            began = time.process_time()
            pods += len(decoder.decode(data).items or ())
            cpu += time.process_time() - began
    return {"us_per_pod": 1e6 * cpu / max(1, pods)}


def _digest(held: dict[str, dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for kind in sorted(held):
        for key in sorted(held[kind]):
            digest.update(f"{key}={held[kind][key]!r}\n".encode())
    return digest.hexdigest()[:16]


# --- the run ---------------------------------------------------------------------------------


def run_child(path: Path, which: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", str(path), "--decoder", which]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def render(counts: dict[str, int], results: dict[str, list[dict[str, Any]]], host: str) -> str:
    def median(which: str, *keys: str) -> float:
        values = []
        for result in results[which]:
            value: Any = result
            for key in keys:
                value = value[key]
            values.append(value)
        return statistics.median(values)

    rows = [
        ("CPU per pod listed (µs)", ("us_per", "pods"), 1.0, "{:.1f}"),
        ("CPU per node listed (µs)", ("us_per", "nodes"), 1.0, "{:.1f}"),
        ("CPU per pod watch event (µs)", ("us_per", "event"), 1.0, "{:.1f}"),
        ("peak RSS above start (MiB)", ("hwm_above_start",), MIB, "{:.0f}"),
        ("RSS before the first page (MiB)", ("rss_start",), MIB, "{:.0f}"),
        ("RSS at the end (MiB)", ("rss_end",), MIB, "{:.0f}"),
    ]
    lines = [
        f"{counts['pods']:,} pods ({counts['pod_bytes']:,} B of JSON each), {counts['nodes']:,} "
        f"nodes ({counts['node_bytes']:,} B), {counts['events']:,} pod events; pages of {PAGE}",
        "",
        "| figure | json.loads + parse.py | msgspec (decode.py) | ratio |",
        "|---|---|---|---|",
    ]
    for label, keys, unit, shape in rows:
        old, new = median("json", *keys) / unit, median("msgspec", *keys) / unit
        ratio = f"{old / new:.1f}×" if new else "—"
        lines.append(f"| {label} | {shape.format(old)} | {shape.format(new)} | {ratio} |")
    decode_only = median(DECODE_ONLY, "us_per_pod")
    lines += [
        "",
        f"msgspec's decoding alone (structs, no Pod made): {decode_only:.1f} µs a pod; the rest"
        " of its figure is parse.py's `pod_from` and helpers, which any encoding would still run.",
        f"Kept values alike on both paths: {_alike(results)} · rounds: {len(results['json'])}",
        f"{host}",
    ]
    return "\n".join(lines)


def _alike(results: dict[str, list[dict[str, Any]]]) -> str:
    digests = {r["digest"] for which in PATHS for r in results[which]}
    return "yes" if len(digests) == 1 else f"NO ({', '.join(sorted(digests))})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=3.0, help="3: 150,000 pods")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each path, alternated")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--decoder", choices=(*PATHS, DECODE_ONLY), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        done = (
            decode_only
            if args.decoder == DECODE_ONLY
            else functools.partial(child, which=args.decoder)
        )
        print(json.dumps(done(args.child)))
        return 0
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as work:
        path = Path(work) / "cluster.bin"
        say(f"writing the cluster at scale {args.scale:g}")
        counts = write_cluster(path, args.scale)
        results: dict[str, list[dict[str, Any]]] = {w: [] for w in (*PATHS, DECODE_ONLY)}
        for round_ in range(args.rounds):
            for which in (*PATHS, DECODE_ONLY):
                say(f"round {round_ + 1}: {which}")
                results[which].append(run_child(path, which))
    host = (
        f"CPU {_cpu_model()} × {os.cpu_count()} cores · Python {platform.python_version()} · "
        f"msgspec {version('msgspec')} · load average at start {load_at_start}, at end "
        f"{load_average()}"
    )
    print(render(counts, results, host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
