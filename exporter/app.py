"""Building and starting the exporter's parts from the parsed `serve` flags.

The data flow, as built here: a sampler (NVML or a simulated scenario) and, when attributing,
the kubelet's pod-resources watcher and the optional Kubernetes watches feed the collection
loop, which renders snapshots that the HTTP server serves. Heavy parts (gRPC, the Kubernetes
client, pydantic) are imported only when the flags turn them on, so a plain GPU node loads
none of them. Bad input met while starting (a web config, a scenario, a port in use) ends in
one line and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter import logs
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.malloc_arenas import cap_arenas
from kube_gpu_exporter.exporter.pci_bus import DEFAULT_SYSFS, PciBus
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop, Sampler
from kube_gpu_exporter.exporter.serve.site import (
    Site,
    ensure_descriptors,
    served_at,
    shut_down,
    start_site,
    stop_on_signals,
)
from kube_gpu_exporter.exporter.serve.web_config import WebConfig, load_web_config

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.attribution.directory import KubeDirectory
    from kube_gpu_exporter.exporter.kubelet.client import PodResourcesClient, PodResourcesWatcher
    from kube_gpu_exporter.exporter.kubernetes.node_status import NodeStatus

log = logging.getLogger(__name__)

EXIT_USAGE = 2
# The process's GIL switch interval, set here and nowhere else: rendering runs on the
# collector thread, and a scrape arriving meanwhile waits out the interval each time it needs
# the GIL back; CPython's 5 ms would add that to a scrape, 1 ms lets the event loop answer
# within about a millisecond of its arrival even while a render is under way.
GIL_SWITCH_SECONDS = 0.001


def _sampler(args: argparse.Namespace) -> Sampler:
    if args.simulate:
        # Imported here: scenario validation (pydantic) is not needed on a GPU node.
        from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
        from kube_gpu_exporter.exporter.simulated.scenario import Scenario

        return SimulatedSampler(Scenario.load(args.simulate), xid_codes=args.xid_codes)
    from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler

    return NvmlSampler(xid_codes=args.xid_codes)


def _pod_resources(
    args: argparse.Namespace,
) -> tuple[PodResourcesClient, PodResourcesWatcher] | None:
    """The kubelet client and its watcher; gRPC is loaded only when attribution is on."""
    socket = args.pod_resources_socket
    if socket is None:
        socket = "" if args.simulate else DEFAULT_SOCKET
    if not socket:
        return None
    from kube_gpu_exporter.exporter.kubelet.client import PodResourcesClient, PodResourcesWatcher

    client = PodResourcesClient(
        os.path.abspath(socket),
        timeout=args.kubelet_timeout,
        resource_patterns=tuple(args.resource_names or DEFAULT_RESOURCE_PATTERNS),
    )
    return client, PodResourcesWatcher(client, args.kubelet_interval)


def _pci_bus(args: argparse.Namespace) -> PciBus | None:
    """The PCI bus under the sysfs root; off with --simulate (the machine's own bus has
    nothing to do with the scenario's GPUs) unless a root is given, and off for ''."""
    sysfs = args.sysfs
    if sysfs is None:
        sysfs = "" if args.simulate else DEFAULT_SYSFS
    return PciBus(Path(sysfs)) if sysfs else None


def _kube_directory(args: argparse.Namespace) -> KubeDirectory | None:
    """The pod and ResourceSlice watches (`kubernetes` is imported only when enabled)."""
    if not args.kubernetes:
        return None
    from kube_gpu_exporter.exporter.attribution.directory import KubeDirectory
    from kube_gpu_exporter.exporter.kubernetes.pods import PodWatcher
    from kube_gpu_exporter.exporter.kubernetes.resource_slices import ResourceSliceWatcher

    labels = [key.strip() for key in args.pod_labels.split(",") if key.strip()]
    pods = PodWatcher(args.node_name, args.kubeconfig, labels=labels)
    slices = ResourceSliceWatcher(args.node_name, args.kubeconfig)
    return KubeDirectory(pods, Path(args.procfs), labels, slices)


def _node_status(args: argparse.Namespace) -> NodeStatus | None:
    """The client of the exporter's own Node, for --health.node-conditions and
    --health.node-taint; a missing node name is bad input."""
    if not (args.health_conditions or args.health_taint):
        return None
    if not args.node_name:
        raise InputError(
            "--health.node-conditions and --health.node-taint need this node's name: "
            "--kubernetes.node-name or $NODE_NAME"
        )
    from kube_gpu_exporter.exporter.kubernetes.client import api_client
    from kube_gpu_exporter.exporter.kubernetes.node_status import NodeStatus

    return NodeStatus(api_client(args.kubeconfig), args.node_name)


async def _serve(
    args: argparse.Namespace,
    web_config: WebConfig,
    sampler: Sampler,
    directory: KubeDirectory | None,
    node_status: NodeStatus | None = None,
) -> None:
    pod_resources = _pod_resources(args)
    attribution = None
    if pod_resources is not None:
        from kube_gpu_exporter.exporter.attribution.source import AttributionSource

        attribution = AttributionSource(pod_resources[1], directory)
    dcgm_compat = None
    if args.dcgm_compat:
        from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat

        # hostname None: the host name; schema: classic, 4.8.3 or 4.9 (the flag's value)
        dcgm_compat = DcgmCompat(hostname=args.node_name or None, schema=args.dcgm_compat)
    health = None
    if node_status is not None:
        from kube_gpu_exporter.exporter.serve.node_health import NodeHealthReporter

        health = NodeHealthReporter(
            node_status,
            lambda: collection.latest.snapshot if collection.latest else None,
            args.interval,
            conditions=args.health_conditions,
            taint_key=args.health_taint,
            heartbeat=args.health_heartbeat,
        )
    collection = CollectionLoop(
        sampler,
        args.interval,
        attribution,
        dcgm_compat,
        _pci_bus(args),
        args.stall_timeout,
        error_sources=(health.errors_total,) if health else (),
    )
    try:
        runner = await start_site(args, web_config, collection)
    except InputError:
        sampler.close()
        raise
    stop = stop_on_signals()
    if pod_resources is not None:
        pod_resources[1].start()
    if directory is not None and attribution is not None:
        directory.start()
    collection.start()
    if health is not None:
        health.start()
    log.info("serving on %s", served_at(args, web_config))
    await stop.wait()
    log.info("shutting down")
    if health is not None:
        await health.stop()
    await shut_down(_shut_down(runner, collection, pod_resources, directory))


async def _shut_down(
    runner: Site,
    collection: CollectionLoop,
    pod_resources: tuple[PodResourcesClient, PodResourcesWatcher] | None,
    directory: KubeDirectory | None,
) -> bool:
    """Stop serving, shut NVML down and stop the watches. False if NVML did not shut down
    cleanly (a call stuck in the driver)."""
    _, clean = await asyncio.gather(runner.cleanup(), collection.stop())
    if pod_resources is not None:
        client, watcher = pod_resources
        await watcher.stop()
        await client.close()
    if directory is not None:
        await asyncio.get_running_loop().run_in_executor(None, directory.stop)
    return clean


def serve(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    sys.setswitchinterval(GIL_SWITCH_SECONDS)  # above
    cap_arenas()  # before any thread starts (malloc_arenas.py)
    try:
        web_config = load_web_config(args.web_config) if args.web_config else WebConfig()
        ensure_descriptors(args.max_connections)
        directory = _kube_directory(args)
        node_status = _node_status(args)
        sampler = _sampler(args)
        asyncio.run(_serve(args, web_config, sampler, directory, node_status))
    except InputError as exc:
        print(f"kube-gpu-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
