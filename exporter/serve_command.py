"""`kube-gpu-exporter serve`'s flags: NVML or a scenario, the kubelet, the Kubernetes API,
the web server and the dcgm-exporter compatibility names.

Its own module, beside app.py (which builds the parts from these flags), so that the CLI
defines `serve` without loading another command's code, and `serve --help` loads nothing of
what serving does.
"""

from __future__ import annotations

import argparse
import os
import re

from kube_gpu_exporter.exporter import logs
from kube_gpu_exporter.exporter.exposition.dcgm_fields import SCHEMAS as DCGM_SCHEMAS
from kube_gpu_exporter.exporter.input_errors import quoted
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.kubernetes.kubeconfig_choice import add_flags as kubeconfig_flags
from kube_gpu_exporter.exporter.pci_bus import DEFAULT_SYSFS
from kube_gpu_exporter.exporter.serve.flags import (
    add_web_flags,
    duration_flag,
    interval,
    positive_duration,
)
from kube_gpu_exporter.exporter.units import OutOfRange, parse_int

# 9100-9999 (the Prometheus exporter range) is fully allocated; 9400 is dcgm-exporter's and
# 9835 nvidia_gpu_exporter's. 19400 sits outside the range, clear of the kubelet's 10250-10259.
DEFAULT_PORT = 19400


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


# --health.node-taint's key without a value; the heartbeat is node-problem-detector's default.
DEFAULT_TAINT = "nvidia.com/gpu-needs-reset"
DEFAULT_HEARTBEAT = 300.0
_TAINT_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def taint_key(value: str) -> str:
    """A taint key: a label key, `[prefix/]name` (name up to 63 characters)."""
    if not _TAINT_KEY.fullmatch(value) or len(value.partition("/")[0]) > 253:
        raise argparse.ArgumentTypeError(f"not a taint key: {quoted(value)}")
    return value


def heartbeat(value: str) -> float:
    """A duration, or 0 for no heartbeat (the condition is written only when it changes)."""
    return 0.0 if value.strip() in ("0", "0s") else positive_duration(value)


def add_health_flags(serve: argparse.ArgumentParser) -> None:
    """The opt-in writes of GPU health on the exporter's own Node (docs/gpu-health.md)."""
    health = serve.add_argument_group(
        "GPU health on this node's Node object (opt-in; docs/gpu-health.md)"
    )
    health.add_argument(
        "--health.node-conditions",
        dest="health_conditions",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="set the condition GPUHealthy on this node's Node (patch nodes/status): True when "
        "every GPU's recovery action is none, False with the most severe action asked "
        "(ResetGPU, RebootNode, ...) as reason, Unknown where NVML cannot say; needs "
        "--kubernetes.node-name and the chart's health.nodeConditions RBAC",
    )
    health.add_argument(
        "--health.node-taint",
        dest="health_taint",
        nargs="?",
        const=DEFAULT_TAINT,
        default=None,
        type=taint_key,
        metavar="KEY",
        help="also taint the Node NoSchedule with KEY while a GPU needs a reset or a reboot, "
        f"untainted when all are healthy (the flag alone: {DEFAULT_TAINT}; patch nodes)",
    )
    health.add_argument(
        "--health.heartbeat-interval",
        dest="health_heartbeat",
        type=heartbeat,
        default=DEFAULT_HEARTBEAT,
        metavar="DURATION",
        help="write the unchanged condition again this often, a new lastHeartbeatTime; 0 for "
        f"only on change (default {DEFAULT_HEARTBEAT:g}s)",
    )


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """`serve`'s description and flags on its parser."""
    serve.description = (
        "Reads every GPU through NVML (or plays a --simulate scenario), names the pod holding "
        "each device from the kubelet, and answers scrapes on --web.listen-address."
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
        default=(),
        metavar="CODES",
        help="Xid codes whose counters exist at 0 on every watched GPU (one whose Xid events "
        "NVML registers) from the start, for queries of your own that need increase() to see a "
        "first event (default none: every code's counter appears at its first event; the "
        "alerts tell a first event by the Xid watch's start and need no zeros)",
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
    kubeconfig_flags(kube)
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
    add_health_flags(serve)
    logs.add_flags(serve)
