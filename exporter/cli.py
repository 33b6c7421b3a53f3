"""Command line: flags only, in the Prometheus exporter style.

Every bad input ends in one line on stderr and exit status 2, never a traceback: an operator
reading `kubectl logs` of a crash-looping pod should see what to fix at once.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from aiohttp import web

from . import __version__, logs
from .collection import CollectionLoop, Sampler
from .scenario import Scenario, ScenarioError
from .server import PROBE_PATHS, build_app
from .units import parse_duration
from .webconfig import WebConfig, WebConfigError, load_web_config, web_middlewares

log = logging.getLogger(__name__)

# 9100-9999 (the Prometheus exporter range) is fully allocated; 9400 is dcgm-exporter's and
# 9835 nvidia_gpu_exporter's. 19400 sits outside the range, clear of the kubelet's 10250-10259.
DEFAULT_PORT = 19400
EXIT_USAGE = 2


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
    serve.add_argument("--log.level", dest="log_level", choices=list(logs.LEVELS), default="info")
    serve.add_argument("--log.format", dest="log_format", choices=logs.FORMATS, default="logfmt")
    return parser


def _sampler(args: argparse.Namespace) -> Sampler:
    if args.simulate:
        from .simulated import SimulatedSampler

        return SimulatedSampler(Scenario.load(args.simulate))
    from .nvml_sampler import NvmlSampler

    return NvmlSampler()


async def _serve(args: argparse.Namespace, web_config: WebConfig, sampler: Sampler) -> None:
    collection = CollectionLoop(sampler, args.interval)
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
    collection.start()
    scheme = "https" if web_config.ssl_context else "http"
    log.info("serving on %s://%s:%d%s", scheme, host or "0.0.0.0", port, args.telemetry_path)
    await stop.wait()
    log.info("shutting down")
    await runner.cleanup()
    await collection.stop()


def serve(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        web_config = load_web_config(args.web_config) if args.web_config else WebConfig()
        sampler = _sampler(args)
        asyncio.run(_serve(args, web_config, sampler))
    except (UsageError, ScenarioError, WebConfigError) as exc:
        print(f"kube-gpu-exporter: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
