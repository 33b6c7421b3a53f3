"""`serve` in this process, its memory profiled for bench/rss_profile.py.

    serve_profiled.py modules RESULTS -- SERVE_ARGS...
    serve_profiled.py imports RESULTS NAME=MODULE[,MODULE...]... -- SERVE_ARGS...

`modules` runs serve as it is; on SIGUSR1 it writes every loaded module (name, file) as JSON
to RESULTS. `imports` first imports each group in order and appends a line "NAME VmRSS-kB
modules-loaded" to RESULTS after each (the first line, `python`, is the interpreter before
any), then starts tracemalloc (25 frames) and runs serve; on SIGUSR1 it writes the live allocations
made since, summed per site, as JSON to RESULTS + ".trace". Until then only `sys` and `os`,
which the interpreter has loaded anyway, are imported here, so that the groups' figures are
their own.
"""

import os
import sys

FRAMES = 25


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def dump_modules(path: str) -> None:
    import json

    found = [[name, getattr(m, "__file__", None) or ""] for name, m in list(sys.modules.items())]
    with open(path + ".tmp", "w") as out:
        json.dump(found, out)
    os.rename(path + ".tmp", path)


def dump_trace(path: str) -> None:
    """Live allocations summed per site: the newest frame outside the import machinery, and
    the newest frame of our code under it ("" when none), as [file, line, ours, bytes, blocks]
    rows (summed here: every trace's 25 frames as JSON took a minute on a busy machine)."""
    import json
    import tracemalloc

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench = os.path.join(repo, "bench")
    sites: dict[tuple[str, int, str], list[int]] = {}
    for trace in tracemalloc.take_snapshot().traces:
        frames = [f for f in reversed(trace.traceback) if not f.filename.startswith("<")]
        filename, line = (frames[0].filename, frames[0].lineno) if frames else ("<import>", 0)
        ours = next(
            (
                f"{f.filename}:{f.lineno}"
                for f in frames
                if f.filename.startswith(repo)
                and "site-packages" not in f.filename
                and not f.filename.startswith(bench)
            ),
            "",
        )
        if filename == tracemalloc.__file__:
            continue
        site = sites.setdefault((filename, line, ours), [0, 0])
        site[0] += trace.size
        site[1] += 1
    rows = [[f, n, o, size, blocks] for (f, n, o), (size, blocks) in sites.items()]
    with open(path + ".tmp", "w") as out:
        json.dump(rows, out)
    os.rename(path + ".tmp", path)


def import_groups(results: str, groups: list[str]) -> None:
    with open(results, "w") as out:
        out.write(f"python {rss_kb()} {len(sys.modules)}\n")
        out.flush()
        for group in groups:
            name, _, modules = group.partition("=")
            before = len(sys.modules)
            for module in modules.split(","):
                __import__(module)
            out.write(f"{name} {rss_kb()} {len(sys.modules) - before}\n")
            out.flush()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    (mode, results, *groups), serve_args = argv[:split], argv[split + 1 :]
    if mode == "modules":
        import signal

        signal.signal(signal.SIGUSR1, lambda *_: dump_modules(results))
    else:
        import_groups(results, groups)
        import signal
        import tracemalloc

        tracemalloc.start(FRAMES)
        signal.signal(signal.SIGUSR1, lambda *_: dump_trace(results + ".trace"))
    from kube_gpu_exporter.exporter.cli import main as cli

    return cli(["serve", *serve_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
