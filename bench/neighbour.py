"""A CPU-bound neighbour on the bench's machine: one busy Python loop per core.

A node or a control-plane host running the cluster view is rarely idle; the neighbour makes
the machine's cores contended for the whole measured run, so a figure taken with it says what
the view does when the scheduler must share the cores with work that never sleeps. The
loops run at the default nice level, as a co-tenant would, and are ended by their own pids.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import procs

LOOP = "while True: pass"


@dataclass
class Neighbour:
    """The loops, and their CPU once stopped (seconds a second, summed over them)."""

    count: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    began: float = 0.0
    cpu_per_s: float = 0.0

    def describe(self) -> str:
        share = f", {self.cpu_per_s:.2f} cores of CPU taken" if self.cpu_per_s else ""
        return (
            f"{self.count} CPU-bound neighbour{'s' * (self.count > 1)} (`python -c "
            f"'{LOOP}'`, one per core, nice 0) started by the bench before the process and "
            f"running to its end{share}"
        )


@contextmanager
def busy(enabled: bool) -> Iterator[Neighbour | None]:
    """One loop per core while in the block (none when not `enabled`)."""
    if not enabled:
        yield None
        return
    neighbour = Neighbour(os.cpu_count() or 1)
    try:
        for _ in range(neighbour.count):
            neighbour.procs.append(subprocess.Popen([sys.executable, "-c", LOOP]))
        neighbour.began = time.monotonic()
        yield neighbour
    finally:
        elapsed = time.monotonic() - neighbour.began
        used = sum(procs.cpu_seconds(p.pid) for p in neighbour.procs if p.poll() is None)
        neighbour.cpu_per_s = used / elapsed if elapsed > 0 else 0.0
        for proc in neighbour.procs:
            procs.stop(proc)
