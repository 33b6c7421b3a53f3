"""The CLI's main run in the test process, for the bad-input tests and the fuzz test.

A subprocess per input costs a second of start-up; in-process, hundreds of inputs take
seconds. What would outlive the call is stubbed while the context is open: `serve` stops
after building its parts from the flags and files (the server itself never starts), logging is
left as pytest set it up, and with `render=False` `generate` renders and writes nothing (the
inputs are loaded and the output paths checked first, which is what these tests are about).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.exporter import app
from kube_gpu_exporter.exporter.cli import main
from kube_gpu_exporter.exporter.generate import outputs

MAX_LINE = 500  # characters of the one error line, the CLI's prefix included


@contextlib.contextmanager
def offline_cli(render: bool = True) -> Iterator[None]:
    """While open, `run_cli` never starts a server, touches logging or (render=False) writes."""
    switch = sys.getswitchinterval()

    async def built(*_: Any) -> None:
        """Stands for `app._serve`: the flags and files were read; serve nothing."""

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "_serve", built)
        patch.setattr(app.logs, "setup", lambda *_: None)
        if not render:
            patch.setattr(outputs, "planned_files", lambda *_: {})
            patch.setattr(outputs, "write", lambda *_: None)
        try:
            yield
        finally:
            sys.setswitchinterval(switch)


def run_cli(argv: Sequence[str | Path]) -> tuple[int, str]:
    """(exit status, stderr) of `kube-gpu-exporter *argv` (argparse's SystemExit included)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main([str(arg) for arg in argv])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


def assert_one_line(status: int, stderr: str, *expected: str) -> str:
    """Exit 2 and one bounded line on stderr, holding each of `expected`; the line."""
    assert status == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), stderr
    assert len(lines[0]) <= MAX_LINE, f"{len(lines[0])} characters: {lines[0][:200]}…"
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]
