"""What logging in through a kubeconfig `exec` plugin costs the process that does it.

Each run is a fresh interpreter that loads one kubeconfig and takes its first Authorization
header, as `explain` and `cluster` do at start-up; it prints its own CPU time (process time,
so the plugin's child process is not counted) and peak RSS. Two kubeconfigs, alike but for the
user: a `token` user (the baseline: what every kubeconfig costs) and an `exec` user whose
plugin is a small Python script printing an ExecCredential. The difference is what the exec
path adds; the figures are in bench/README.md.

Usage (from the repository root):

    .venv/bin/python bench/exec_login.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PLUGIN = (
    "import json\n"
    "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
    "'kind': 'ExecCredential', 'status': {'token': 'from-plugin'}}))\n"
)
PROBE = (
    "import resource, sys, time\n"
    "from kube_gpu_exporter.exporter.kubernetes.kubeconfig import load_kubeconfig\n"
    "header = load_kubeconfig(sys.argv[1]).authorization()\n"
    "assert header and header.startswith('Bearer '), header\n"
    "print(time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
)


def kubeconfig(folder: Path, name: str, user: dict[str, object]) -> Path:
    path = folder / name
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def measure(path: Path, runs: int) -> tuple[float, float]:
    """Median CPU seconds and peak RSS (MiB) of `runs` fresh processes."""
    cpu, rss = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
        ).stdout.split()
        cpu.append(float(out[0]))
        rss.append(int(out[1]) / 1024)
    return statistics.median(cpu), statistics.median(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "plugin.py").write_text(PLUGIN)
        plugin = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(folder / "plugin.py")],
            "interactiveMode": "Never",
        }
        token_cpu, token_rss = measure(kubeconfig(folder, "token", {"token": "t"}), runs)
        exec_cpu, exec_rss = measure(kubeconfig(folder, "exec", {"exec": plugin}), runs)
    print(f"token user: {token_cpu * 1000:.0f} ms CPU, {token_rss:.1f} MiB peak RSS")
    print(f"exec user:  {exec_cpu * 1000:.0f} ms CPU, {exec_rss:.1f} MiB peak RSS")
    print(f"exec adds:  {(exec_cpu - token_cpu) * 1000:.0f} ms, {exec_rss - token_rss:.1f} MiB")


if __name__ == "__main__":
    main()
