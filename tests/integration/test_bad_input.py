"""Bad inputs that each used to end in a traceback (exit 1), once each: every one now ends in
one line of at most 500 characters and exit status 2. The CLI runs in-process
(inprocess_cli.py); test_cli.py runs it as a process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_cli import assert_one_line, offline_cli, run_cli

from kube_gpu_exporter.exporter.input_yaml import MAX_BYTES

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"

NOT_UTF8 = b"devices:\n  - name: \xff\xfe\n"
DEEP = b"[" * 5000 + b"]" * 5000
# 600 bytes: nine anchors, each nine aliases of the one before, stand for 9**9 nodes; the
# thresholds file's error quoted the expanded value whole (a 44 MB line).
BOMB = ("a: &a [" + ", ".join(['"lol"'] * 9) + "]\n").encode() + b"".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n".encode()
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)

# How each of the three input files is given, and how its messages name it.
FILES = {
    "scenario": (["serve", "--simulate"], "scenario "),
    "thresholds": (["generate", "--check", "--config"], ""),
    "web config": (["serve", "--simulate", str(DEMO), "--web.config.file"], "web config "),
}


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with offline_cli():
        yield


@pytest.mark.parametrize("which", FILES)
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (NOT_UTF8, "not UTF-8 text: byte 0xff at offset 19 (line 2)"),
        (DEEP, "not valid YAML at line 1, column 65: nested deeper than 64 levels"),
        (BOMB, "not valid YAML at line 5, column 8: aliases stand for more than 10000 nodes"),
        (b"a: 1\x00\n", "not valid YAML at line 1: character U+0000 is not allowed"),
        (
            b"a: 2001-13-01\n",
            "not valid YAML at line 1, column 4: cannot read !!timestamp value: month must be",
        ),
        (
            b"a: " + b"9" * 5000 + b"\n",
            "not valid YAML at line 1, column 4: cannot read !!int value",
        ),
        (b"a: 1\na: 2\n", "not valid YAML at line 2, column 1: duplicate key 'a'"),
        (
            b"a: &x [1, *x]\n",
            "not valid YAML at line 1, column 11: alias *x is inside the node it names",
        ),
        (b"#" * (MAX_BYTES + 1), "larger than 1 MiB"),
    ],
    ids=[
        "not-utf8",
        "deep",
        "alias-bomb",
        "nul",
        "bad-timestamp",
        "huge-int",
        "dup",
        "cycle",
        "big",
    ],
)
def test_every_input_file_refuses_it_in_one_line(
    tmp_path: Path, which: str, content: bytes, expected: str
) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    flags, label = FILES[which]
    assert_one_line(*run_cli([*flags, path]), f"error: {label}{path}: {expected}")


@pytest.mark.parametrize("which", FILES)
def test_the_alias_bomb_is_refused_before_it_expands(tmp_path: Path, which: str) -> None:
    """The real process, given the 600-byte bomb: one line and exit 2 within seconds and a
    bounded peak memory, which expanding its 9**9 nodes (validating or quoting them) cannot
    do. The process's own peak RSS is read with wait4, not the test's."""
    path = tmp_path / "bomb.yaml"
    path.write_bytes(BOMB)
    flags, label = FILES[which]
    command = [sys.executable, "-m", "kube_gpu_exporter.exporter", *flags, str(path)]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=tmp_path) as proc:
        timer = threading.Timer(30, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert_one_line(proc.returncode, stderr, f"{label}{path}", "more than 10000 nodes")
    assert usage.ru_maxrss < 300 * 1024, f"peak RSS {usage.ru_maxrss // 1024} MiB"


@pytest.mark.parametrize("which", FILES)
def test_a_small_alias_is_fair_use(tmp_path: Path, which: str) -> None:
    """Anchors stay allowed: the bound is on what aliases stand for, not on using them."""
    texts = {
        "scenario": "devices:\n  - &gpu {name: NVIDIA H100}\n  - *gpu\n",
        "thresholds": "alert_labels: &team {team: ml}\nprometheus_rule: {labels: *team}\n",
        "web config": "http_server_config: &h {http2: true}\n",
    }
    path = tmp_path / "input.yaml"
    path.write_text(texts[which])
    flags, _ = FILES[which]
    status, stderr = run_cli(
        [*flags, path, *(["--out", tmp_path] if which == "thresholds" else [])]
    )
    assert status in (0, 1) and "Traceback" not in stderr, stderr  # 1: --check found it stale


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ('job=~"kube|(x"', "the regex of job=~ is not valid: missing ): kube|(x"),
        ('job=~"[kube"', "the regex of job=~ is not valid: missing ]: [kube"),
        ('job=~"kube(?=x)"', "the regex of job=~ is not valid: invalid perl operator: (?="),
        ('job=~"(k)\\\\1"', "the regex of job=~ is not valid: invalid escape sequence: \\1"),
    ],
)
def test_an_invalid_regex_in_a_selector_names_the_key(
    tmp_path: Path, selector: str, expected: str
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"selectors:\n  exporter: '{selector}'\n")
    line = assert_one_line(*run_cli(["generate", "--config", path, "--out", tmp_path / "out"]))
    assert f"{path}: selectors.exporter: {expected}" in line
    assert not (tmp_path / "out").exists()


def test_output_paths_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    runbooks = tmp_path / "runbooks.md"
    cases = [
        (["--out", a_file, "--runbooks", runbooks], f"--out {a_file}: not a directory"),
        (["--out", a_file / "deploy"], f"--out {a_file / 'deploy'}: {a_file} is not a directory"),
        (["--out", tmp_path / "out", "--runbooks", tmp_path], "is a directory, not a file"),
        (["--out", tmp_path / "out", "--runbooks", a_file / "r.md"], "is not a directory"),
    ]
    for flags, expected in cases:
        assert_one_line(*run_cli(["generate", *flags]), expected)
    assert not (tmp_path / "out").exists() and not runbooks.exists()


def test_an_unwritable_output_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Root writes into any folder, and CI runs as root: there the command runs as nobody
    (uid 65534, through util-linux's setpriv) in a folder everyone may read."""
    base = Path(tempfile.mkdtemp(prefix="kge-unwritable-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        free = base / "free"  # writable by everyone
        free.mkdir()
        free.chmod(0o777)
        out, runbooks = locked / "deploy", locked / "runbooks.md"
        cases = [
            (["--out", out, "--runbooks", free / "r.md"]),
            (["--out", free / "out", "--runbooks", runbooks]),
        ]
        for flags in cases:
            assert_one_line(*_as_nobody(["generate", *flags]), f"{locked} is not writable")
        assert not list(free.iterdir())  # checked before anything was written
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _as_nobody(argv: list[str | Path]) -> tuple[int, str]:
    """The CLI in-process as an ordinary user, or as nobody in a subprocess under root."""
    if os.geteuid() != 0:
        return run_cli(argv)
    setpriv = shutil.which("setpriv")
    assert setpriv, "util-linux's setpriv is needed to test an unwritable folder as root"
    cli = Path(sys.executable).with_name("kube-gpu-exporter")
    command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", cli, *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stderr


def test_a_write_that_fails_anyway_is_one_line(tmp_path: Path) -> None:
    """What no check can foresee (here: /proc takes no new folder, even from root)."""
    flags = ["--out", "/proc/kube-gpu-exporter-out", "--runbooks", tmp_path / "r.md"]
    assert_one_line(*run_cli(["generate", *flags]), "cannot write /proc/kube-gpu-exporter-out")


def test_the_demo_checks_its_workdir(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert_one_line(*run_cli(["demo", "--workdir", a_file]), f"--workdir {a_file}: not a directory")


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--web.telemetry-path=/healthz", "/healthz is the exporter's own"),
        ("--web.telemetry-path=/readyz", "/readyz is the exporter's own"),
        ("--web.telemetry-path=/", "/ is the exporter's own"),
        ("--web.telemetry-path=/metrics{", "not a plain URL path: '/metrics{'"),
        ("--web.telemetry-path=/my metrics", "not a plain URL path: '/my metrics'"),
        ("--web.telemetry-path=/a//b", "not a plain URL path"),
        ("--web.telemetry-path=/a/../metrics", "not a plain URL path"),
        ("--web.telemetry-path=metrics", "must start with '/'"),
        ("--collector.interval=1ms", "--collector.interval: must be at least 100ms: '1ms'"),
        ("--collector.interval=0.09s", "must be at least 100ms"),
        ("--kubelet.interval=50ms", "--kubelet.interval: must be at least 100ms"),
        ("--collector.interval=" + "9" * 400 + "h", "must be at most 24h"),
        ("--web.listen-address=:99999", "port 99999 out of range 1–65535"),
        ("--web.listen-address=[::1]:65536", "port 65536 out of range 1–65535"),
        ("--web.listen-address=:" + "9" * 5000, "out of range 1–65535"),
        ("--web.listen-address=:²", "(use host:port)"),
        ("--log.level=" + "x" * 100_000, "invalid choice"),
    ],
)
def test_bad_serve_flags(flag: str, expected: str) -> None:
    assert_one_line(*run_cli(["serve", flag]), expected)


def test_good_serve_flags_are_accepted() -> None:
    flags = [
        "--web.telemetry-path=/gpu/metrics",
        "--collector.interval=100ms",
        "--kubelet.interval=0.1s",
        "--web.listen-address=127.0.0.1:19400",
    ]
    assert run_cli(["serve", "--simulate", DEMO, *flags]) == (0, "")


@pytest.mark.parametrize("port", ["99999", "-1", "x"])
def test_bad_demo_ports(port: str) -> None:
    assert_one_line(*run_cli(["demo", f"--port.prometheus={port}"]), "--port.prometheus")
