"""Attribution end to end: the exporter, a real gRPC kubelet on a unix socket, /metrics.

Every device-plugin sharing mode appears here: whole GPU, MIG mixed and single strategy,
time-slicing replicas, the renamed `.shared` resource, and a resource split across NUMA nodes.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from kubelet_server import FakeKubelet, container, devices, pod
from support import Exporter, run_exporter, values, wait_until

SCENARIO = """
devices:
  - uuid: GPU-00000000-0000-4000-8000-000000000000
    readings: {utilization: 0.8, memory_used_bytes: 20GiB}
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    readings: {utilization: 0.9, memory_used_bytes: 30GiB}
    processes:
      - {pid: 100, used_memory_bytes: 10GiB, sm_utilization: 0.6}
      - {pid: 200, used_memory_bytes: 20GiB, sm_utilization: 0.3}
  - uuid: GPU-22222222-0000-4000-8000-000000000000
    mig:
      - {profile: 3g.40gb, gpu_instance_id: 1, uuid: MIG-33333333-0000-4000-8000-000000000000,
         memory_total_bytes: 40GiB, readings: {memory_used_bytes: 5GiB, graphics_active: 0.4}}
      - {profile: 3g.40gb, gpu_instance_id: 2, uuid: MIG-44444444-0000-4000-8000-000000000000,
         memory_total_bytes: 40GiB, readings: {memory_used_bytes: 7GiB}}
  - uuid: GPU-55555555-0000-4000-8000-000000000000
  - uuid: GPU-66666666-0000-4000-8000-000000000000
  - uuid: GPU-77777777-0000-4000-8000-000000000000
"""
GPU = "GPU-{0}{0}{0}{0}{0}{0}{0}{0}-0000-4000-8000-000000000000".format


def node_pods() -> list:  # type: ignore[type-arg]
    return [
        pod("ml", "trainer-0", container("main", devices("nvidia.com/gpu", GPU(0)))),
        pod("ml", "eval-0", container("main", devices("nvidia.com/gpu", GPU(1) + "::0"))),
        pod("lab", "notebook-a", container("jupyter", devices("nvidia.com/gpu", GPU(1) + "::1"))),
        pod(
            "ml",
            "mixed-0",
            container(
                "main",
                devices("nvidia.com/mig-3g.40gb", "MIG-33333333-0000-4000-8000-000000000000"),
            ),
        ),
        pod(
            "ml",
            "single-0",
            container(
                "main", devices("nvidia.com/gpu", "MIG-44444444-0000-4000-8000-000000000000")
            ),
        ),
        pod("lab", "shared-0", container("c", devices("nvidia.com/gpu.shared", GPU(5) + "::3"))),
        pod(
            "ml",
            "numa-0",
            container(
                "main",
                devices("nvidia.com/gpu", GPU(6), numa=0),
                devices("nvidia.com/gpu", "GPU-deadbeef-0000-4000-8000-000000000000", numa=1),
            ),
        ),
    ]


def allocation(exporter: Exporter, pod_name: str) -> dict[str, str]:
    parsed = exporter.metrics()
    found = [
        dict(labels)
        for (name, labels), _ in parsed.items()
        if name == "nvidia_gpu_allocation_info" and ("pod", pod_name) in labels
    ]
    assert len(found) == 1, (pod_name, found)
    return found[0]


def test_every_sharing_mode_through_metrics(tmp_path: Path) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    socket = tmp_path / "kubelet.sock"
    args = [
        "--simulate",
        str(tmp_path / "node.yaml"),
        "--collector.interval=0.5s",
        f"--kubelet.pod-resources-socket={socket}",
        "--kubelet.interval=0.5s",
    ]
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = node_pods()
        kubelet.allocatable = [
            devices("nvidia.com/gpu", GPU(0), GPU(1) + "::0", GPU(1) + "::1", GPU(6), GPU(7)),
            devices("nvidia.com/mig-3g.40gb", "MIG-33333333-0000-4000-8000-000000000000"),
        ]
        with run_exporter(args, tmp_path) as exporter:
            wait_until(
                lambda: values(exporter.metrics(), "nvidia_gpu_allocation_info"),
                what="allocations",
            )
            parsed = exporter.metrics()

            whole = allocation(exporter, "trainer-0")
            assert (whole["uuid"], whole["sharing"], whole["resource"]) == (
                GPU(0),
                "exclusive",
                "nvidia.com/gpu",
            )
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="trainer-0") == [0.8]
            assert values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod="trainer-0") == [
                20 * 2**30
            ]

            # Time-slicing: both replicas' holders are attributed, the device's values are NOT
            # copied onto them (without the Kubernetes API the split by process is unknown).
            for name in ("eval-0", "notebook-a"):
                assert allocation(exporter, name)["sharing"] == "shared"
                assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod=name) == []

            mixed = allocation(exporter, "mixed-0")
            assert (mixed["uuid"], mixed["parent_uuid"]) == (
                "MIG-33333333-0000-4000-8000-000000000000",
                GPU(2),
            )
            assert values(parsed, "nvidia_gpu_pod_memory_used_bytes", pod="mixed-0") == [5 * 2**30]
            # An H100 MIG instance's activity is its own GPM engine activity (Ampere: absent).
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="mixed-0") == [0.4]
            single = allocation(exporter, "single-0")
            assert (single["resource"], single["gpu_instance_id"]) == ("nvidia.com/gpu", "2")

            assert allocation(exporter, "shared-0")["sharing"] == "shared"
            assert allocation(exporter, "numa-0")["uuid"] == GPU(6)

            assert values(
                parsed, "kube_gpu_exporter_unmapped_device_ids", resource="nvidia.com/gpu"
            ) == [1]
            assert values(parsed, "nvidia_gpu_node_driver_gpus") == [6]
            assert values(
                parsed, "nvidia_gpu_node_advertised_devices", resource="nvidia.com/gpu"
            ) == [5]
            # Attributed holds only: the id that names no GPU is unmapped, not allocated.
            assert values(
                parsed, "nvidia_gpu_node_allocated_devices", resource="nvidia.com/gpu"
            ) == [5]
            assert values(parsed, "nvidia_gpu_node_free_gpus") == [1]  # GPU 7 only
            assert values(parsed, "kube_gpu_exporter_pod_resources_up") == [1]

            # The pod ends: its series are gone at the next cycle.
            kubelet.pods = [p for p in node_pods() if p.name != "trainer-0"]
            wait_until(
                lambda: (
                    not values(exporter.metrics(), "nvidia_gpu_allocation_info", pod="trainer-0")
                ),
                what="the ended pod's allocation to disappear",
            )
            assert (
                values(exporter.metrics(), "nvidia_gpu_pod_utilization_ratio", pod="trainer-0")
                == []
            )


def test_socket_missing_at_start_then_kubelet_restarts(tmp_path: Path) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    socket = tmp_path / "kubelet.sock"
    args = [
        "--simulate",
        str(tmp_path / "node.yaml"),
        "--collector.interval=0.3s",
        f"--kubelet.pod-resources-socket={socket}",
        "--kubelet.interval=0.3s",
        "--kubelet.timeout=0.5s",
    ]
    with run_exporter(args, tmp_path) as exporter:
        parsed = exporter.metrics()
        assert values(parsed, "kube_gpu_exporter_pod_resources_up") == [0]
        assert len(values(parsed, "nvidia_gpu_up")) == 8  # device metrics are served all the same
        assert values(parsed, "nvidia_gpu_allocation_info") == []
        kubelet = FakeKubelet(socket)
        kubelet.pods = node_pods()
        kubelet.start()
        try:
            wait_until(
                lambda: values(exporter.metrics(), "kube_gpu_exporter_pod_resources_up") == [1],
                what="up",
            )
            wait_until(
                lambda: values(exporter.metrics(), "nvidia_gpu_allocation_info"), what="attribution"
            )
            kubelet.restart()  # a new socket file, as a restarted kubelet makes
            kubelet.pods = kubelet.pods[:1]
            wait_until(
                lambda: len(values(exporter.metrics(), "nvidia_gpu_allocation_info")) == 1,
                timeout=30,
                what="attribution from the restarted kubelet",
            )
            # Slower than the timeout: reported down and counted, scrapes unaffected.
            kubelet.delay = 2.0
            wait_until(
                lambda: (
                    values(
                        exporter.metrics(),
                        "kube_gpu_exporter_collection_errors_total",
                        kind="pod_resources_timeout",
                    )[0]
                    > 0
                ),
                what="a counted timeout",
            )
            assert values(exporter.metrics(), "kube_gpu_exporter_pod_resources_up") == [0]
            kubelet.delay = 0.0
            kubelet.error = (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
            wait_until(
                lambda: (
                    values(
                        exporter.metrics(),
                        "kube_gpu_exporter_collection_errors_total",
                        kind="pod_resources_rate_limited",
                    )[0]
                    > 0
                ),
                what="a counted rate limit",
            )
        finally:
            kubelet.stop()
        log = exporter.log()
    assert "Traceback" not in log
