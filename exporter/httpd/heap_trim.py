"""Giving the C heap back after a burst of connections.

Each TLS connection allocates OpenSSL's buffers and state from the C heap (glibc's malloc).
Once a burst of connections ends, that memory is free but stays in the process: glibc
returns only the top of its heap, and a burst's frees leave holes below live allocations, so
every burst of the same size could ratchet resident memory up (no Python-level cache holds
it: `malloc_trim` gives most of it back). So when the open connections fall to a quarter of
the peak since the last trim, the listener asks glibc to return its free pages, once the
burst's other closes have come. Where the C library is not glibc, nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Final

SMALLEST_BURST: Final = 32  # connections: below this, nothing worth a trim was allocated
FALL: Final = 4  # trim once the open connections fall to 1/FALL of the peak
SETTLE: Final = 0.5  # seconds after that fall: the rest of the burst's closes come first

Schedule = Callable[[float, Callable[[], None]], object]


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


class HeapTrim:
    """Told the count of open connections as it changes (`count`); once it falls to a
    quarter of the peak, trims SETTLE seconds later, once, and starts a new peak."""

    def __init__(
        self,
        count: Callable[[], int],
        schedule: Schedule,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        self._count = count
        self._schedule = schedule
        self._trim = trim if trim is not None else _malloc_trim()
        self._peak = 0
        self._pending = False
        self.trims = 0

    def changed(self) -> None:
        count = self._count()
        self._peak = max(self._peak, count)
        if self._pending or self._trim is None or self._peak < SMALLEST_BURST:
            return
        if count * FALL <= self._peak:
            self._pending = True
            self._schedule(SETTLE, self._run)

    def _run(self) -> None:
        assert self._trim is not None
        self._pending = False
        self._peak = self._count()
        self._trim(0)
        self.trims += 1
