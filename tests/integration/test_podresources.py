"""The pod-resources client and watcher against a real gRPC server on a unix socket.

Every fault the kubelet can show is played by `FakeKubelet` (tests/kubelet_server.py): no
socket, a refused connection, a restart, a stall, an oversized answer, its rate limiter and
an old version. Timings use short intervals and generous limits so a loaded 2-core machine
passes them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from kube_gpu_exporter.exporter.catalog.errors import POD_RESOURCES_ERROR_KINDS
from kube_gpu_exporter.exporter.kubelet import generate
from kube_gpu_exporter.exporter.kubelet.client import (
    SERVICE,
    PodResourcesClient,
    PodResourcesError,
    PodResourcesWatcher,
)
from kube_gpu_exporter.exporter.kubelet.listing import ContainerAllocation, DraAllocation, Listing
from kube_gpu_exporter.exporter.kubelet.v1 import api_pb2
from kubelet_server import (
    RATE_LIMITED,
    FakeKubelet,
    claim,
    claim_device,
    container,
    devices,
    pod,
    pods_of_size,
)

T = TypeVar("T")
MiB = 1 << 20
INTERVAL = 0.2


async def eventually(check: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Poll `check` without blocking the event loop the watcher runs on."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


async def list_error(client: PodResourcesClient) -> PodResourcesError:
    with pytest.raises(PodResourcesError) as info:
        await client.list()
    return info.value


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "pod-resources" / "kubelet.sock"


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[FakeKubelet]:
    """A kubelet that is not started yet: the test starts it when it wants."""
    server = FakeKubelet(socket_path)
    yield server
    server.stop()


@pytest.fixture
async def client(socket_path: Path) -> AsyncIterator[PodResourcesClient]:
    client = PodResourcesClient(str(socket_path), timeout=5.0)
    yield client
    await client.close()


@pytest.fixture
async def watcher(client: PodResourcesClient) -> AsyncIterator[PodResourcesWatcher]:
    """A watcher on a short interval; the test starts it."""
    watcher = PodResourcesWatcher(client, interval=INTERVAL)
    yield watcher
    await watcher.stop()


# --- parsing ---------------------------------------------------------------------------------


async def test_list_merges_numa_entries_and_keeps_only_gpu_resources(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.pods = [
        pod(
            "ml",
            "train-0",
            container(
                "trainer",
                devices("nvidia.com/gpu", "GPU-aaaa", numa=0),
                devices("example.com/fpga", "fpga0"),
                devices("nvidia.com/gpu", "GPU-bbbb", "GPU-cccc", numa=1),
                cpu_ids=[2, 3],
            ),
            container("sidecar", cpu_ids=[4]),
            # a restartable init container (sidecar) is listed like any container
            container("log-shipper", devices("nvidia.com/gpu.shared", "GPU-dddd::3")),
        ),
        pod(
            "ml",
            "mig-job",
            container(
                "worker",
                devices("nvidia.com/mig-1g.10gb", "MIG-1111", numa=0),
                devices("nvidia.com/mig-3g.40gb", "MIG-GPU-eeee/1/0"),
                devices("nvidia.com/mig-1g.10gb", "MIG-2222", numa=1),
            ),
            container("single-strategy", devices("nvidia.com/gpu", "MIG-3333")),
        ),
        pod("other", "amd", container("main", devices("amd.com/gpu", "card0"))),
        pod("kube-system", "hugepages", container("main", devices("hugepages-1Gi", "x"))),
    ]
    kubelet.start()

    listing = await client.list()

    assert listing.allocations == (
        ContainerAllocation(
            "ml", "train-0", "trainer", "nvidia.com/gpu", ("GPU-aaaa", "GPU-bbbb", "GPU-cccc")
        ),
        ContainerAllocation(
            "ml", "train-0", "log-shipper", "nvidia.com/gpu.shared", ("GPU-dddd::3",)
        ),
        ContainerAllocation(
            "ml", "mig-job", "worker", "nvidia.com/mig-1g.10gb", ("MIG-1111", "MIG-2222")
        ),
        ContainerAllocation(
            "ml", "mig-job", "worker", "nvidia.com/mig-3g.40gb", ("MIG-GPU-eeee/1/0",)
        ),
        ContainerAllocation("ml", "mig-job", "single-strategy", "nvidia.com/gpu", ("MIG-3333",)),
    )
    assert listing.dra == ()
    assert kubelet.calls["List"] == 1


async def test_replicas_are_kept_verbatim_and_not_deduplicated_across_replicas(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    """Time-slicing hands out `<id>::<n>`; mapping replicas to a GPU happens elsewhere."""
    kubelet.pods = [
        pod(
            "ml",
            "shared",
            container(
                "a",
                devices("nvidia.com/gpu", "GPU-aaaa::0", numa=0),
                devices("nvidia.com/gpu", "GPU-aaaa::1", "GPU-aaaa::0", numa=0),
            ),
        )
    ]
    kubelet.start()

    listing = await client.list()

    assert listing.allocations == (
        ContainerAllocation("ml", "shared", "a", "nvidia.com/gpu", ("GPU-aaaa::0", "GPU-aaaa::1")),
    )


async def test_custom_resource_patterns(kubelet: FakeKubelet, socket_path: Path) -> None:
    kubelet.pods = [
        pod(
            "ml",
            "p",
            container("c", devices("nvidia.com/gpu", "GPU-a"), devices("example.com/fpga", "f0")),
        )
    ]
    kubelet.allocatable = [devices("example.com/fpga", "f0", "f1"), devices("nvidia.com/gpu", "G")]
    kubelet.start()
    client = PodResourcesClient(str(socket_path), resource_patterns=["example.com/*"])
    try:
        listing = await client.list()
    finally:
        await client.close()

    assert listing.allocations == (
        ContainerAllocation("ml", "p", "c", "example.com/fpga", ("f0",)),
    )
    assert dict(listing.allocatable) == {"example.com/fpga": ("f0", "f1")}


async def test_dra_claims_are_parsed_for_every_driver(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.pods = [
        pod(
            "ml",
            "dra-job",
            container(
                "trainer",
                claims=[
                    claim(
                        "ml",
                        "gpus",
                        claim_device("gpu.nvidia.com", "node-1", "gpu-0"),
                        claim_device("gpu.nvidia.com", "node-1", "gpu-1-mig-1g10gb-0", "share-7"),
                    ),
                    claim("infra", "nic", claim_device("dra.example.com", "pool-a", "eth1")),
                ],
            ),
        )
    ]
    kubelet.start()

    listing = await client.list()

    assert listing.allocations == ()
    assert listing.dra == (
        DraAllocation(
            "ml", "dra-job", "trainer", "ml", "gpus", "gpu.nvidia.com", "node-1", "gpu-0", None
        ),
        DraAllocation(
            "ml",
            "dra-job",
            "trainer",
            "ml",
            "gpus",
            "gpu.nvidia.com",
            "node-1",
            "gpu-1-mig-1g10gb-0",
            "share-7",
        ),
        DraAllocation(
            "ml", "dra-job", "trainer", "infra", "nic", "dra.example.com", "pool-a", "eth1", None
        ),
    )


async def test_allocatable_devices_are_merged_and_filtered(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.allocatable = [
        devices("nvidia.com/gpu", "GPU-aaaa", "GPU-bbbb", numa=0),
        devices("nvidia.com/mig-1g.10gb", "MIG-1111"),
        devices("example.com/fpga", "fpga0"),
        devices("nvidia.com/gpu", "GPU-cccc", numa=1),
    ]
    kubelet.start()

    listing = await client.list()

    assert dict(listing.allocatable) == {
        "nvidia.com/gpu": ("GPU-aaaa", "GPU-bbbb", "GPU-cccc"),
        "nvidia.com/mig-1g.10gb": ("MIG-1111",),
    }
    assert kubelet.calls["GetAllocatableResources"] == 1


async def test_old_kubelet_without_allocatable_is_not_an_error(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    kubelet.allocatable = [devices("nvidia.com/gpu", "GPU-a")]
    kubelet.allocatable_unimplemented = True
    kubelet.start()

    listing = await client.list()

    assert listing.allocatable is None  # unknown, not "nothing advertised"
    assert listing.allocations == (
        ContainerAllocation("ml", "p", "c", "nvidia.com/gpu", ("GPU-a",)),
    )
    assert kubelet.calls["GetAllocatableResources"] == 1


# --- faults of one call ----------------------------------------------------------------------


async def test_missing_socket_is_unavailable_and_the_next_call_connects_anew(
    kubelet: FakeKubelet, client: PodResourcesClient, socket_path: Path
) -> None:
    assert not socket_path.exists()
    assert (await list_error(client)).kind == "unavailable"

    kubelet.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    kubelet.start()

    # A reused channel (or a shared subchannel) would still sit in gRPC's reconnect backoff
    # for about a second and fail again at once.
    listing = await client.list()
    assert [a.pod for a in listing.allocations] == ["p"]


async def test_refused_connection_is_unavailable(
    client: PodResourcesClient, socket_path: Path
) -> None:
    """A socket file left behind by a dead kubelet: it exists, nobody accepts."""
    socket_path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(socket_path))
        error = await list_error(client)
    assert error.kind == "unavailable"
    assert "UNAVAILABLE" in error.message


async def test_stalled_kubelet_times_out_within_the_timeout(
    kubelet: FakeKubelet, socket_path: Path
) -> None:
    kubelet.delay = 30.0
    kubelet.start()
    client = PodResourcesClient(str(socket_path), timeout=0.5)
    try:
        started = time.monotonic()
        error = await list_error(client)
        elapsed = time.monotonic() - started
    finally:
        await client.close()

    assert error.kind == "timeout"
    assert 0.4 <= elapsed < 3.0


async def test_timeout_bounds_both_calls_together(kubelet: FakeKubelet, socket_path: Path) -> None:
    """List and GetAllocatableResources share one budget: each alone fits, both do not."""
    kubelet.delay = 0.6
    kubelet.start()
    client = PodResourcesClient(str(socket_path), timeout=1.0)
    try:
        started = time.monotonic()
        error = await list_error(client)
        elapsed = time.monotonic() - started
    finally:
        await client.close()

    assert error.kind == "timeout"
    assert elapsed < 3.0


async def test_answer_over_16_mib_is_too_large(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.pods = pods_of_size(20 * MiB)
    kubelet.start()

    error = await list_error(client)

    assert error.kind == "too_large"
    assert "larger than max" in error.message


async def test_answer_between_4_and_16_mib_succeeds(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    """gRPC's default 4 MiB receive limit broke dcgm-exporter on a 4.7 MB answer (#509)."""
    kubelet.pods = pods_of_size(6 * MiB)
    assert 4 * MiB < kubelet.list_response_size() < 16 * MiB
    kubelet.start()

    listing = await client.list()

    assert len(listing.allocations) == len(kubelet.pods)
    assert {a.device_ids for a in listing.allocations} == {
        (f"GPU-big-{i}",) for i in range(len(kubelet.pods))
    }


async def test_rate_limited(kubelet: FakeKubelet, client: PodResourcesClient) -> None:
    kubelet.error = RATE_LIMITED
    kubelet.start()

    error = await list_error(client)

    assert error.kind == "rate_limited"
    assert "rejected by rate limit" in error.message


async def test_other_grpc_errors_are_other(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    kubelet.error = (grpc.StatusCode.PERMISSION_DENIED, "not allowed")
    kubelet.start()

    assert (await list_error(client)).kind == "other"


# --- the watcher -----------------------------------------------------------------------------


async def test_watcher_waits_for_the_kubelet_then_recovers(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    watcher.start()
    await eventually(lambda: watcher.errors_total["unavailable"] >= 2, "two failed tries")
    assert not watcher.up
    assert watcher.latest is None
    assert watcher.last_success == 0.0
    assert set(watcher.errors_total) >= set(POD_RESOURCES_ERROR_KINDS)

    kubelet.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    before = time.time()
    kubelet.start()

    listing = await eventually(lambda: watcher.latest, "a listing after the kubelet started")
    assert watcher.up
    assert watcher.last_success >= before
    assert [a.device_ids for a in listing.allocations] == [("GPU-a",)]


async def test_watcher_survives_a_kubelet_restart(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    kubelet.pods = [pod("ml", "old", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    kubelet.start()
    watcher.start()
    await eventually(lambda: watcher.latest, "the first listing")

    kubelet.stop()
    await eventually(lambda: not watcher.up, "the watcher to notice the kubelet is gone")
    failures = watcher.errors_total["unavailable"]
    assert failures >= 1

    kubelet.pods = [pod("ml", "new", container("c", devices("nvidia.com/gpu", "GPU-b")))]
    kubelet.start()

    def new_pod_seen() -> Listing | None:
        listing = watcher.latest
        return listing if listing and listing.allocations[0].pod == "new" else None

    await eventually(new_pod_seen, "the restarted kubelet's listing")
    assert watcher.up


async def test_watcher_logs_each_failure_kind_once_and_the_recovery(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.kubelet.client")
    kubelet.error = RATE_LIMITED
    kubelet.start()
    watcher.start()
    await eventually(lambda: watcher.errors_total["rate_limited"] >= 3, "three rate-limited tries")

    kubelet.error = (grpc.StatusCode.UNAVAILABLE, "kubelet shutting down")
    await eventually(lambda: watcher.errors_total["unavailable"] >= 3, "three unavailable tries")

    kubelet.error = None
    await eventually(lambda: watcher.up, "recovery")

    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    warnings = [message for level, message in records if level == logging.WARNING]
    assert len(warnings) == 2, records
    assert "rate_limited" in warnings[0] and "rejected by rate limit" in warnings[0]
    assert "unavailable" in warnings[1] and "kubelet shutting down" in warnings[1]
    assert not any(r.exc_info for r in caplog.records)
    infos = [message for level, message in records if level == logging.INFO]
    assert len(infos) == 1 and "recovered" in infos[0]


async def test_watcher_backs_off_exponentially_up_to_the_interval(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    """Failing tries come 1 s, 2 s, 4 s … apart (never more than the interval)."""
    kubelet.error = RATE_LIMITED
    kubelet.start()
    watcher = PodResourcesWatcher(client, interval=60.0)
    watcher.start()
    try:
        await asyncio.sleep(3.6)  # tries at 0, 1 and 3 s; the next only at 7 s
    finally:
        await watcher.stop()
    assert 2 <= kubelet.calls["List"] <= 3
    assert watcher.errors_total["rate_limited"] == kubelet.calls["List"]


async def test_stale_listing_is_withheld_after_three_intervals(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    now = [1000.0]
    watcher = PodResourcesWatcher(
        client, interval=INTERVAL, clock=lambda: now[0], wall_clock=lambda: now[0]
    )
    kubelet.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    kubelet.start()
    watcher.start()
    try:
        listing = await eventually(lambda: watcher.latest, "the first listing")
        assert watcher.last_success == 1000.0

        kubelet.stop()
        await eventually(lambda: not watcher.up, "a failed try")
        # Failures alone do not discard it: a short outage keeps attribution.
        now[0] = 1000.0 + 3 * INTERVAL - 0.01
        assert watcher.latest is listing
        # Older than three intervals: the pods in it may be gone.
        now[0] = 1000.0 + 3 * INTERVAL + 0.01
        assert watcher.latest is None

        kubelet.start()
        await eventually(lambda: watcher.latest, "a fresh listing")
        assert watcher.last_success == now[0]
    finally:
        await watcher.stop()


async def test_stale_listing_on_the_real_clock(
    kubelet: FakeKubelet, watcher: PodResourcesWatcher
) -> None:
    kubelet.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    kubelet.start()
    watcher.start()
    await eventually(lambda: watcher.latest, "the first listing")

    kubelet.stop()
    await eventually(lambda: watcher.latest is None, "the listing to go stale")
    assert time.time() - watcher.last_success > 3 * INTERVAL
    assert watcher.errors_total["unavailable"] >= 1


class _Broken:
    """A listing source with a bug in it."""

    def __init__(self) -> None:
        self.calls = 0

    async def list(self) -> Listing:
        self.calls += 1
        raise ValueError("bug")


async def test_watcher_survives_a_bug_in_the_source(caplog: pytest.LogCaptureFixture) -> None:
    source = _Broken()
    watcher = PodResourcesWatcher(source, interval=INTERVAL)
    watcher.start()
    try:
        await eventually(lambda: source.calls >= 3, "the watcher to keep trying")
    finally:
        await watcher.stop()
    assert watcher.errors_total["other"] >= 3
    assert not watcher.up
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1


async def test_stop_ends_the_refreshes(kubelet: FakeKubelet, watcher: PodResourcesWatcher) -> None:
    kubelet.start()
    watcher.start()
    await eventually(lambda: kubelet.calls["List"] >= 2, "two refreshes")
    await watcher.stop()
    calls = kubelet.calls["List"]
    await asyncio.sleep(3 * INTERVAL)
    assert kubelet.calls["List"] == calls


# --- the protocol itself ---------------------------------------------------------------------


def test_stubs_are_fresh() -> None:
    """The committed stubs are exactly what `make proto` generates from api.proto."""
    for name, content in generate.generate().items():
        committed = (generate.STUB_DIR / name).read_bytes()
        assert committed == content, f"{name} is stale: run `make proto`"


def test_wire_contract_matches_the_kubelet() -> None:
    """Package, service, methods and field numbers as in the kubelet's api.proto."""
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    assert f"/{service.full_name}/" == SERVICE  # the client's paths, without the stubs
    expected = {
        "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5},
        "ContainerResources": {
            "name": 1,
            "devices": 2,
            "cpu_ids": 3,
            "memory": 4,
            "dynamic_resources": 5,
        },
        "ContainerMemory": {"memory_type": 1, "size": 2, "topology": 3},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
        "TopologyInfo": {"nodes": 1},
        "NUMANode": {"ID": 1},
        "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
        "ClaimResource": {
            "cdi_devices": 1,
            "driver_name": 2,
            "pool_name": 3,
            "device_name": 4,
            "share_id": 5,
        },
        "CDIDevice": {"name": 1},
        "GetPodResourcesRequest": {"pod_name": 1, "pod_namespace": 2},
        "GetPodResourcesResponse": {"pod_resources": 1},
    }
    for message, fields in expected.items():
        descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in descriptor.fields} == fields, message
    share_id = api_pb2.DESCRIPTOR.message_types_by_name["ClaimResource"].fields_by_name["share_id"]
    assert share_id.has_presence
