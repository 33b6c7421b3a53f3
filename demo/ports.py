"""Whether the demo's ports are free, and if not, which process holds one.

The demo checks every port before it starts anything: a second demo, or anything else on
19090, would otherwise get as far as its banner before a part died with "address already in
use" in a log the user never sees. The holder is found the way `ss -ltnp` finds it, from the
listening sockets in /proc/net/tcp{,6} and the socket inodes under /proc/<pid>/fd, so the
message can say what to stop.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from pathlib import Path

LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket


def in_use(host: str, port: int) -> bool:
    """Whether a server could not listen on (host, port) now. SO_REUSEADDR as Go and the exporter
    set it, so a port whose last connections linger in TIME_WAIT counts as free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """`<command> (pid N)` of a process listening on `port`, or None when it cannot be told
    (another user's process, or no /proc)."""
    inodes = set(_listening_inodes(port, proc))
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
            if any(_socket_inode(fd) in inodes for fd in fds):
                command = (pid_dir / "comm").read_text().strip()
                return f"{command} (pid {pid_dir.name})"
        except OSError:  # gone, or not ours to read
            continue
    return None


def _listening_inodes(port: int, proc: Path) -> Iterator[str]:
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and fields[1].endswith(f":{port:04X}"):
                yield fields[9]


def _socket_inode(fd: Path) -> str | None:
    try:
        target = fd.readlink().name
    except OSError:
        return None
    return target[len("socket:[") : -1] if target.startswith("socket:[") else None
