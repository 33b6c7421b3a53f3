"""`kube-gpu-exporter cluster`: the cluster view's exporter, one replica per cluster.

It watches every node, active pod and ResourceQuota, the FailedCreate events and, where
Kueue is installed, its Workloads and LocalQueues (cluster/watches.py), builds the view on
its own interval (serve/cluster_loop.py) and serves the result through the same stack as
`serve` (serve/site.py: web flags, TLS and basic auth from the web config, limits), on its
own port, 19401 by default, so that it can run beside a node exporter on one host. The
kubernetes client is imported only when the command runs. Bad input (flags, a web config,
a kubeconfig, a port in use) is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Final

from kube_gpu_exporter.exporter import logs
from kube_gpu_exporter.exporter.cluster.flags import add_gpu_flags
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import add_flags as kubeconfig_flags
from kube_gpu_exporter.exporter.malloc_arenas import cap_arenas
from kube_gpu_exporter.exporter.serve.flags import add_web_flags, duration_flag, interval

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 19401  # the node exporter's 19400 plus one
EXIT_USAGE: Final = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`cluster`'s flags on its parser."""
    add_web_flags(parser, DEFAULT_PORT)
    duration_flag(
        parser,
        "--cluster.interval",
        "interval",
        15.0,
        "how often to rebuild the view from the watched objects; at least 100ms",
        parse=interval,
    )
    kubeconfig_flags(parser)
    add_gpu_flags(parser, "cluster.")
    logs.add_flags(parser)


# The process's GIL switch interval, set here and nowhere else. The view's cycle is pure
# Python for up to a second on a large cluster, in its own thread, and the watches' parsing
# holds the GIL too; a scrape arriving meanwhile takes the GIL about three times (woken by
# epoll, after the read, after the write) and each time waits out the interval: CPython's
# 5 ms made that up to 15 ms a scrape. A short interval interrupts the cycle more often only
# while another thread wants the GIL. Measured: bench/README.md, "GIL switch interval".
SWITCH_INTERVAL: Final = 0.0002  # seconds


def run(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    cap_arenas()  # before any thread starts (malloc_arenas.py)
    try:
        asyncio.run(_serve(args))
    except InputError as exc:
        print(f"kube-gpu-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


async def _serve(args: argparse.Namespace) -> None:
    from kube_gpu_exporter.exporter.cluster.flags import settings_from
    from kube_gpu_exporter.exporter.cluster.quota_events import QuotaRejections
    from kube_gpu_exporter.exporter.cluster.transitions import Transitions
    from kube_gpu_exporter.exporter.cluster.watches import ClusterWatches
    from kube_gpu_exporter.exporter.serve.cluster_loop import ClusterLoop
    from kube_gpu_exporter.exporter.serve.site import (
        ensure_descriptors,
        served_at,
        shut_down,
        start_site,
        stop_on_signals,
    )
    from kube_gpu_exporter.exporter.serve.web_config import WebConfig, load_web_config

    web_config = load_web_config(args.web_config) if args.web_config else WebConfig()
    ensure_descriptors(args.max_connections)
    settings = settings_from(args)
    sys.setswitchinterval(SWITCH_INTERVAL)  # above
    transitions = Transitions(settings)
    rejections = QuotaRejections(settings)
    watches = ClusterWatches(
        args.kubeconfig, settings, observe=transitions.observe, rejections=rejections
    )
    loop = ClusterLoop(watches, settings, args.interval, transitions, rejections=rejections)
    try:
        runner = await start_site(args, web_config, loop)
    except InputError:
        watches.stop()
        raise
    stop = stop_on_signals()
    watches.start()
    loop.start()
    log.info("serving the cluster view on %s", served_at(args, web_config))
    await stop.wait()
    log.info("shutting down")

    async def steps() -> bool:
        await asyncio.gather(runner.cleanup(), loop.stop())
        await asyncio.get_running_loop().run_in_executor(None, watches.stop)
        return True

    await shut_down(steps())
