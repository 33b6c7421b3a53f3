"""The exporter's DaemonSet, and the identity (names, labels, port) the other manifests refer to.

Every setting that is not obvious carries its reason as a YAML comment in the generated file:
the people who review a DaemonSet asking for hostPID and a hostPath want the why next to it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.kubelet import DEFAULT_SOCKET
from kube_gpu_exporter.rules.config import Config

NAME = "kube-gpu-exporter"  # every object's name; the Service's is Prometheus' job
CONTAINER = "exporter"
PORT = 19400  # the exporter's default (exporter/serve_command.py DEFAULT_PORT; a test ties them)
PORT_NAME = "metrics"
SELECTOR_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "exporter"}
POD_RESOURCES_VOLUME = "pod-resources"
# Inside the container the directory sits where the exporter looks by default, whatever the
# host's kubelet root is.
POD_RESOURCES_MOUNT = str(PurePosixPath(DEFAULT_SOCKET).parent)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MAX_UNAVAILABLE = "10%"
TERMINATION_GRACE_SECONDS = 15
UPDATE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": MAX_UNAVAILABLE}}
PROBE_TIMING = {"periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3}
MALLOC_ARENA_MAX = "2"  # glibc malloc arenas; see _container
POD_SECURITY_CONTEXT = {"seccompProfile": {"type": "RuntimeDefault"}}
SECURITY_CONTEXT = {
    "runAsUser": 0,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def image(cfg: Config) -> str:
    settings = cfg.deployment.image
    return f"{settings.repository}:{settings.tag or __version__}"


def container_args(cfg: Config) -> list[str]:
    """`serve` and its flags, in the form a test parses with the exporter's own CLI parser."""
    args = [
        "serve",
        f"--web.listen-address=:{PORT}",
        "--kubernetes.enabled",
        f"--kubelet.pod-resources-socket={DEFAULT_SOCKET}",
    ]
    if cfg.deployment.per_process_attribution:
        args.append("--path.procfs=/proc")
    # No --collector.xid-codes: the Xid alerts tell a first event by the Xid watch's start,
    # whatever codes they watch, so no code's counter is served at 0 in advance.
    return args


def commented(text: str, notes: Mapping[str, str]) -> str:
    """`text` with each note as a comment above the one line that starts with its anchor.

    PyYAML cannot write comments, so they go in after dumping; an anchor that matches no line
    or several is a bug here, not a silently missing comment.
    """
    lines = text.splitlines(keepends=True)
    for anchor, note in notes.items():
        found = [i for i, line in enumerate(lines) if line.strip().startswith(anchor)]
        if len(found) != 1:
            raise AssertionError(f"note anchor {anchor!r} matches {len(found)} lines")
        line = lines[found[0]]
        indent = " " * (len(line) - len(line.lstrip(" ")))
        prefix = f"{indent}# "
        comment = textwrap.fill(
            note, 100, initial_indent=prefix, subsequent_indent=prefix, break_on_hyphens=False
        )
        lines[found[0]] = f"{comment}\n{line}"
    return "".join(lines)


def node_affinity(cfg: Config) -> dict[str, Any]:
    settings = cfg.deployment.node_affinity
    expression: dict[str, Any] = {"key": settings.key, "operator": "Exists"}
    if settings.values:
        expression = {"key": settings.key, "operator": "In", "values": list(settings.values)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }


def tolerations(cfg: Config) -> list[dict[str, str]]:
    out = [GPU_TOLERATION]
    for toleration in cfg.deployment.extra_tolerations:
        fields = toleration.model_dump()
        out.append({key: value for key, value in fields.items() if value})
    return out


def _probe(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}, **PROBE_TIMING}


def _container(cfg: Config) -> dict[str, Any]:
    resources = cfg.deployment.resources
    return {
        "name": CONTAINER,
        "image": image(cfg),
        "imagePullPolicy": "IfNotPresent",
        "args": container_args(cfg),
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
            # glibc gives each thread that mallocs an arena of its own; two are enough for
            # the event loop and the watch threads, and hold less memory
            # (docs/architecture.md, "Deployment").
            {"name": "MALLOC_ARENA_MAX", "value": MALLOC_ARENA_MAX},
        ],
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/healthz"),
        "readinessProbe": _probe("/readyz"),
        "resources": {
            "requests": resources.requests.model_dump(),
            "limits": resources.limits.model_dump(),
        },
        "securityContext": SECURITY_CONTEXT,
        "volumeMounts": [
            {"name": POD_RESOURCES_VOLUME, "mountPath": POD_RESOURCES_MOUNT, "readOnly": True}
        ],
    }


def daemonset_dict(cfg: Config) -> dict[str, Any]:
    settings = cfg.deployment
    pod: dict[str, Any] = {"serviceAccountName": NAME, "priorityClassName": "system-node-critical"}
    if settings.runtime_class_name:
        pod["runtimeClassName"] = settings.runtime_class_name
    if settings.per_process_attribution:
        pod["hostPID"] = True
    pod |= {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": POD_SECURITY_CONTEXT,
        "affinity": node_affinity(cfg),
        "tolerations": tolerations(cfg),
        "containers": [_container(cfg)],
        "volumes": [
            {
                "name": POD_RESOURCES_VOLUME,
                "hostPath": {"path": settings.pod_resources_dir, "type": "Directory"},
            }
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": settings.namespace, "labels": SELECTOR_LABELS},
        "spec": {
            "selector": {"matchLabels": SELECTOR_LABELS},
            "updateStrategy": UPDATE_STRATEGY,
            "template": {"metadata": {"labels": SELECTOR_LABELS}, "spec": pod},
        },
    }


# Anchor (the start of a generated line) → why that line is there.
NOTES = {
    "updateStrategy:": (
        "10% of the nodes at a time (rounded up, so at least one): an exporter holds no state "
        "and is back within seconds, so a rollout costs each node a scrape or two, while a "
        "large fleet still rolls in about ten steps. Not maxSurge: a surge pod that never gets "
        "ready (NVML down on its node) would leave that node on the old version for good."
    ),
    "priorityClassName:": (
        "Scheduled even on a full GPU node (it may preempt a lower-priority pod) and evicted "
        "last under node pressure, when the node's metrics matter most. See resourcequota.yaml."
    ),
    "runtimeClassName:": (
        "The GPU Operator's runtime, whose NVIDIA container toolkit injects libnvidia-ml and "
        "the device nodes; set deployment.runtime_class_name to '' where NVIDIA's runtime is "
        "the node's default."
    ),
    "hostPID:": (
        "Per-process attribution (deployment.per_process_attribution): NVML names the "
        "processes on a GPU by host PID, and the exporter reads /proc/<pid>/cgroup to tie each "
        "process on a shared (time-sliced, MPS) GPU to its pod, which needs the host PID "
        "namespace. Without it, per-pod usage of shared GPUs is absent; the rest is unchanged."
    ),
    "terminationGracePeriodSeconds:": (
        "On SIGTERM the exporter stops at once; its waits are bounded (NVML shutdown 5 s, each "
        "API watch 2 s), well inside this."
    ),
    "- name: NVIDIA_VISIBLE_DEVICES": (
        "The toolkit injects libnvidia-ml and every GPU's device node without the pod "
        "requesting a GPU (which would take one from the workloads); 'utility' is the "
        "capability NVML needs, and nothing more."
    ),
    "readinessProbe:": (
        "503 while NVML does not answer; the Service publishes not-ready addresses so that "
        "Prometheus still scrapes kube_gpu_exporter_nvml_up 0."
    ),
    "runAsUser: 0": (
        "The kubelet's pod-resources socket is owned by root and not writable by others; "
        "connecting needs root, but no capability: every one is dropped."
    ),
    "volumeMounts:": (
        "Only the kubelet's pod-resources directory. The exporter also reads /sys to count the "
        "GPUs on the PCI bus (nvidia_gpu_node_pci_gpus, which the GPUMissing alert compares "
        "with NVML's list), but that needs no mount: the runtime mounts the host's sysfs "
        "read-only into every container, and PCI devices are not namespaced."
    ),
    "hostPath:": (
        "The directory, not the socket: a restarted kubelet replaces the socket file, which "
        "a file mount would keep pointing at the old one. 'Directory' fails the mount if the "
        "kubelet root differs (deployment.pod_resources_dir) instead of attributing nothing."
    ),
}


def daemonset_notes(cfg: Config) -> dict[str, str]:
    """The notes that apply to this config's DaemonSet (an absent line has no note)."""
    notes = dict(NOTES)
    if not cfg.deployment.per_process_attribution:
        del notes["hostPID:"]
    if not cfg.deployment.runtime_class_name:
        del notes["runtimeClassName:"]
    return notes
