"""Fuzzing the three input files and the flags through the CLI's main, in-process.

Whatever the bytes or the flag values, `kube-gpu-exporter` either accepts them (exit 0) or
says why in exactly one line of at most 500 characters with exit status 2; no traceback. The
inputs are bytes, YAML-ish text (the characters YAML gives meaning to, anchors and aliases
included), YAML dumps of random structures keyed by the files' real keys (so validation is
reached, not only the parser), and each flag's values. Derandomized, with a fixed number of
examples, so CI sees the same inputs every run and the whole module takes seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess_cli import assert_one_line, offline_cli, run_cli

from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.serve.flags import RESERVED_PATHS
from kube_gpu_exporter.exporter.serve.server import build_app

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "exporter" / "simulated" / "scenarios" / "demo.yaml"

FUZZ = settings(
    max_examples=150,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,  # and nothing is written under the repository
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# The keys of the three files, so that random structures get past the parser into validation.
KEYS = [
    *("devices", "name", "uuid", "readings", "timeline", "at", "mig", "profile", "kubelet"),
    *("pods", "processes", "lost", "xid", "utilization", "memory_used_bytes", "clock_events"),
    *("selectors", "exporter", "labels", "node", "alerts", "GPUMemoryNearFull", "threshold"),
    *("for", "severity", "deployment", "image", "alert_labels", "cost", "dashboards"),
    *("tls_server_config", "cert_file", "key_file", "client_auth_type", "min_version"),
    *("http_server_config", "headers", "X-Frame-Options", "basic_auth_users", "http2"),
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["1h", "90s", "80GiB", 'job=~"a|(b"', "deny", "$2b$04$x", "TLS13", "-1"]),
)
STRUCTURES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=10)), inner, max_size=5),
    ),
    max_leaves=25,
)
YAMLISH = st.lists(
    st.one_of(
        st.sampled_from([*list("[]{}:,-&*!|>'\"#%@`?<= \n\t"), "\r", "\x00", "\ufeff", "\u2028"]),
        st.sampled_from([*KEYS, "&a", "*a", "<<", "!!int", "!!set", "!!timestamp", "---"]),
        st.characters(codec="utf-8"),
    ),
    max_size=80,
).map("".join)


def _dumped(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode()


def _bomb(width: int, depth: int) -> bytes:
    """`width` aliases of the previous anchor, `depth` times: width**depth nodes."""
    lines = ["l0: &l0 [x]"] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth + 1)
    ]
    return "\n".join(lines).encode()


INPUT_FILES = st.one_of(
    st.binary(max_size=200),
    YAMLISH.map(lambda text: text.encode("utf-8", "surrogatepass")),
    STRUCTURES.map(_dumped),
    st.builds(_bomb, st.integers(1, 12), st.integers(1, 12)),
    st.integers(1, 3000).map(lambda n: b"a: " + b"[" * n + b"]" * n),
)

COMMANDS = {
    "scenario": ["serve", "--simulate"],
    "thresholds": ["generate", "--config"],
    "web config": ["serve", "--simulate", str(DEMO), "--web.config.file"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder for the module (hypothesis runs many examples per test function)."""
    with offline_cli(render=False):
        yield tmp_path_factory.mktemp("fuzz")


def assert_accepted_or_one_line(status: int, stderr: str) -> None:
    if status == 0:
        assert "Traceback" not in stderr, stderr
    else:
        assert_one_line(status, stderr)


@pytest.mark.parametrize("which", COMMANDS)
@FUZZ
@given(content=INPUT_FILES)
def test_input_files(folder: Path, which: str, content: bytes) -> None:
    path = folder / f"{which.replace(' ', '-')}.yaml"
    path.write_bytes(content)
    argv = [*COMMANDS[which], path]
    if which == "thresholds":
        argv += ["--out", folder / "out", "--runbooks", folder / "runbooks.md"]
    assert_accepted_or_one_line(*run_cli(argv))


DURATIONS = st.one_of(
    st.from_regex(r"\s?[0-9]{0,6}(\.[0-9]{1,4})?\s?(ms|s|m|h|d|)", fullmatch=True),
    st.sampled_from(["99ms", "100ms", "0.1", "1e3", "-5s", "nan", "inf", "9" * 400 + "h"]),
)
TEXT = st.text(max_size=60)
FLAGS = {
    "--web.listen-address": st.one_of(
        TEXT,
        st.from_regex(r"(\[[0-9a-f:]{0,12}\]|[a-z0-9.]{0,12})?:[0-9]{0,7}", fullmatch=True),
    ),
    "--web.telemetry-path": st.one_of(
        TEXT, st.from_regex(r"/[a-z{}%. /:@*+]{0,12}", fullmatch=True)
    ),
    "--web.max-requests": st.one_of(TEXT, st.from_regex(r"-?[0-9²٣]{0,25}", fullmatch=True)),
    "--collector.interval": st.one_of(TEXT, DURATIONS),
    "--kubelet.interval": st.one_of(TEXT, DURATIONS),
    "--kubelet.timeout": st.one_of(TEXT, DURATIONS),
    "--collector.xid-codes": st.one_of(TEXT, st.from_regex(r"[0-9,\- ]{0,20}", fullmatch=True)),
    "--log.level": TEXT,
    "--compat.dcgm-exporter": TEXT,
    "--kubelet.resource-name": TEXT,
}


@FUZZ
@given(
    values=st.dictionaries(
        st.sampled_from(sorted(FLAGS)), st.just(None), min_size=1, max_size=4
    ).flatmap(lambda chosen: st.fixed_dictionaries({flag: FLAGS[flag] for flag in chosen}))
)
def test_serve_flags(folder: Path, values: dict[str, str]) -> None:
    argv = ["serve", "--simulate", str(DEMO), *(f"{flag}={v}" for flag, v in values.items())]
    assert_accepted_or_one_line(*run_cli(argv))


@FUZZ
@given(
    port=st.one_of(TEXT, st.integers(-(10**6), 10**6).map(str)),
    part=st.sampled_from(["exporter", "prometheus", "alertmanager"]),
)
def test_demo_ports(port: str, part: str) -> None:
    """Parsed only: a valid port would start the demo's stack."""
    try:
        args = build_parser().parse_args(["demo", f"--port.{part}={port}"])
    except SystemExit:
        return  # the one-line form of argparse's refusals is test_serve_flags'
    assert 0 <= getattr(args, f"port_{part}") <= 65535


@FUZZ
@given(path=st.from_regex(r"/[A-Za-z0-9._~!$&'()*+,;=:@/-]{0,20}", fullmatch=True) | TEXT)
def test_accepted_telemetry_paths_are_plain_routes(path: str) -> None:
    """What the flag accepts, the server routes as a path of its own, and no reserved one."""
    try:
        args = build_parser().parse_args(["serve", f"--web.telemetry-path={path}"])
    except SystemExit:
        return
    assert args.telemetry_path not in RESERVED_PATHS
    app = build_app(StoppedSource(), args.telemetry_path)
    assert app.resolve(args.telemetry_path) is not None
    assert app.resolve("/healthz") is not None  # the probes still answer


class StoppedSource:
    """A Source with nothing to serve, for building an app."""

    latest = None
    alive = False
    ready = False

    def not_ready_reason(self) -> str:
        return "stopped"

    def landing_section(self) -> str:
        return ""
