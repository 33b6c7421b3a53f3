"""Command line: flags only, in the Prometheus exporter style.

Every bad input ends in one line on stderr and exit status 2, never a traceback: an operator
reading `kubectl logs` of a crash-looping pod should see what to fix at once.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from aiohttp import web

from kube_gpu_exporter.demo import run as demo_cli
from kube_gpu_exporter.exporter import __version__, logs
from kube_gpu_exporter.exporter.generate import command as generate_cli
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubelet.defaults import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop, Sampler
from kube_gpu_exporter.exporter.serve.server import PROBE_PATHS, build_app
from kube_gpu_exporter.exporter.serve.web_config import WebConfig, load_web_config, web_middlewares
from kube_gpu_exporter.exporter.units import parse_duration

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.attribution.directory import KubeDirectory
    from kube_gpu_exporter.exporter.kubelet.client import PodResourcesClient, PodResourcesWatcher

log = logging.getLogger(__name__)

# 9100-9999 (the Prometheus exporter range) is fully allocated; 9400 is dcgm-exporter's and
# 9835 nvidia_gpu_exporter's. 19400 sits outside the range, clear of the kubelet's 10250-10259.
DEFAULT_PORT = 19400
EXIT_USAGE = 2
GIL_SWITCH_SECONDS = 0.001


class UsageError(Exception):
    """Bad input from the operator: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def listen_address(value: str) -> tuple[str, int]:
    """`host:port`, `:port` or `[v6]:port` → (host, port); an empty host means every address."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a listen address: {value!r} (use host:port)")
    host = host.removeprefix("[").removesuffix("]")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a listen address: {value!r}") from None
    return host, int(port_text)


def positive_duration(value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value!r}")
    return seconds


def telemetry_path(value: str) -> str:
    if not value.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with '/': {value!r}")
    return value


def non_negative_int(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {value!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kube-gpu-exporter", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="serve the node's GPU metrics to Prometheus")
    serve.add_argument(
        "--web.listen-address",
        dest="listen",
        type=listen_address,
        default=("", DEFAULT_PORT),
        metavar="HOST:PORT",
        help=f"address to serve on (default :{DEFAULT_PORT})",
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
        "--collector.interval",
        dest="interval",
        type=positive_duration,
        default=10.0,
        metavar="DURATION",
        help="how often to read the GPUs, e.g. 5s (default 10s)",
    )
    serve.add_argument(
        "--simulate",
        metavar="SCENARIO.yaml",
        help="play a scenario file instead of reading NVML (for machines without a GPU)",
    )
    kubelet = serve.add_argument_group("pod attribution (kubelet pod-resources API)")
    kubelet.add_argument(
        "--kubelet.pod-resources-socket",
        dest="pod_resources_socket",
        metavar="PATH",
        help=f"the kubelet's pod-resources socket; '' turns attribution off "
        f"(default {DEFAULT_SOCKET}; off with --simulate unless given)",
    )
    kubelet.add_argument(
        "--kubelet.interval",
        dest="kubelet_interval",
        type=positive_duration,
        default=10.0,
        metavar="DURATION",
        help="how often to ask the kubelet which pod holds which device (default 10s)",
    )
    kubelet.add_argument(
        "--kubelet.timeout",
        dest="kubelet_timeout",
        type=positive_duration,
        default=5.0,
        metavar="DURATION",
        help="how long one pod-resources call may take (default 5s)",
    )
    kubelet.add_argument(
        "--kubelet.resource-name",
        dest="resource_names",
        action="append",
        metavar="PATTERN",
        help="extended resource names to attribute, as shell patterns; repeatable "
        f"(default {', '.join(DEFAULT_RESOURCE_PATTERNS)})",
    )
    kube = serve.add_argument_group("Kubernetes API (owners, pod labels, shared-GPU split)")
    kube.add_argument(
        "--kubernetes.enabled",
        dest="kubernetes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="watch this node's pods: owner and label allowlist on allocations, and the "
        "per-process split of shared GPUs (needs hostPID)",
    )
    kube.add_argument(
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        metavar="FILE",
        help="kubeconfig to use instead of the in-cluster service account",
    )
    kube.add_argument(
        "--kubernetes.node-name",
        dest="node_name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default $NODE_NAME, set from the downward API)",
    )
    kube.add_argument(
        "--kubernetes.pod-labels",
        dest="pod_labels",
        default="",
        metavar="KEY,...",
        help="pod labels copied onto nvidia_gpu_allocation_info as label_<key>",
    )
    serve.add_argument(
        "--path.procfs",
        dest="procfs",
        default="/proc",
        metavar="PATH",
        help="procfs mount, to tie processes to containers (default /proc)",
    )
    compat = serve.add_argument_group("compatibility (docs/migrating-from-dcgm-exporter.md)")
    compat.add_argument(
        "--compat.dcgm-exporter",
        dest="dcgm_compat",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also serve dcgm-exporter's metric names, units and labels (DCGM_FI_DEV_*, "
        "Hostname from --kubernetes.node-name or the host name) beside ours, for dashboard "
        "12239 and existing alerts during a migration",
    )
    serve.add_argument("--log.level", dest="log_level", choices=list(logs.LEVELS), default="info")
    serve.add_argument("--log.format", dest="log_format", choices=logs.FORMATS, default="logfmt")

    generate = commands.add_parser(
        "generate",
        help="write the alert rules, promtool tests, runbooks and dashboards",
    )
    generate_cli.add_arguments(generate)

    demo = commands.add_parser(
        "demo",
        help="run a simulated GPU node with its kubelet, Prometheus and Alertmanager",
    )
    demo_cli.add_arguments(demo)
    return parser


def _sampler(args: argparse.Namespace) -> Sampler:
    if args.simulate:
        # Imported here: scenario validation (pydantic) is not needed on a GPU node.
        from kube_gpu_exporter.exporter.simulated.sampler import SimulatedSampler
        from kube_gpu_exporter.exporter.simulated.scenario import Scenario

        return SimulatedSampler(Scenario.load(args.simulate))
    from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler

    return NvmlSampler()


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


def _kube_directory(args: argparse.Namespace) -> KubeDirectory | None:
    """The pod and ResourceSlice watches (`kubernetes` is imported only when enabled)."""
    if not args.kubernetes:
        return None
    from kube_gpu_exporter.exporter.attribution.directory import KubeDirectory
    from kube_gpu_exporter.exporter.kubernetes.pods import PodWatcher
    from kube_gpu_exporter.exporter.kubernetes.resource_slices import ResourceSliceWatcher

    labels = [key.strip() for key in args.pod_labels.split(",") if key.strip()]
    pods = PodWatcher(args.node_name, args.kubeconfig)
    slices = ResourceSliceWatcher(args.node_name, args.kubeconfig)
    return KubeDirectory(pods, Path(args.procfs), labels, slices)


async def _serve(
    args: argparse.Namespace,
    web_config: WebConfig,
    sampler: Sampler,
    directory: KubeDirectory | None,
) -> None:
    pod_resources = _pod_resources(args)
    attribution = None
    if pod_resources is not None:
        from kube_gpu_exporter.exporter.attribution.source import AttributionSource

        attribution = AttributionSource(pod_resources[1], directory)
    dcgm_compat = None
    if args.dcgm_compat:
        from kube_gpu_exporter.exporter.exposition.dcgm_compat import DcgmCompat

        dcgm_compat = DcgmCompat(hostname=args.node_name or None)  # None: the host name
    collection = CollectionLoop(sampler, args.interval, attribution, dcgm_compat)
    middlewares = web_middlewares(web_config, public_paths=PROBE_PATHS)
    app = build_app(collection, args.telemetry_path, args.max_requests, middlewares)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    host, port = args.listen
    site = web.TCPSite(runner, host or None, port, ssl_context=web_config.ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        sampler.close()
        shown = f"{host}:{port}" if host else f":{port}"
        raise UsageError(f"cannot listen on {shown}: {exc.strerror or exc}") from None

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if pod_resources is not None:
        pod_resources[1].start()
    if directory is not None and attribution is not None:
        directory.start()
    collection.start()
    scheme = "https" if web_config.ssl_context else "http"
    log.info("serving on %s://%s:%d%s", scheme, host or "0.0.0.0", port, args.telemetry_path)
    await stop.wait()
    log.info("shutting down")
    await runner.cleanup()
    await collection.stop()
    if pod_resources is not None:
        client, watcher = pod_resources
        await watcher.stop()
        await client.close()
    if directory is not None:
        await asyncio.get_running_loop().run_in_executor(None, directory.stop)


def serve(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    # Rendering runs on the collector thread; a short GIL switch interval lets the event loop
    # answer scrapes within ~1 ms of their arrival even while a render is under way.
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    try:
        web_config = load_web_config(args.web_config) if args.web_config else WebConfig()
        directory = _kube_directory(args)
        sampler = _sampler(args)
        asyncio.run(_serve(args, web_config, sampler, directory))
    except (UsageError, InputError) as exc:
        print(f"kube-gpu-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "generate":
        return int(generate_cli.run(args))
    if args.command == "demo":
        return demo_cli.run(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
