"""Putting an app on the listening socket from the web flags, and waiting for SIGTERM.

`serve` (the node's exporter) and `cluster` (the cluster view) serve through the same stack:
the web config's basic auth and headers, the concurrency bound, the connection limits and
TLS of the listener. Both start it here, so a fix to one is a fix to both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import signal
import sys
from collections.abc import Awaitable
from dataclasses import replace
from typing import NoReturn

from kube_gpu_exporter.exporter.httpd import OVERFLOW, ConnectionLimits, Listener
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.serve.server import (
    PROBE_PATHS,
    Source,
    build_app,
    build_probe_app,
)
from kube_gpu_exporter.exporter.serve.web_config import WebConfig, web_middlewares

log = logging.getLogger(__name__)

# In-flight responses are pre-rendered bytes: a second drains them.
DRAIN_SECONDS = 1.0
# SIGTERM to exit: the grace period is 15 s (the DaemonSet's, the Deployment's), and the
# process aims for 5 s whatever a source does (the drain above takes a second of it).
SHUTDOWN_SECONDS = 4.5
# Files the process holds besides its connections: listening sockets, NVML's device nodes,
# the kubelet's and the API server's connections, logs.
DESCRIPTORS_OF_OUR_OWN = 64
PROBE_CONNECTIONS = 16  # the probe listener's: a kubelet probes every few seconds


class Site:
    """What serves: `cleanup` stops it at exit (the requests being handled get DRAIN_SECONDS)."""

    def __init__(self, listener: Listener, probes: Listener | None = None) -> None:
        self.listener = listener
        self.probes = probes

    async def cleanup(self) -> None:
        if self.probes is not None:
            await self.probes.stop(DRAIN_SECONDS)
        await self.listener.stop(DRAIN_SECONDS)


async def start_site(args: argparse.Namespace, web_config: WebConfig, source: Source) -> Site:
    """Serve `source` as the web flags (`add_web_flags`) and the web config say; the site to
    clean up at exit. A port in use or an address not ours is an InputError (exit 2)."""
    middlewares = web_middlewares(web_config, public_paths=PROBE_PATHS)
    app = build_app(
        source,
        args.telemetry_path,
        args.max_requests,
        middlewares,
        max_requests_per_client=args.max_requests_per_client,
    )
    host, port = args.listen
    limits = ConnectionLimits(
        read_header_timeout=args.read_header_timeout,
        idle_timeout=args.idle_timeout,
        write_timeout=args.write_timeout,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        headers=web_config.headers,
        probe_paths=PROBE_PATHS,
    )
    listener = Listener(
        app,
        host,
        port,
        limits,
        ssl_context=web_config.ssl_context,
        ssl_contexts=web_config.ssl_contexts,
    )
    await _listen(listener, args.listen)
    probes = None
    if args.probe_listen is not None:
        # the probes' own socket and accept queue: plain HTTP, no auth, a few connections
        probe_host, probe_port = args.probe_listen
        probe_limits = replace(limits, max_connections=PROBE_CONNECTIONS)
        probes = Listener(build_probe_app(source), probe_host, probe_port, probe_limits)
        try:
            await _listen(probes, args.probe_listen)
        except InputError:
            await listener.stop(0)
            raise
    return Site(listener, probes)


async def _listen(listener: Listener, address: tuple[str, int]) -> None:
    try:
        await listener.start()
    except OSError as exc:
        host, port = address
        shown = f"{host}:{port}" if host else f":{port}"
        raise InputError(f"cannot listen on {shown}: {exc.strerror or exc}") from None


def ensure_descriptors(max_connections: int) -> None:
    """Enough open files for `max_connections`, the probes' overflow and the process's own
    (NVML, the kubelet, the API server, logs): the soft limit raised towards the hard one
    where it is short, else an InputError. Past the limit, accept fails and scrapes and
    probes time out with nothing said."""
    needed = max_connections + OVERFLOW + DESCRIPTORS_OF_OUR_OWN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft < needed:
            raise InputError(
                f"--web.max-connections={max_connections} needs {needed} open files and the "
                f"limit is {soft} (ulimit -n, hard {hard}): lower the flag or raise the limit"
            )


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (the pod's deletion, or Ctrl-C)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def served_at(args: argparse.Namespace, web_config: WebConfig) -> str:
    """The metrics' URL, for the start's log line."""
    host, port = args.listen
    scheme = "https" if web_config.ssl_context else "http"
    return f"{scheme}://{host or '0.0.0.0'}:{port}{args.telemetry_path}"


async def shut_down(steps: Awaitable[bool]) -> None:
    """Run the shutdown `steps` (stop serving, stop the sources) within SHUTDOWN_SECONDS;
    when they do not finish, or say they did not finish cleanly (a call stuck in the driver
    or the API), exit at once rather than wait on them."""
    try:
        clean = await asyncio.wait_for(steps, SHUTDOWN_SECONDS)
    except TimeoutError:
        log.warning("shutdown did not finish within %.0fs; exiting now", SHUTDOWN_SECONDS)
        clean = False
    if not clean:
        exit_now()


def exit_now() -> NoReturn:
    """Exit 0 at once, logs flushed. A normal exit would wait for the threads stuck in a
    source (the interpreter joins non-daemon ones, asyncio.run its executor's) or run a driver
    library's exit handlers under them; SIGTERM must end the pod within its grace period."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
