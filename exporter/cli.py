"""Command line: flags and dispatch only, in the Prometheus exporter style.

`serve` runs the exporter (app.py builds and starts its parts), `cluster` the cluster view's
exporter (cluster_app.py), `generate` writes the rules,
dashboards and manifests (exporter/generate/), `demo` runs the demo stack (demo/), `report`
writes the GPU efficiency report (exporter/report/). This module
sits on top of all of them. Every bad input ends in one line on stderr and exit status 2,
never a traceback: an operator reading `kubectl logs` of a crash-looping pod should see what
to fix at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from kube_gpu_exporter.demo import run as demo_cli
from kube_gpu_exporter.exporter import __version__, app, cluster_app, help_text, logs
from kube_gpu_exporter.exporter.catalog.xid import WATCHED_XIDS
from kube_gpu_exporter.exporter.cluster.explain import command as explain_cli
from kube_gpu_exporter.exporter.exposition.dcgm_fields import SCHEMAS as DCGM_SCHEMAS
from kube_gpu_exporter.exporter.generate import command as generate_cli
from kube_gpu_exporter.exporter.input_errors import one_line, quoted
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.pci_bus import DEFAULT_SYSFS
from kube_gpu_exporter.exporter.report import command as report_cli
from kube_gpu_exporter.exporter.serve.flags import (
    RESERVED_PATHS,
    add_web_flags,
    duration_flag,
    interval,
    positive_duration,
)
from kube_gpu_exporter.exporter.units import OutOfRange, parse_int

# 9100-9999 (the Prometheus exporter range) is fully allocated; 9400 is dcgm-exporter's and
# 9835 nvidia_gpu_exporter's. 19400 sits outside the range, clear of the kubelet's 10250-10259.
DEFAULT_PORT = 19400
EXIT_USAGE = 2
__all__ = ["DEFAULT_PORT", "RESERVED_PATHS", "build_parser", "main"]
# What `--help` says above the commands, and below them.
DESCRIPTION = """\
kube-gpu-exporter: a Prometheus exporter for NVIDIA GPUs on Kubernetes. It serves each GPU's
health and usage with the pod that holds it, the cluster's GPU capacity and why GPU pods wait,
and writes the alert rules, dashboards and manifests that go with them.
"""
EPILOG = """\
`kube-gpu-exporter <command> --help` shows what a command does and its flags. Bad input (a flag,
a file, a server that cannot be reached) is one line on stderr and exit status 2.
"""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", help_text.ParagraphFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse quotes the value whole ("invalid choice: '<4 MiB>'"): bounded, one line.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see --help)\n")


def sysfs_root(value: str) -> str:
    """A sysfs mount, or "" for none. A typo fails at start; a sysfs that later cannot be read
    only leaves its series absent (pci_bus.py), so a hidden /sys never stops the exporter."""
    if value and not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"not a directory: {value!r}")
    return value


def xid_codes(value: str) -> tuple[int, ...]:
    """`48,79,94` → (48, 79, 94); "" for none. Xid codes have three digits today."""
    words = [w.strip() for w in value.split(",") if w.strip()]
    try:
        return tuple(sorted({parse_int(w, 1, 9999, "Xid code") for w in words}))
    except OutOfRange as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of Xid codes: {quoted(value)}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kube-gpu-exporter",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=help_text.CommandListFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="command", required=True, parser_class=_Parser
    )

    serve = commands.add_parser(
        "serve",
        help="serve the node's GPU metrics to Prometheus",
        description="Reads every GPU through NVML (or plays a --simulate scenario), names the "
        "pod holding each device from the kubelet, and answers scrapes on --web.listen-address.",
    )
    add_web_flags(serve, DEFAULT_PORT)
    duration_flag(
        serve,
        "--collector.interval",
        "interval",
        10.0,
        "how often to read the GPUs, e.g. 5s; at least 100ms",
        parse=interval,
    )
    serve.add_argument(
        "--collector.stall-timeout",
        dest="stall_timeout",
        type=positive_duration,
        default=None,
        metavar="DURATION",
        help="a collection cycle unfinished after this long means NVML is stuck: nvml_up 0, "
        "/readyz 503 and a stalled error until it answers, the last data still served "
        "(default 3 intervals, at least 30s)",
    )
    serve.add_argument(
        "--collector.xid-codes",
        dest="xid_codes",
        type=xid_codes,
        default=WATCHED_XIDS,
        metavar="CODES",
        help="Xid codes whose counters exist at 0 on every GPU from the start, so that "
        "increase() sees a first event and a restart shows as a reset; others appear at their "
        f"first event (default: the alerts' codes, {','.join(map(str, WATCHED_XIDS))})",
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
    duration_flag(
        kubelet,
        "--kubelet.interval",
        "kubelet_interval",
        10.0,
        "how often to ask the kubelet which pod holds which device; at least 100ms",
        parse=interval,
    )
    duration_flag(
        kubelet,
        "--kubelet.timeout",
        "kubelet_timeout",
        5.0,
        "how long one pod-resources call may take",
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
    serve.add_argument(
        "--path.sysfs",
        dest="sysfs",
        type=sysfs_root,
        metavar="PATH",
        help="sysfs mount, to count the NVIDIA GPUs on the PCI bus whether or not NVML lists "
        f"them; '' turns it off (default {DEFAULT_SYSFS}; off with --simulate unless given)",
    )
    compat = serve.add_argument_group("compatibility (docs/migrating-from-dcgm-exporter.md)")
    compat.add_argument(
        "--compat.dcgm-exporter",
        dest="dcgm_compat",
        nargs="?",
        const=DCGM_SCHEMAS[0],
        default=None,
        choices=DCGM_SCHEMAS,
        metavar="SCHEMA",
        help="also serve dcgm-exporter's metric names, units and labels (DCGM_FI_*, the host "
        "label from --kubernetes.node-name or the host name) beside ours, for dashboard 12239 "
        "and existing alerts during a migration; SCHEMA is the dcgm-exporter they are written "
        f"for: {', '.join(DCGM_SCHEMAS)} (the flag alone: {DCGM_SCHEMAS[0]}, up to 4.8.2)",
    )
    compat.add_argument(
        "--no-compat.dcgm-exporter",
        dest="dcgm_compat",
        action="store_const",
        const=None,
        help="serve only our own names (the default)",
    )
    logs.add_flags(serve)

    generate = commands.add_parser(
        "generate",
        help="write the alert rules, promtool tests, runbooks and dashboards",
        description=generate_cli.WHERE,
    )
    generate_cli.add_arguments(generate)

    demo = commands.add_parser(
        "demo",
        help="run a simulated GPU node with its kubelet, Prometheus and Alertmanager",
    )
    demo_cli.add_arguments(demo)
    explain_cli.register(commands)
    cluster_app.register(commands)
    report_cli.register(commands)
    help_text.open_with_summaries(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return app.serve(args)
    if args.command == "generate":
        return int(generate_cli.run(args))
    if args.command == "demo":
        return demo_cli.run(args)
    if args.command == "explain":
        return explain_cli.run(args)
    if args.command == "cluster":
        return cluster_app.run(args)
    if args.command == "report":
        return report_cli.run(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
