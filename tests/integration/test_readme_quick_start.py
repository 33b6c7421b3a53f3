"""The README's `serve --simulate` and `curl` commands, run as written, print what it shows.

The example once advertised per-pod series that `serve --simulate` does not serve (attribution
is off with --simulate unless a kubelet socket is given). The commands are read from the
README's "Running the exporter" block: the `serve --simulate` line runs as written with one
flag added, a free `--web.listen-address` (the last one given wins), and the `curl | grep`
line runs in a shell with its port changed to match. What it prints must be the README's
```text block below it, series for series (the scenario moves on with time: values within
0.01), and the per-pod series the README says need a kubelet must be absent from the body.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from support import Exporter, exporter_command, free_port, samples, wait_until

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_PORT = "19400"
SERIES = re.compile(r"^(\S+?)(\{[^}]*\})? (\S+)$")


def installed(script: str) -> list[str]:
    """The console script beside this Python (the venv's), as the README's reader runs it;
    `python -m` where it is not installed."""
    path = Path(sys.executable).parent / script
    return [str(path)] if path.exists() else exporter_command()


def section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## Running the exporter", 1)[1].split("\n## ", 1)[0]


def commands() -> tuple[list[str], str]:
    """(the `serve --simulate` command's argv, the `curl` shell line) of the first sh block."""
    block = re.search(r"```sh\n(.*?)```", section(), re.DOTALL)
    assert block, "no sh block under 'Running the exporter'"
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    (serve,) = [line for line in lines if " serve --simulate " in f" {line} "]
    (curl,) = [line for line in lines if line.startswith("curl ")]
    return shlex.split(serve), curl


def shown() -> list[tuple[str, str, float]]:
    """(name, labels, value) of each line of the text block after the sh block."""
    block = re.search(r"```sh\n.*?```\n\n```text\n(.*?)```", section(), re.DOTALL)
    assert block, "the README shows no output of its commands"
    parsed = [SERIES.match(line) for line in block.group(1).splitlines()]
    assert all(parsed), block.group(1)
    return [(m.group(1), m.group(2) or "", float(m.group(3))) for m in parsed if m]


def test_the_readme_commands_print_what_it_shows(tmp_path: Path) -> None:
    argv, curl = commands()
    assert argv[:2] == ["kube-gpu-exporter", "serve"]
    assert README_PORT in curl
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*installed("kube-gpu-exporter"), *argv[1:], f"--web.listen-address=127.0.0.1:{port}"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    exporter = Exporter(proc, port, log)
    try:
        wait_until(lambda: proc.poll() is not None or exporter.get("/readyz")[0] == 200)
        assert proc.poll() is None, exporter.log()
        printed = subprocess.run(
            ["bash", "-o", "pipefail", "-c", curl.replace(f":{README_PORT}", f":{port}")],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        body = exporter.get()[2]
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    got = [SERIES.match(line) for line in printed.splitlines()]
    assert all(got), printed
    series = [(m.group(1), m.group(2) or "", float(m.group(3))) for m in got if m]
    expected = shown()
    assert [s[:2] for s in series] == [s[:2] for s in expected], printed
    for (name, labels, value), (_, _, stated) in zip(series, expected, strict=True):
        assert abs(value - stated) <= 0.01, f"{name}{labels} {value}, the README shows {stated}"

    # The per-pod series the README says come only with a kubelet are not served here.
    after = section().split("```text", 1)[1]
    per_pod = set(re.findall(r"`(nvidia_gpu_(?:allocation_info|pod_[a-z_]+))`", after))
    assert per_pod >= {"nvidia_gpu_allocation_info", "nvidia_gpu_pod_utilization_ratio"}
    served = {name for name, _ in samples(body)}
    assert not per_pod & served, f"served after all: {per_pod & served}"
