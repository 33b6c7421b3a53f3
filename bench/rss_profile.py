"""`make bench`: where the memory of our `serve` goes, on the node bench/peers.py uses.

Two runs of `serve` (attribution off, 5 s interval, the 64-device fake node), each scraped once
a second (gzip) for a minute after its first data (bench/serve_profiled.py runs serve in its
own process):

1. as it is: VmRSS at first data and after the minute, VmRSS by mapping from
   /proc/<pid>/smaps (anonymous memory, where Python's objects live, against the shared
   libraries' pages), and the list of modules serve loaded;
2. importing, before serve starts, the groups python → asyncio → aiohttp → prometheus_client
   → pynvml → pydantic → yaml → any other package serve loaded → ours (every
   kube_gpu_exporter module of run 1, with the standard-library modules they add), VmRSS after
   each; then tracemalloc from serve's start: the live allocations after the minute, by
   package and by site (the newest frame outside the import machinery).

A group serve did not load in run 1 is not imported in run 2, and is shown as such.

    python bench/rss_profile.py [--seconds 60] [--readme]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import procs
from errors import BenchError
from fake import FakeNode, prepare
from node import node_scenario
from peer_servers import Peer, Running, Scraper, running, wait_first_data
from peers import device_uuids
from report import load_average, update_readme

README = Path(__file__).resolve().with_name("README.md")
START, END = "<!-- rss-profile:start -->", "<!-- rss-profile:end -->"
REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().with_name("serve_profiled.py")
GROUPS = ("asyncio", "aiohttp", "prometheus_client", "pynvml", "pydantic", "yaml")
OURS = "kube_gpu_exporter"
STDLIB = sysconfig.get_paths()["stdlib"]
MIB = 1 << 20
TOP = 10
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")


@dataclass(frozen=True)
class Served:
    """What the parent reads of a serve process: VmRSS at first data and after the minute."""

    rss_first: int
    rss_after: int
    smaps: list[tuple[str, int]]


def say(message: str) -> None:
    print(f"[rss-profile {time.strftime('%H:%M:%S')}] {message}", flush=True)


def by_mapping(pid: int) -> list[tuple[str, int]]:
    """VmRSS summed per mapped file (anonymous memory apart), largest first."""
    sizes: Counter[str] = Counter()
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        header = _MAPPING.match(line)
        if header:
            path = header.group(1).strip()
            name = Path(path).name if path.startswith("/") else path or "[anonymous]"
        elif line.startswith("Rss:"):
            sizes[name] += int(line.split()[1]) * 1024
    return sizes.most_common()


def _command(
    mode: str, results: Path, groups: Sequence[str], interval_s: int, port: int
) -> list[str]:
    return [
        sys.executable,
        str(CHILD),
        mode,
        str(results),
        *groups,
        "--",
        f"--collector.interval={interval_s}s",
        f"--web.listen-address={procs.HOST}:{port}",
        "--kubelet.pod-resources-socket=",
    ]


def _scrape_once_a_second(server: Running, seconds: float) -> None:
    scraper = Scraper(server.port)
    started = time.monotonic()
    try:
        for tick in range(int(seconds)):
            scraper.get(gzip=True)
            time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
    finally:
        scraper.close()


DUMP_TIMEOUT_S = 120.0  # a tracemalloc snapshot of a busy process on a busy machine


def _ask_dump(server: Running, path: Path) -> None:
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise BenchError(f"serve_profiled.py wrote no {path.name}: {server.last_log_line()}")
        time.sleep(0.1)


def serve_run(
    node: FakeNode, work: Path, mode: str, groups: Sequence[str], seconds: float, interval_s: int
) -> tuple[Served, Path]:
    results = work / f"{mode}.out"
    dump = results if mode == "modules" else Path(f"{results}.trace")
    peer = Peer(
        mode, f"serve ({mode})", lambda port: _command(mode, results, groups, interval_s, port)
    )
    with running(peer, node.env, work) as server:
        wait_first_data(server, device_uuids(node))
        rss_first = procs.rss_bytes(server.pid)
        say(f"{mode}: first data at {rss_first / MIB:.1f} MiB; {seconds:.0f} s at 1 scrape/s")
        _scrape_once_a_second(server, seconds)
        served = Served(rss_first, procs.rss_bytes(server.pid), by_mapping(server.pid))
        _ask_dump(server, dump)
    return served, results


def import_groups(modules: list[list[str]]) -> tuple[list[str], list[str]]:
    """NAME=MODULES arguments for serve_profiled.py from run 1's modules, and the named groups
    serve did not load."""
    loaded = [name for name, _ in modules]
    tops = dict.fromkeys(name.split(".")[0] for name in loaded)
    args = [f"{group}={group}" for group in GROUPS if group in tops]
    missing = [group for group in GROUPS if group not in tops]
    for name, file in modules:
        top = name.split(".")[0]
        third_party = "site-packages" in file and name == top and top not in (*GROUPS, OURS)
        if third_party and not top.startswith("__editable__") and top != "_distutils_hack":
            args.append(f"{top}={top}")
    ours = [name for name in loaded if name == OURS or name.startswith(OURS + ".")]
    args.append("ours=" + ",".join(ours))
    return args, missing


def package_of(filename: str) -> str:
    if filename.startswith("<"):
        return "import machinery"
    if "site-packages/" in filename:  # the checkout's own .venv included
        top = filename.split("site-packages/", 1)[1].split("/")[0]
        return top.removesuffix(".py").split(".")[0]
    if filename.startswith(str(REPO)):
        return "ours" if not filename.startswith(str(REPO / "bench")) else "bench"
    if filename.startswith(STDLIB):
        return "stdlib " + filename[len(STDLIB) :].lstrip("/").split("/")[0].removesuffix(".py")
    return filename


def _short(filename: str, line: int) -> str:
    for root in (str(REPO), STDLIB):
        if filename.startswith(root):
            filename = filename[len(root) :].lstrip("/")
    return f"{filename.split('site-packages/')[-1]}:{line}"


def allocations(rows: list[list[object]]) -> tuple[Counter[str], Counter[str], int, int]:
    """Bytes by package and by site (serve_profiled.dump_trace's rows), total bytes, blocks."""
    packages: Counter[str] = Counter()
    sites: Counter[str] = Counter()
    total = blocks = 0
    for filename, line, ours, size, count in rows:
        assert isinstance(filename, str) and isinstance(line, int) and isinstance(ours, str)
        assert isinstance(size, int) and isinstance(count, int)
        site = _short(filename, line)
        if ours and package_of(filename) != "ours":
            where, _, at = ours.rpartition(":")
            site += f" ← {_short(where, int(at))}"
        packages[package_of(filename)] += size
        sites[site] += size
        total += size
        blocks += count
    return packages, sites, total, blocks


def _mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


def import_table(lines: list[str], ours_modules: int, served: Served, seconds: float) -> list[str]:
    rows = [
        "| import step (run 2), each with what it pulls in | VmRSS after | added | modules |",
        "|---|---:|---:|---:|",
    ]
    last = 0
    pulled = []
    for line in lines:
        name, kb, count = line.split()
        if count == "0":  # loaded already, by a group above
            pulled.append(name)
            continue
        rss = int(kb) * 1024
        label = {
            "python": "python: the interpreter and site",
            "ours": f"ours: {ours_modules} kube_gpu_exporter modules and the stdlib they add",
        }.get(name, name)
        added = f"+{_mib(rss - last)}" if last else ""
        rows.append(f"| {label} | {_mib(rss)} | {added} | {count} |")
        last = rss
    rows += [
        f"| serve running, at first data (run 1) | {_mib(served.rss_first)} | "
        f"+{_mib(served.rss_first - last)} | |",
        f"| … after {seconds:g} s at 1 scrape/s (run 1) | {_mib(served.rss_after)} | "
        f"+{_mib(served.rss_after - served.rss_first)} | |",
    ]
    if pulled:
        rows += ["", f"Loaded with the groups above, so in their figures: {', '.join(pulled)}."]
    return rows


def mapping_table(smaps: list[tuple[str, int]]) -> list[str]:
    rows = ["| mapping | VmRSS |", "|---|---:|"]
    rows += [f"| {name} | {_mib(size)} |" for name, size in smaps[:TOP]]
    rest = sum(size for _, size in smaps[TOP:])
    rows.append(f"| {len(smaps) - TOP} other mappings | {_mib(rest)} |")
    return rows


def allocation_tables(traces: list[list[object]]) -> list[str]:
    packages, sites, total, blocks = allocations(traces)
    rows = [
        f"Live Python allocations made since serve started, after the minute (run 2, tracemalloc, "
        f"{blocks:,} blocks, {total / 1024:,.0f} KiB):",
        "",
        "| package | KiB | share |",
        "|---|---:|---:|",
    ]
    rows += [f"| {n} | {s / 1024:,.1f} | {s / total:.0%} |" for n, s in packages.most_common(TOP)]
    rows += [
        "",
        "| site (newest frame outside the import machinery ← our frame under it) | KiB |",
        "|---|---:|",
    ]
    rows += [f"| `{site}` | {size / 1024:,.1f} |" for site, size in sites.most_common(TOP)]
    return rows


def run_line(load_at_start: str) -> str:
    from peer_report import run_line as peers_run_line

    return peers_run_line(load_at_start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds at 1 scrape/s")
    parser.add_argument("--interval", type=int, default=5, help="collection interval, seconds")
    parser.add_argument("--readme", action="store_true", help="write the figures to README")
    args = parser.parse_args(argv)
    load_at_start = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="kge-rss-") as tmp:
            work = Path(tmp)
            node = prepare(work, node_scenario())
            served, listing = serve_run(node, work, "modules", [], args.seconds, args.interval)
            modules = json.loads(listing.read_text())
            groups, missing = import_groups(modules)
            _, imports = serve_run(node, work, "imports", groups, args.seconds, args.interval)
            lines = imports.read_text().splitlines()
            traces = json.loads(Path(f"{imports}.trace").read_text())
    except (BenchError, OSError) as exc:
        print(f"rss-profile: error: {exc}", file=sys.stderr)
        return 1
    ours_modules = len(groups[-1].split(","))
    text = (
        "\n".join(
            [
                run_line(load_at_start),
                "",
                *import_table(lines, ours_modules, served, args.seconds),
                "",
                "Not loaded by serve (so not imported in run 2): "
                + (", ".join(missing) if missing else "none")
                + f". Serve loaded {len(modules)} modules in all.",
                "",
                f"VmRSS by mapping after the minute (run 1, /proc/<pid>/smaps), "
                f"{_mib(sum(size for _, size in served.smaps))} in all:",
                "",
                *mapping_table(served.smaps),
                "",
                *allocation_tables(traces),
            ]
        )
        + "\n"
    )
    print("\n" + text)
    if args.readme:
        update_readme(README, text, START, END)
        say(f"results written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
