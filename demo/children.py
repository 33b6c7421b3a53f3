"""The demo's child processes: started with their output in a log, waited on until ready,
and never outliving the demo.

Each child runs in its own session, so the terminal's Ctrl-C (and its hang-up when closed)
reach only the demo, which stops the children in order. Should the demo itself be killed
(SIGKILL, a crash), the kernel ends them: each starts through a short prelude that sets
PR_SET_PDEATHSIG before it execs the real program. A prelude rather than `preexec_fn`,
because the demo forks while its gRPC and HTTP threads run, where `preexec_fn` may deadlock.
The signal is tied to the thread that started the child, so children are started from the
thread that lives as long as the demo (its main thread).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from kube_gpu_exporter.exporter.input_errors import InputError

START_SECONDS = 60.0
STOP_SECONDS = 10.0
# PR_SET_PDEATHSIG is 1 in <linux/prctl.h>; a parent already gone before it was set is
# caught by the parent pid check, and the signal survives the exec.
_PRELUDE = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def ended_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv` run so that it gets SIGTERM when this process dies, however it dies (the
    prelude sets PR_SET_PDEATHSIG, then execs `argv`)."""
    return [sys.executable, "-I", "-S", "-c", _PRELUDE, str(os.getpid()), *argv]


class DemoError(InputError):
    """The stack cannot run here (a binary missing, a port taken, a part that would not
    start); one line, exit 2."""


class Children:
    """The processes started so far, by name, with their logs in `logs`."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def start(
        self,
        name: str,
        argv: Sequence[str],
        ready_url: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start `argv` as `name` and wait until `ready_url` answers 200."""
        with self.log_path(name).open("wb") as log:
            proc = subprocess.Popen(
                ended_with_parent(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self._procs.append((name, proc))
        deadline = time.monotonic() + START_SECONDS
        while not answers(ready_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log_tail = self.log_path(name).read_text(errors="replace").strip().splitlines()
                tail = " | ".join(log_tail[-3:])
                raise DemoError(f"{name} did not start ({ready_url}): {tail or 'no output'}")
            time.sleep(0.2)

    def exited(self) -> str | None:
        """The name of a child that has exited, if one has."""
        return next((name for name, proc in self._procs if proc.poll() is not None), None)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for _, proc in self._procs]

    def stop(self) -> None:
        """SIGTERM to every child at once, then wait; SIGKILL for one that lingers."""
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self._procs):
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()


def answers(url: str) -> bool:
    """Whether `url` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
