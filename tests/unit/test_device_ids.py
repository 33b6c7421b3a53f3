"""Every way the kubelet names an NVIDIA device resolves to the NVML device it means."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.attribution.device_ids import (
    DeviceRef,
    DeviceResolver,
    parse_device_id,
)
from kube_gpu_exporter.exporter.snapshot import DeviceIdentity

# The driver numbers /dev/nvidiaN (the minor number, GKE's `nvidiaN`) in another order than
# NVML enumerates the GPUs: index 0 is /dev/nvidia1, index 1 is /dev/nvidia0.
GPU0 = DeviceIdentity(
    0, "GPU-0d5c0000-aaaa-4000-8000-000000000000", "H100", "0000:18:00.0", minor=1
)
GPU1 = DeviceIdentity(
    1, "GPU-1e6d0000-bbbb-4000-8000-000000000000", "A100", "0000:2a:00.0", minor=0
)
MIG_1G = DeviceIdentity(
    1, "MIG-7a2b0000-cccc-4000-8000-000000000000", "A100", "0000:2a:00.0",
    parent_uuid=GPU1.uuid, mig_profile="1g.5gb", gpu_instance_id=13, compute_instance_id=0,
    minor=0,
)  # fmt: skip
MIG_3G = DeviceIdentity(
    1, "MIG-8c3d0000-dddd-4000-8000-000000000000", "A100", "0000:2a:00.0",
    parent_uuid=GPU1.uuid, mig_profile="3g.20gb", gpu_instance_id=1, compute_instance_id=0,
    minor=0,
)  # fmt: skip
# A GPU whose minor number NVML would not give: GKE's names cannot reach it.
GPU2 = DeviceIdentity(2, "GPU-2f7e0000-eeee-4000-8000-000000000000", "L4", "0000:3b:00.0")
RESOLVER = DeviceResolver([GPU0, GPU1, MIG_1G, MIG_3G, GPU2])


@pytest.mark.parametrize(
    ("raw", "ref"),
    [
        ("GPU-0d5c0000-aaaa-4000-8000-000000000000", DeviceRef(GPU0.uuid)),
        ("GPU-0d5c0000-aaaa-4000-8000-000000000000::3", DeviceRef(GPU0.uuid, 3)),
        ("MIG-7a2b0000-cccc-4000-8000-000000000000::0", DeviceRef(MIG_1G.uuid, 0)),
        ("weird::id::7", DeviceRef("weird::id::7")),
        ("nvidia0", DeviceRef("nvidia0")),
    ],
)
def test_replicas_are_split_on_the_first_double_colon(raw: str, ref: DeviceRef) -> None:
    assert parse_device_id(raw) == ref


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (GPU0.uuid, GPU0),  # whole GPU, any id strategy
        (GPU0.uuid.lower(), GPU0),
        (MIG_1G.uuid, MIG_1G),  # MIG, R470+
        (f"MIG-{GPU1.uuid}/13/0", MIG_1G),  # MIG, legacy R450/R460 form
        (f"MIG-{GPU1.uuid}/1/0", MIG_3G),
        ("nvidia1", GPU0),  # GKE whole GPU: /dev/nvidia1, NVML's index 0
        ("nvidia0", GPU1),
        ("nvidia0/gi13", MIG_1G),  # GKE MIG: on /dev/nvidia0
        ("nvidia1/vgpu2", GPU0),  # GKE time-shared
    ],
)
def test_every_id_form_resolves(device_id: str, expected: DeviceIdentity) -> None:
    assert RESOLVER.resolve(device_id) == expected


@pytest.mark.parametrize(
    "device_id",
    [
        "GPU-ffffffff-0000-4000-8000-000000000000",
        f"MIG-{GPU1.uuid}/7/0",
        "nvidia9",
        "nvidia2",  # index 2's minor number is unknown: never guessed from the index
        "nvidia1/gi13",  # no instance 13 on /dev/nvidia1
        "",
        "tpu-0",
    ],
)
def test_ids_that_name_no_device_resolve_to_none(device_id: str) -> None:
    assert RESOLVER.resolve(device_id) is None
