"""How many malloc arenas glibc may give the process's threads: two, unless the environment says.

glibc gives each new thread that mallocs an arena of its own, up to eight per core, and
memory freed in one arena serves only that arena again. serve runs
about six threads (the event loop, the collector, the Xid watcher, the pod and ResourceSlice
watches) and the cluster view more; two arenas are enough for what they allocate, and each
one more keeps its own freed pages resident (bench/README.md, "Lean as deployed").

The manifests set `MALLOC_ARENA_MAX=2`; the process sets the same itself, so that a `docker
run`, a systemd unit or a chart whose env was overridden gets it too. A value in the
environment is the user's: glibc has already applied it, and it is left alone.
"""

from __future__ import annotations

import ctypes
import os
from typing import Final

ARENAS: Final = 2
ENVIRONMENT: Final = "MALLOC_ARENA_MAX"
M_ARENA_MAX: Final = -8  # glibc's malloc.h


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas at `arenas` before the process starts its threads. False where
    nothing was set: the environment decides, or the C library is not glibc (musl has no
    per-thread arenas, and no `mallopt`)."""
    if ENVIRONMENT in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
