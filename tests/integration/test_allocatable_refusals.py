"""A kubelet that refuses GetAllocatableResources: the advertised counts are unknown either
way, but only an old kubelet's refusal is expected. Any other (PERMISSION_DENIED, INTERNAL)
is a fault that silences GPUNotAdvertised, so it is counted where the user looks."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kubelet_server import FakeKubelet, container, devices, kubelet_args, pod
from support import Samples, run_exporter, values, wait_until

GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
SCENARIO = f"devices:\n  - uuid: {GPU0}\n"
KIND = "pod_resources_allocatable_refused"


@pytest.mark.parametrize(
    ("code", "counted"),
    [
        (grpc.StatusCode.PERMISSION_DENIED, True),
        (grpc.StatusCode.INTERNAL, True),
        (grpc.StatusCode.FAILED_PRECONDITION, True),
        (grpc.StatusCode.UNIMPLEMENTED, False),  # before 1.21: the kubelet cannot tell
        (grpc.StatusCode.UNKNOWN, False),  # 1.21–1.22 with the feature gate off
    ],
)
def test_a_refused_allocatable_listing_is_counted_unless_the_kubelet_is_old(
    tmp_path: Path, code: grpc.StatusCode, counted: bool
) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    socket = tmp_path / "kubelet.sock"
    args = ["--simulate", str(tmp_path / "node.yaml"), *kubelet_args(socket, "0.3s")]
    with FakeKubelet(socket) as kubelet:
        kubelet.pods = [pod("ml", "train", container("c", devices("nvidia.com/gpu", GPU0)))]
        kubelet.allocatable = [devices("nvidia.com/gpu", GPU0)]
        kubelet.allocatable_error = (code, "refused by the test")
        with run_exporter(args, tmp_path) as exporter:
            errors = "kube_gpu_exporter_collection_errors_total"

            def counted_after(calls: int) -> tuple[float, Samples] | None:
                """The count in a body rendered by a cycle that began after the kubelet had
                been asked `calls` times (three cycles later: the listing lands in between)."""
                if kubelet.calls["GetAllocatableResources"] < calls:
                    return None
                start = exporter.metrics()
                (cycles,) = values(start, "kube_gpu_exporter_collections_total")
                parsed = exporter.metrics_when(
                    lambda m: values(m, "kube_gpu_exporter_collections_total")[0] >= cycles + 3,
                    "three more cycles",
                )
                (count,) = values(parsed, errors, kind=KIND)
                return count, parsed

            before, _ = wait_until(lambda: counted_after(2), what="two allocatable listings")
            more = kubelet.calls["GetAllocatableResources"] + 2
            after, later = wait_until(lambda: counted_after(more), what="two more")
            if counted:
                assert 0 < before < after  # every refused listing, while it lasts
            else:
                assert before == after == 0
            # Either way the counts are unknown (absent), and attribution goes on.
            assert values(later, "nvidia_gpu_node_advertised_devices") == []
            assert values(later, "nvidia_gpu_allocation_info", pod="train") == [1]
            # Logged once, as a warning where it is a fault.
            (line,) = [ln for ln in exporter.log().splitlines() if "refused by the test" in ln]
            assert code.name in line
            assert ("level=warn" in line) == counted, line
