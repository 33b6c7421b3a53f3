"""A 2,000-node GPU cluster as the API server returns it, for the cluster view's bench.

Built on the tests' builders (tests/fakes/cluster_objects.py: the GPU-relevant fields the view
reads) and dressed as real objects are: pods with a sidecar and an init container, twenty-odd
environment variables, volumes, probes, owner references and a full status (4-6 KiB of JSON
each), nodes with the labels GPU feature discovery and the cloud put there, conditions and
addresses. The view keeps a few hundred bytes of each, so its memory must not follow this
bulk: the bench reports the raw JSON beside the process's VmRSS.

The pools are chosen so that each pending reason the view reports has its pods:

- H100: every node runs 4 + 2 + 1 GPUs, one free each, so 2-GPU pods are `fragmented`;
- A100: full (4 + 4), so 8-GPU pods pinned to A100 are `insufficient_gpus` (no node anywhere
  has 8 free) and 1-GPU pods pinned to A100 are `gpu_type_unavailable` (H100s have room);
- L40S: tainted `dedicated=inference`, half used by pods that tolerate it, so 4-GPU pods
  pinned to L40S without the toleration are `taint_not_tolerated`;
- A100 MIG-only (`nvidia.com/mig-1g.10gb`), and CPU nodes for the system pods.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any

import fake  # noqa: F401  (puts tests/fakes on sys.path)

from cluster_objects import (
    A100,
    GPU_TAINT,
    GPU_TOLERATION,
    H100,
    PRODUCT,
    make_gpu_pod,
    make_node,
    make_quota,
)

L40S = "NVIDIA-L40S"
MIG = "nvidia.com/mig-1g.10gb"
INFERENCE_TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}
INFERENCE_TOLERATION = {**INFERENCE_TAINT, "operator": "Equal"}
NOT_READY = [
    {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute"}
    for t in ("not-ready", "unreachable")
]
TEAMS = 40  # namespaces of GPU pods, one GPU ResourceQuota each
SERVICES = 200  # namespaces of the other pods
# (pool, nodes, product, GPU pods per node), in node order
POOLS = (("h100", 1100, H100, (4, 2, 1)), ("a100", 500, A100, (4, 4)), ("l40s", 300, L40S, (4,)))
MIG_NODES, CPU_NODES = 50, 50
PENDING = (  # (reason, pods, GPUs, nodeSelector product)
    ("fragmented", 100, 2, H100),
    ("insufficient", 70, 8, A100),
    ("wrong-type", 70, 1, A100),
    ("tainted", 60, 4, L40S),
)
TOTAL_PODS = 50_000


@dataclass
class Fleet:
    """The objects, and what the churn works on."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    quotas: list[dict[str, Any]] = field(default_factory=list)
    free_h100: list[str] = field(default_factory=list)  # one free GPU on each of these nodes

    @property
    def gpu_pods(self) -> int:
        return sum(1 for p in self.pods if p["metadata"]["labels"].get("gpu") == "true")

    @property
    def pending_gpu_pods(self) -> int:
        return sum(1 for p in self.pods if not p["spec"].get("nodeName"))


def node(name: str, pool: str, index: int) -> dict[str, Any]:
    """A node of `pool` (h100, a100, l40s, mig or cpu) as a managed cloud serves it."""
    zone = f"us-east-1{'abc'[index % 3]}"
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": f"{pool}.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone,
        "cloud.example.com/nodepool": pool,
        "cloud.example.com/capacity-type": "reserved",
    }
    if pool == "cpu":
        built = make_node(name, None, product=None, labels=labels, taints=(), cpu="96")
    else:
        product = {"h100": H100, "l40s": L40S}.get(pool, A100)
        labels |= {
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.family": "ada-lovelace" if pool == "l40s" else "hopper",
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/cuda.driver.major": "570",
            "nvidia.com/cuda.driver.minor": "124",
            "nvidia.com/gfd.timestamp": "1714557600",
            "nvidia.com/mig.capable": "true" if pool != "l40s" else "false",
            "feature.node.kubernetes.io/pci-10de.present": "true",
        }
        taints = [GPU_TAINT, INFERENCE_TAINT] if pool == "l40s" else [GPU_TAINT]
        mig = {MIG: "56"} if pool == "mig" else None
        gpus = None if pool == "mig" else 8
        built = make_node(name, gpus, product=product, labels=labels, taints=taints, cpu="190")
        if mig:
            built["status"]["allocatable"].update(mig)
            built["metadata"]["labels"]["nvidia.com/mig.strategy"] = "mixed"
    built["status"]["allocatable"] |= {"ephemeral-storage": "3500Gi", "hugepages-2Mi": "0"}
    built["status"]["conditions"] = [
        {"type": t, "status": "False", "reason": f"Kubelet Has No {t}"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    built["status"]["addresses"] = [
        {"type": "InternalIP", "address": f"10.{index // 250}.{index % 250}.10"},
        {"type": "Hostname", "address": name},
    ]
    built["status"]["nodeInfo"] = {"kubeletVersion": "v1.31.4", "containerRuntimeVersion": "2.0"}
    return built


def dress(pod: dict[str, Any], app: str, node_name: str, serial: int) -> dict[str, Any]:
    """Give a builder's pod the bulk of a real one: labels, owner, sidecar, init container,
    env, volumes, probes and, once bound, a status with IPs and container states."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["labels"] = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": f"{app}-{serial % 7}",
        "app.kubernetes.io/managed-by": "Helm",
        "pod-template-hash": f"{serial * 2654435761 % 16**10:010x}",
        "gpu": "true" if any("nvidia.com" in k for k in _limits(pod)) else "false",
    }
    meta["annotations"] = {
        "kubectl.kubernetes.io/restartedAt": "2024-05-01T09:00:00Z",
        "prometheus.io/scrape": "true",
        "checksum/config": f"{serial:064x}",
    }
    meta["generateName"] = f"{app}-"
    meta["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-rs", "uid": meta["uid"]}
    ]
    bulk = _bulk(app)
    spec["containers"][0] |= bulk["main"]
    spec["containers"].append(bulk["sidecar"])
    spec["initContainers"] = bulk["init"]
    spec["volumes"] = bulk["volumes"]
    spec["tolerations"] = spec.get("tolerations", []) + NOT_READY
    spec |= {"serviceAccountName": app, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}
    spec |= {"schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": False}
    if node_name:
        pod["status"] = running_status(serial, node_name)
    return pod


@functools.cache
def _bulk(app: str) -> dict[str, Any]:
    """What every pod of `app` carries alike (env, probes, sidecar, init container, volumes),
    built once and shared: the server stores a copy of each pod, and nothing changes these."""
    main = {
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}-{app}"} for i in range(20)]
        + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": v, "mountPath": f"/var/run/{v}", "readOnly": True} for v in ("config", "token")
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/live", "port": 8080}, "periodSeconds": 20},
    }
    sidecar = {
        "name": "log-shipper",
        "image": "docker.io/fluent/fluent-bit:3.0.4",
        "env": [{"name": f"FLUENT_{i}", "value": f"setting-{i}"} for i in range(8)],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}],
    }
    init = {"name": "wait-for-config", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}
    volumes = [
        {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        {"name": "logs", "emptyDir": {}},
    ]
    return {"main": main, "sidecar": sidecar, "init": [init], "volumes": volumes}


def running_status(serial: int, node_name: str) -> dict[str, Any]:
    at = "2024-05-01T10:00:05Z"
    ip = f"10.{64 + serial // 65536}.{serial // 256 % 256}.{serial % 256}"
    return {
        "phase": "Running",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": at}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ]
        + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}],
        "hostIP": node_name,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": at,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": name,
                "ready": True,
                "restartCount": 0,
                "image": image,
                "imageID": f"{image}@sha256:{serial:064x}",
                "containerID": f"containerd://{serial:032x}{i:032x}",
                "started": True,
                "state": {"running": {"startedAt": at}},
            }
            for i, (name, image) in enumerate(
                (("main", "nvcr.io/nvidia/pytorch:24.05-py3"), ("log-shipper", "fluent-bit:3.0.4"))
            )
        ],
    }


def _limits(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["spec"]["containers"][0]["resources"].get("limits", {}))


def gpu_pod(name: str, gpus: int, node_name: str, serial: int, **options: Any) -> dict[str, Any]:
    """A GPU pod in one of the team namespaces, bound to `node_name` or pending."""
    team = f"team-{serial % TEAMS:02d}"
    pod = make_gpu_pod(name, gpus, team, node=node_name, cpu="8", memory="64Gi", **options)
    return dress(pod, "trainer", node_name, serial)


def cpu_pod(name: str, node_name: str, serial: int) -> dict[str, Any]:
    """A pod without GPUs, bound to `node_name` (tolerating the GPU taints, as a DaemonSet's
    pods and the GPU nodes' CPU-side services do)."""
    service = f"svc-{serial % SERVICES:03d}"
    everything = [{"operator": "Exists"}]
    pod = make_gpu_pod(name, 0, service, node=node_name, cpu="250m", memory="512Mi",
                       tolerations=everything)  # fmt: skip
    return dress(pod, service, node_name, serial)


def build(scale: float = 1.0) -> Fleet:
    """The whole cluster: POOLS, MIG and CPU nodes, the GPU pods on them, PENDING pods, quotas
    and, up to TOTAL_PODS, pods without GPUs spread over every node; `scale` < 1 shrinks
    every count alike, for a quick try of the bench."""
    fleet = Fleet()
    serial = itertools.count()
    tolerations = [GPU_TOLERATION, INFERENCE_TOLERATION]
    for pool, count, _, layout in POOLS:
        extra = {"tolerations": tolerations} if pool == "l40s" else {}
        for i in range(round(count * scale)):
            name = f"{pool}-{i:04d}"
            fleet.nodes.append(node(name, pool, len(fleet.nodes)))
            for gpus in layout:
                n = next(serial)
                fleet.pods.append(gpu_pod(f"{pool}-job-{n}", gpus, name, n, **extra))
            if pool == "h100":
                fleet.free_h100.append(name)
    for i in range(round(MIG_NODES * scale)):
        name = f"mig-{i:04d}"
        fleet.nodes.append(node(name, "mig", len(fleet.nodes)))
        for _ in range(2):
            n = next(serial)
            fleet.pods.append(gpu_pod(f"mig-job-{n}", 7, name, n, resource=MIG))
    for i in range(round(CPU_NODES * scale)):
        fleet.nodes.append(node(f"cpu-{i:04d}", "cpu", len(fleet.nodes)))
    for reason, count, gpus, product in PENDING:
        for _ in range(round(count * scale)):
            n = next(serial)
            fleet.pods.append(
                gpu_pod(f"{reason}-{n}", gpus, "", n, node_selector={PRODUCT: product})
            )
    names = [n["metadata"]["name"] for n in fleet.nodes]
    for i in range(round(TOTAL_PODS * scale) - len(fleet.pods)):
        n = next(serial)
        fleet.pods.append(cpu_pod(f"web-{n}", names[i % len(names)], n))
    fleet.quotas = [
        make_quota("gpu", f"team-{t:02d}", hard=160, used=120 + t) for t in range(TEAMS)
    ]
    return fleet
