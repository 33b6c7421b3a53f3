"""DRA devices resolved through ResourceSlices: parsing, the watch, and end to end.

The watch runs against a real HTTP server answering list and watch as the API server does;
the end-to-end test adds a gRPC kubelet whose listing names a DRA claim by pool and device.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_gpu_exporter.demo.kube_api import NODE, SLICES_PATH, KubeApiServer, make_pod, make_slice
from kube_gpu_exporter.exporter.kubernetes.resource_slices import (
    ResourceSliceWatcher,
    SliceDevices,
    device_uuids,
    parse_slice,
)
from kubelet_server import FakeKubelet, claim, claim_device, container, pod
from support import run_exporter, values, wait_until

GPU0 = "GPU-0a0a0a0a-0000-4000-8000-000000000000"
GPU1 = "GPU-1b1b1b1b-0000-4000-8000-000000000000"
MIG = "MIG-2c2c2c2c-0000-4000-8000-000000000000"
WAIT = 30.0
DRIVER = "gpu.nvidia.com"


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_a_slice_maps_device_names_to_uuids_in_every_api_version(version: str) -> None:
    obj = make_slice(
        "node-a-gpu",
        {"gpu-0": {"type": "gpu", "uuid": GPU0}, "gpu-1-mig-1g": {"type": "mig", "uuid": MIG}},
        version=version,
    )
    parsed = parse_slice(obj)
    assert parsed is not None
    assert (parsed.pool, parsed.generation) == (NODE, 1)
    assert dict(parsed.uuids) == {"gpu-0": GPU0, "gpu-1-mig-1g": MIG}


def test_qualified_attribute_names_and_devices_without_uuid() -> None:
    obj = make_slice("s", {"gpu-0": {"gpu.nvidia.com/uuid": GPU0}, "channel-0": {"type": "ch"}})
    parsed = parse_slice(obj)
    assert parsed is not None and dict(parsed.uuids) == {"gpu-0": GPU0}


@pytest.mark.parametrize(
    "obj",
    [
        make_slice("other", {"gpu-0": {"uuid": GPU0}}, driver="compute-domain.nvidia.com"),
        {"metadata": {"name": "no-spec"}},
        {"spec": {"driver": DRIVER, "pool": "not-a-mapping"}},
    ],
)
def test_slices_of_other_drivers_or_malformed_are_not_ours(obj: dict[str, object]) -> None:
    assert parse_slice(obj) is None


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    slices = {
        "old": SliceDevices("pool-a", 1, {"gpu-0": GPU0, "gpu-1": GPU1}),
        "new": SliceDevices("pool-a", 2, {"gpu-0": GPU1}),
        "other-pool": SliceDevices("pool-b", 1, {"gpu-0": GPU0}),
    }
    assert dict(device_uuids(slices)) == {("pool-a", "gpu-0"): GPU1, ("pool-b", "gpu-0"): GPU0}


# --- the watch ------------------------------------------------------------------------------


@pytest.fixture
def watchers() -> Iterator[list[ResourceSliceWatcher]]:
    started: list[ResourceSliceWatcher] = []
    yield started
    for watcher in started:
        watcher.stop()


def start(
    api: KubeApiServer, tmp_path: Path, into: list[ResourceSliceWatcher]
) -> ResourceSliceWatcher:
    watcher = ResourceSliceWatcher(NODE, str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    into.append(watcher)
    watcher.start()
    wait_until(lambda: watcher.up, WAIT, "the slice watch")
    return watcher


def test_the_watch_follows_slices_of_this_node_and_driver(
    tmp_path: Path, watchers: list[ResourceSliceWatcher]
) -> None:
    with KubeApiServer() as api:
        api.put_slice(make_slice("mine", {"gpu-0": {"uuid": GPU0}}))
        api.put_slice(make_slice("elsewhere", {"gpu-0": {"uuid": GPU1}}, node="node-b"))
        watcher = start(api, tmp_path, watchers)
        assert watcher.device_uuid(NODE, "gpu-0") == GPU0
        # the API server does the selection: node and driver both in the field selector
        selector = api.lists(SLICES_PATH.format(version="v1"))[0].params["fieldSelector"]
        assert set(selector.split(",")) == {f"spec.nodeName={NODE}", f"spec.driver={DRIVER}"}

        # a new generation of the pool (the driver republished it) replaces the old one
        api.put_slice(make_slice("mine", {"gpu-0": {"uuid": GPU1}}, generation=2))
        wait_until(lambda: watcher.device_uuid(NODE, "gpu-0") == GPU1, WAIT, "the new generation")
        api.delete_slice("mine")
        wait_until(lambda: watcher.device_uuid(NODE, "gpu-0") is None, WAIT, "the deletion")
        assert watcher.served and all(n == 0 for n in watcher.errors_total.values())


def test_an_older_cluster_is_watched_through_v1beta1(
    tmp_path: Path, watchers: list[ResourceSliceWatcher]
) -> None:
    with KubeApiServer(slice_versions=("v1beta1",)) as api:
        api.put_slice(make_slice("mine", {"gpu-0": {"uuid": GPU0}}, version="v1beta1"))
        watcher = start(api, tmp_path, watchers)
        assert watcher.device_uuid(NODE, "gpu-0") == GPU0
        wait_until(lambda: api.watches(SLICES_PATH.format(version="v1beta1")), WAIT, "a watch")
        assert all(n == 0 for n in watcher.errors_total.values())


def test_a_cluster_without_dra_is_not_an_error(
    tmp_path: Path, watchers: list[ResourceSliceWatcher]
) -> None:
    with KubeApiServer(slice_versions=()) as api:
        watcher = start(api, tmp_path, watchers)
        assert watcher.up and not watcher.served
        assert watcher.device_uuid(NODE, "gpu-0") is None
        assert all(n == 0 for n in watcher.errors_total.values())
        # each version was asked once, then the watch idles instead of polling
        paths = {r.path for r in api.requests}
        assert paths == {SLICES_PATH.format(version=v) for v in ("v1", "v1beta2", "v1beta1")}


# --- end to end -----------------------------------------------------------------------------

SCENARIO = f"""
devices:
  - uuid: {GPU0}
    readings: {{utilization: 0.8, memory_used_bytes: 10GiB}}
  - uuid: {GPU1}
    readings: {{utilization: 0.1, memory_used_bytes: 1GiB}}
"""


def test_a_dra_claim_is_attributed_once_its_slice_is_seen(tmp_path: Path) -> None:
    (tmp_path / "node.yaml").write_text(SCENARIO)
    socket = tmp_path / "kubelet.sock"
    with KubeApiServer() as api, FakeKubelet(socket) as kubelet:
        api.put(make_pod("llm-0", "serving", containers={"main": "containerd://" + "c" * 64}))
        resources = claim("serving", "llm-0-gpu", claim_device(DRIVER, NODE, "gpu-1"))
        kubelet.pods = [pod("serving", "llm-0", container("main", claims=[resources]))]
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        args = [
            "--simulate", str(tmp_path / "node.yaml"), "--collector.interval=0.5s",
            f"--kubelet.pod-resources-socket={socket}", "--kubelet.interval=0.5s",
            "--kubernetes.enabled", f"--kubernetes.kubeconfig={kubeconfig}",
            f"--kubernetes.node-name={NODE}",
        ]  # fmt: skip
        with run_exporter(args, tmp_path) as exporter:
            # No slice yet: the claim is counted as unmapped, never dropped silently.
            unmapped = "kube_gpu_exporter_unmapped_device_ids"
            wait_until(
                lambda: values(exporter.metrics(), unmapped, resource=f"dra/{DRIVER}") == [1],
                WAIT, "the unmapped claim",
            )  # fmt: skip
            api.put_slice(
                make_slice(f"{NODE}-gpu", {"gpu-0": {"uuid": GPU0}, "gpu-1": {"uuid": GPU1}})
            )
            wait_until(
                lambda: values(exporter.metrics(), "nvidia_gpu_allocation_info", pod="llm-0"),
                WAIT, "the claim resolved to its GPU",
            )  # fmt: skip
            parsed = exporter.metrics()
            info = values(
                parsed, "nvidia_gpu_allocation_info", uuid=GPU1, namespace="serving",
                pod="llm-0", container="main", resource=f"dra/{DRIVER}", sharing="exclusive",
            )  # fmt: skip
            assert info == [1]
            assert values(parsed, "nvidia_gpu_pod_utilization_ratio", pod="llm-0") == [0.1]
            assert values(parsed, unmapped, resource=f"dra/{DRIVER}") in ([], [0])
            assert values(parsed, "kube_gpu_exporter_kubernetes_api_up") == [1]
            log = exporter.log()
    assert "Traceback" not in log


def test_api_errors_are_logged_on_one_line() -> None:
    """The client's ApiException prints its headers and body over many lines; RBAC refusals
    are the common case and must read as one line naming the reason."""
    from kubernetes.client.exceptions import ApiException

    from kube_gpu_exporter.exporter.kubernetes.api_errors import summary

    refused = ApiException(status=403, reason="Forbidden")
    refused.body = '{"kind": "Status", "message": "resourceslices.resource.k8s.io is forbidden"}'
    assert summary(refused) == "HTTP 403: resourceslices.resource.k8s.io is forbidden"
    assert summary(ApiException(status=500, reason="Internal\nError")) == "HTTP 500: Internal Error"
    assert summary(TimeoutError("read\ntimed out")) == "read timed out"
