"""The flags every serving command shares: the web flags of `serve` and `cluster`, and the
parsers of durations, intervals, ports and paths behind them.

Both commands serve Prometheus metrics through the same stack (listener, TLS, basic auth,
limits), so they take the same flags with the same checks: a bad value is one line and exit
status 2 (argparse's error, which the CLI's parser keeps to one line).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from kube_gpu_exporter.exporter.input_errors import one_line, quoted
from kube_gpu_exporter.exporter.serve.server import PROBE_PATHS
from kube_gpu_exporter.exporter.units import (
    NotAnAddress,
    OutOfRange,
    parse_duration,
    parse_int,
    parse_listen_address,
)

MIN_INTERVAL = 0.1  # seconds: --collector.interval, --kubelet.interval
MAX_DURATION = 86400.0  # seconds: every duration flag
# --web.max-requests, --web.max-connections: beyond any file-descriptor limit, so a larger
# number is a typo, not a setting.
MAX_COUNT = 1_000_000
# What the server answers itself (server.py): the landing page and the kubelet's probes.
RESERVED_PATHS = PROBE_PATHS | {"/"}
_URL_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+/?")


def listen_address(value: str) -> tuple[str, int]:
    """`host:port`, `:port` or `[v6]:port` → (host, port); an empty host means every address.
    Brackets must pair and hold an IPv6 address, as Go's exporters require (units.py)."""
    try:
        return parse_listen_address(value)
    except (NotAnAddress, OutOfRange) as exc:
        reason = str(exc)
        sep = " " if reason.startswith("(") else ": "
        raise argparse.ArgumentTypeError(
            f"not a listen address: {quoted(value)}{sep}{reason}"
        ) from None


def positive_duration(value: str) -> float:
    """A duration above 0 and at most a day (a thread's wait overflows on 1e400 seconds)."""
    try:
        seconds = parse_duration(value)
    except OutOfRange:
        seconds = math.inf  # beyond any float: beyond a day too
    except ValueError as exc:
        raise argparse.ArgumentTypeError(one_line(str(exc))) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {quoted(value)}")
    if seconds > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"must be at most 24h: {quoted(value)}")
    return seconds


def interval(value: str) -> float:
    """How often to do something: at least 100ms (a shorter interval spends a core on
    collecting: bench/README.md, "Figures behind the code's choices")."""
    seconds = positive_duration(value)
    if seconds < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be at least 100ms: {quoted(value)}")
    return seconds


def telemetry_path(value: str) -> str:
    """A plain URL path the server answers with nothing else. A probe path would serve the
    metrics without auth (probes skip it for the kubelet); URL path characters only, so what
    a client sends (decoded) is exactly the path configured."""
    if not value.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with '/': {quoted(value)}")
    if value in RESERVED_PATHS:
        reserved = ", ".join(sorted(RESERVED_PATHS))
        raise argparse.ArgumentTypeError(f"{value} is the exporter's own (reserved: {reserved})")
    if not _URL_PATH.fullmatch(value) or {".", ".."} & set(value.split("/")):
        raise argparse.ArgumentTypeError(
            f"not a plain URL path: {quoted(value)} (segments of letters, digits and "
            "-._~!$&'()*+,;=:@ between single slashes)"
        )
    return value


def non_negative_int(value: str) -> int:
    """A count where 0 means no limit (--web.max-requests)."""
    return _count(value, 0)


def positive_int(value: str) -> int:
    """A count of at least 1 (--web.max-connections)."""
    return _count(value, 1)


def _count(value: str, lowest: int) -> int:
    try:
        return parse_int(value, lowest, MAX_COUNT)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_flag(
    group: argparse._ActionsContainer,
    flag: str,
    dest: str,
    default: float,
    help: str,
    parse: Callable[[str], float] = positive_duration,
) -> None:
    """A duration flag ("5s", "1m30s"); its help ends with the default, as every flag's does.
    `parse` is `interval` for how-often flags (at least 100ms)."""
    group.add_argument(
        flag,
        dest=dest,
        type=parse,
        default=default,
        metavar="DURATION",
        help=f"{help} (default {default:g}s)",
    )


def add_web_flags(serve: argparse.ArgumentParser, default_port: int) -> None:
    """The exporter-toolkit style web flags: address, path, web config (TLS, basic auth),
    request and connection limits, timeouts."""
    serve.add_argument(
        "--web.listen-address",
        dest="listen",
        type=listen_address,
        default=("", default_port),
        metavar="HOST:PORT",
        help=f"address to serve on (default :{default_port})",
    )
    serve.add_argument(
        "--web.probe-listen-address",
        dest="probe_listen",
        type=listen_address,
        default=None,
        metavar="HOST:PORT",
        help="serve /healthz and /readyz on this address too, plain HTTP without auth, for "
        "the kubelet's probes: they keep an accept queue of their own whatever crowds the "
        "scrape port, and need no client certificate where TLS asks one (default: off)",
    )
    serve.add_argument(
        "--web.telemetry-path",
        dest="telemetry_path",
        type=telemetry_path,
        default="/metrics",
        help="path of the metrics (default /metrics)",
    )
    serve.add_argument(
        "--web.config.file",
        dest="web_config",
        metavar="FILE",
        help="exporter-toolkit web config: TLS and bcrypt basic auth",
    )
    serve.add_argument(
        "--web.max-requests",
        dest="max_requests",
        type=non_negative_int,
        default=40,
        help="concurrent requests beyond which the server answers 503; 0 for no limit (default 40)",
    )
    serve.add_argument(
        "--web.max-requests-per-client",
        dest="max_requests_per_client",
        type=non_negative_int,
        default=10,
        help="concurrent requests from one client address beyond which it gets 429; 0 for no "
        "limit (default 10)",
    )
    serve.add_argument(
        "--web.max-connections",
        dest="max_connections",
        type=positive_int,
        default=256,
        help="open connections in all; beyond them a new client address displaces the "
        "longest-idle connection of the address holding the most (default 256)",
    )
    serve.add_argument(
        "--web.max-connections-per-client",
        dest="max_connections_per_client",
        type=positive_int,
        default=32,
        help="open connections from one client address beyond which new ones get 429 and are "
        "closed (default 32)",
    )
    duration_flag(
        serve,
        "--web.read-header-timeout",
        "read_header_timeout",
        10.0,
        "how long a request's headers may take to arrive, from its first byte (from the "
        "accept for a connection's first request); a slower client is disconnected",
    )
    duration_flag(
        serve,
        "--web.idle-timeout",
        "idle_timeout",
        120.0,
        "how long a keep-alive connection may wait for its next request",
    )
    duration_flag(
        serve,
        "--web.write-timeout",
        "write_timeout",
        30.0,
        "how long a client may leave a response unread before it is disconnected",
    )
