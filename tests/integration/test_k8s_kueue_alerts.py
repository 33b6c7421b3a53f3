"""The Kueue alerts on what the real Kueue v0.17.0 leaves: `kube-gpu-exporter cluster` watches
a plane whose scheduler and Job controller run what Kueue admits, a node's exporter
(`serve --simulate`) reports the GPUs an admitted Job's pod holds, and the built Prometheus 3
scrapes both and evaluates the rules `generate` writes from a thresholds file that shortens
their durations (so the alerts fire in seconds, by the same expressions the defaults render).

The bench: one H100 node of 4 GPUs; a flavor `h100` selecting it, a flavor `l4` whose node
labels no node carries; ClusterQueue `cq-h100` (2 of `h100`) and `cq-l4` (4 of `l4`). A Job
takes `cq-h100`'s 2 GPUs (admitted, its pod bound, its GPUs idle on the node), a second one
asks 2 more and waits in Kueue's words. Then:

- KubeGpuWorkloadPendingTooLong fires for `cq-h100` with the reason Kueue wrote on the
  waiting Workload's `QuotaReserved` condition, its value the 2 GPUs waiting;
- KubeGpuFlavorCannotFit fires for `l4` (quota, no node), not for `h100` (a node counted);
- KubeGpuQueueQuotaExhaustedWhileIdle fires for `cq-h100` (used 2 of nominal 2), its value
  the 2 idle GPUs, its description naming the admitted Job's pod."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane
from kueue import Kueue
from kueue_bench import (
    GPU,
    GPU_TOLERATION,
    PRODUCT,
    V1BETA2,
    add_node,
    add_queues,
    cluster_queue_spec,
    condition,
    flavor_quota,
    gpu_job,
    gpu_pod_spec,
    job_pods,
    kueue_bench,
    kueue_object,
    wait_active,
    wait_default_service_account,
    workload_of,
)

from kube_gpu_exporter.demo.kube_api.cluster_objects import H100
from kube_gpu_exporter.demo.kubelet_listing import allocatable, pod_resources
from kube_gpu_exporter.demo.pod_resources_server import PodResourcesServer
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from prometheus_server import BUILT, Prometheus, binaries_of, run_prometheus
from support import exporter_command, run_exporter, wait_until

pytestmark = pytest.mark.k8s

NAMESPACE = "research"
# The thresholds' defaults wait minutes to hours; these keep every expression as it is and
# let a condition fire on its first evaluation (GPUAllocatedIdle's window defines idle).
THRESHOLDS = {
    "alerts": {
        "KubeGpuWorkloadPendingTooLong": {"for": "0m", "threshold": "5s"},
        "KubeGpuFlavorCannotFit": {"for": "0m"},
        "KubeGpuQueueQuotaExhaustedWhileIdle": {"for": "0m"},
        "GPUAllocatedIdle": {"window": "1m"},
    }
}
# the jobs the default selectors name: the node exporter's and the cluster view's
NODE_JOB, CLUSTER_JOB = "kube-gpu-exporter", "kube-gpu-exporter-cluster"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kueue]]:
    with kueue_bench(tmp_path_factory.mktemp("kueue-alerts")) as bench:
        yield bench


def _setup(plane: ControlPlane) -> None:
    """The node, the flavors (`l4` matches no node's labels) and the two queues."""
    add_node(plane, "h100-0", 4, product=H100)
    for flavor, product in (("h100", H100), ("l4", "NVIDIA-L4")):
        where = {"nodeLabels": {PRODUCT: product}, "tolerations": [GPU_TOLERATION]}
        plane.ok(
            "POST", f"{V1BETA2}/resourceflavors", kueue_object("ResourceFlavor", flavor, where)
        )
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for queue, flavor, gpus in (("cq-h100", "h100", 2), ("cq-l4", "l4", 4)):
        spec = cluster_queue_spec(flavor_quota(flavor, gpus))
        add_queues(plane, NAMESPACE, queue, queue.replace("cq-", "lq-"), spec)
    wait_active(plane, ["cq-h100", "cq-l4"])
    wait_default_service_account(plane, NAMESPACE)


def _job(plane: ControlPlane, gpus: int) -> str:
    name = f"job-{uuid.uuid4().hex[:6]}"
    job = gpu_job(name, "lq-h100", gpu_pod_spec(gpus))
    plane.ok("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)
    return name


def _rules(tmp_path: Path) -> Path:
    """The rules `generate` writes for THRESHOLDS, as a user runs it."""
    config = tmp_path / "thresholds.yaml"
    config.write_text(yaml.safe_dump(THRESHOLDS))
    out = tmp_path / "generated"
    command = exporter_command("generate", f"--config={config}", f"--out={out}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out / "rules.yaml"


def _node_scenario(tmp_path: Path, pod: str) -> Path:
    """The H100 node's 4 GPUs, `pod` holding the first two (no process: idle)."""
    devices = [{"uuid": f"GPU-{i:08x}-0000-4000-8000-000000000000"} for i in range(4)]
    held = [{"namespace": NAMESPACE, "name": pod, "device": i} for i in range(2)]
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump({"devices": devices, "kubelet": {"pods": held}}))
    return path


def _firing(prom: Prometheus, alert: str, **labels: str) -> dict[str, Any]:
    """Polls Prometheus' alerts until `alert` with `labels` fires; returns it."""

    def check() -> dict[str, Any] | None:
        for found in prom.api("alerts")["alerts"]:
            mine = found["labels"]
            if (
                mine.get("alertname") == alert
                and found["state"] == "firing"
                and labels.items() <= mine.items()
            ):
                return found  # type: ignore[no-any-return]
        return None

    try:
        return wait_until(check, timeout=60, what=f"{alert}{labels} firing")  # type: ignore[no-any-return]
    except AssertionError:
        seen = [(a["labels"], a["state"]) for a in prom.api("alerts")["alerts"]]
        raise AssertionError(f"{alert}{labels} not firing; alerts: {seen}") from None


def test_kueue_alerts_fire_on_the_real_kueue(
    bench: tuple[ControlPlane, Kueue], tmp_path: Path
) -> None:
    plane, kueue = bench
    _setup(plane)
    rules = _rules(tmp_path)

    # the first Job takes the queue's whole quota and is placed; the second waits for it
    admitted = _job(plane, 2)
    [pod] = wait_until(
        lambda: (
            [p for p in job_pods(plane, NAMESPACE, admitted) if p["spec"].get("nodeName")] or None
        ),
        timeout=90,
        what="the admitted Job's pod bound",
    )
    waiting = _job(plane, 2)
    reserved = wait_until(
        lambda: condition(workload_of(plane, NAMESPACE, job=waiting), "QuotaReserved"),
        what="Kueue's QuotaReserved condition on the waiting Workload",
    )
    assert reserved["status"] == "False", reserved
    kueue_reason = reserved["reason"]
    assert kueue_reason, reserved

    pod_name = pod["metadata"]["name"]
    scenario = _node_scenario(tmp_path, pod_name)
    kubelet = PodResourcesServer(tmp_path / "kubelet.sock")
    node_gpus = Scenario.parse(scenario.read_text())
    kubelet.pods, kubelet.allocatable = pod_resources(node_gpus), allocatable(node_gpus)
    node_args = [
        f"--simulate={scenario}",
        f"--kubelet.pod-resources-socket={kubelet.socket_path}",
        "--kubelet.interval=200ms",
        "--collector.interval=200ms",
    ]
    view_args = [f"--kubernetes.kubeconfig={plane.kubeconfig}", "--cluster.interval=200ms"]
    with (
        kubelet,
        run_exporter(node_args, tmp_path) as node,
        run_exporter(view_args, tmp_path, command="cluster") as view,
        run_prometheus(
            tmp_path,
            [f"127.0.0.1:{view.port}"],
            job=CLUSTER_JOB,
            extra_jobs={NODE_JOB: [f"127.0.0.1:{node.port}"]},
            rule_files=[rules],
            generation=binaries_of(BUILT),
        ) as prom,
    ):
        # 1. the waiting Job, in Kueue's reason, valued in GPUs
        pending = _firing(
            prom, "KubeGpuWorkloadPendingTooLong", cluster_queue="cq-h100", reason=kueue_reason
        )
        assert float(pending["value"]) == 2, pending

        # 2. the flavor no node carries fires; the one with its node does not
        cannot = _firing(prom, "KubeGpuFlavorCannotFit", flavor="l4", resource=GPU)
        assert float(cannot["value"]) == 4, cannot
        assert "cq-l4" in cannot["annotations"]["description"], cannot
        prom.wait_for(f'kube_gpu_flavor_nodes{{job="{CLUSTER_JOB}", flavor="h100"}} == 1')
        prom.evaluated_rules(since=time.time())
        assert prom.query('ALERTS{alertname="KubeGpuFlavorCannotFit", flavor="h100"}') == []

        # 3. the used-up queue whose admitted pod idles its GPUs
        idle = _firing(prom, "KubeGpuQueueQuotaExhaustedWhileIdle", cluster_queue="cq-h100")
        assert float(idle["value"]) == 2, idle
        assert f"{NAMESPACE}/{pod_name}" in idle["annotations"]["description"], idle
        assert (
            prom.query(
                'ALERTS{alertname="KubeGpuQueueQuotaExhaustedWhileIdle", cluster_queue="cq-l4"}'
            )
            == []
        )
    assert kueue.version == "v0.17.0"
