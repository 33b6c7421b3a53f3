"""glibc's malloc arenas: capped at two by the process itself, unless MALLOC_ARENA_MAX is set.

Each case runs in a fresh interpreter: eight threads allocate at once, then glibc's own
`malloc_info` says how many arenas (`<heap nr=…>`) the process has."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys, threading
if sys.argv[1] == "cap":
    from kube_gpu_exporter.exporter.malloc_arenas import cap_arenas
    print(cap_arenas(), file=sys.stderr)
barrier = threading.Barrier(8)

def allocate():
    barrier.wait()
    held = [bytearray(4096) for _ in range(200)]  # above pymalloc's 512 bytes: malloc's
    barrier.wait()

threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(None)
libc.open_memstream.restype = ctypes.c_void_p
text, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(text), ctypes.byref(size)))
libc.malloc_info(0, stream)
libc.fclose(stream)
print(text.value.decode().count("<heap nr="))
"""


def arenas(cap: bool, limit: str | None = None) -> tuple[int, str]:
    """Arenas after eight threads allocated, and what cap_arenas returned ('' when not called)."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if limit is not None:
        env["MALLOC_ARENA_MAX"] = limit
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "cap" if cap else "no"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout), done.stderr.strip()


@pytest.fixture(autouse=True)
def glibc() -> None:
    if not os.path.exists("/proc/self/maps") or "glibc" not in os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.fail("these tests need Linux with glibc (the image and CI have both)")


def test_without_the_cap_each_thread_gets_an_arena() -> None:
    """The probe can tell: glibc's default gives the eight threads arenas of their own."""
    count, _ = arenas(cap=False)
    assert count > 2


def test_the_process_caps_its_threads_at_two_arenas() -> None:
    count, returned = arenas(cap=True)
    assert (count, returned) == (2, "True")


def test_an_arena_limit_in_the_environment_is_the_users() -> None:
    count, returned = arenas(cap=True, limit="4")
    assert (count, returned) == (4, "False")
