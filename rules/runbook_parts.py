"""What a runbook section is made of, and the snippets several sections share.

Every alert's spec (rules/alerts/) writes its `Runbook` for the on-call engineer who was paged:
what the alert means, what it costs if ignored, how to confirm it (PromQL to paste into
Prometheus, kubectl to run) and how to fix it. rules/runbooks.py renders them into
docs/runbooks.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.promql import Query


@dataclass(frozen=True, slots=True)
class Runbook:
    meaning: str
    impact: str
    diagnosis: str  # markdown, with PromQL and kubectl blocks
    mitigation: str


def promql(*lines: str) -> str:
    return "```promql\n" + "\n".join(lines) + "\n```"


def sh(*lines: str) -> str:
    return "```sh\n" + "\n".join(lines) + "\n```"


def find_node(q: Query) -> str:
    """How to go from the alert's node label to a Kubernetes node name."""
    if q.node_label == "instance":
        return (
            "The alert's `instance` label is the node's name when the exporter is scraped "
            "through the generated ServiceMonitor (it relabels the node name into `instance`): "
            "`NODE=<instance>`. With another scrape config it is the exporter pod's address "
            "(`IP:port`); the exporter runs on the node it reports, so its pod gives the node:\n\n"
            + sh(
                "NODE=$(kubectl get pods -A -o wide --field-selector status.podIP=<ip> \\",
                "  -o jsonpath='{.items[0].spec.nodeName}')",
            )
        )
    return f"The alert's `{q.node_label}` label names the node: `NODE=<{q.node_label}>`."


def on_node(*commands: str) -> str:
    """`commands` run on the node's host, each through a debug pod."""
    lines: list[str] = []
    for command in commands:
        lines += (
            "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- \\",
            f"  chroot /host {command}",
        )
    return sh(*lines)


NODE_GPUS = sh(
    "kubectl debug node/$NODE -it --profile=sysadmin --image=ubuntu -- chroot /host nvidia-smi"
)
GPU_PODS = sh(
    "kubectl get pods -A --field-selector spec.nodeName=$NODE -o wide",
    "kubectl describe node $NODE | grep -A12 'Allocated resources'",
)
KERNEL_LOG = on_node("journalctl -k --since -1h | grep -i xid")
DRAIN = sh(
    "kubectl cordon $NODE",
    "kubectl drain $NODE --ignore-daemonsets --delete-emptydir-data",
)
EXPORTER_LOGS = sh(
    "kubectl get pods -A -l app.kubernetes.io/name=kube-gpu-exporter -o wide",
    "kubectl logs -n <namespace> <exporter pod> --tail=100",
)


def who(q: Query) -> str:
    """Which pods hold the alert's device, as PromQL."""
    alloc = q.sel(c.ALLOCATION_INFO, f'{q.node_label}="<{q.node_label}>"', 'uuid="<uuid>"')
    return f"Which pods hold the device:\n\n{promql(alloc)}"
