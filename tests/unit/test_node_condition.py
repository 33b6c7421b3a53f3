"""The GPUHealthy condition from a snapshot: True only where every GPU's recovery action was
read as none, False with the most severe action as its reason and every asking GPU in its
message, Unknown wherever NVML cannot say; MIG instances are their parents'."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.serve.node_condition import (
    MAX_MESSAGE,
    GpuHealth,
    gpu_health,
    reason_of,
)
from kube_gpu_exporter.exporter.serve_command import DEFAULT_TAINT
from kube_gpu_exporter.exporter.snapshot import (
    ActionMemory,
    DeviceIdentity,
    DeviceSample,
    ExporterState,
    HeldXid,
    NodeSample,
    Snapshot,
)

A, B = "GPU-aaaaaaaa-0000-4000-8000-000000000000", "GPU-bbbbbbbb-0000-4000-8000-000000000000"
RECOVERY, PENDING, FAILED = (
    c.RECOVERY_ACTION.name,
    c.ROW_REMAP_PENDING.name,
    c.ROW_REMAP_FAILED.name,
)


def gpu(uuid: str, up: bool = True, parent: str = "", **values: float) -> DeviceSample:
    return DeviceSample(DeviceIdentity(0, uuid, "H100", "0", parent_uuid=parent), up, values)


def health(
    *devices: DeviceSample, nvml_up: bool = True, held: dict[str, HeldXid] | None = None
) -> GpuHealth:
    node = NodeSample(nvml_up=nvml_up, devices=devices)
    memory = {uuid: ActionMemory(xid=xid) for uuid, xid in (held or {}).items()}
    state = ExporterState(0.0, 0.0, 1, {})
    return gpu_health(Snapshot(node, state, taken_at=0.0, health=memory))


def test_true_only_where_every_gpu_said_none() -> None:
    assert health(gpu(A, **{RECOVERY: 0}), gpu(B, **{RECOVERY: 0})) == GpuHealth(
        "True", "NoActionNeeded", "2 GPUs: NVML's recovery action is none on each"
    )


def test_false_names_the_most_severe_action_and_every_asking_gpu() -> None:
    found = health(gpu(B, **{RECOVERY: 1}), gpu(A, **{RECOVERY: 2, FAILED: 1}))
    assert (found.status, found.reason, found.needs_reset) == ("False", "ReplaceGPU", True)
    assert found.message == (
        f"{A}: reboot (recovery_action); {A}: rma (row_remap_failed); "
        f"{B}: reset_gpu (recovery_action)"
    )
    assert health(gpu(A, **{RECOVERY: 2})).reason == "RebootNode"


def test_a_held_xid_asks_and_is_named_by_its_code() -> None:
    found = health(gpu(A, **{RECOVERY: 0}), held={A: HeldXid(79, "reboot", 100.0)})
    assert (found.status, found.reason) == ("False", "RebootNode")
    assert found.message == f"{A}: reboot (xid 79)"


def test_a_drain_alone_does_not_ask_for_the_taint() -> None:
    found = health(gpu(A, **{RECOVERY: 3}), gpu(B, **{RECOVERY: 0}))
    assert (found.status, found.reason, found.needs_reset) == ("False", "DrainP2P", False)


def test_unknown_where_nvml_cannot_say_never_true() -> None:
    assert health(gpu(A, **{RECOVERY: 0}), gpu(B)).status == "Unknown"  # not read
    assert health(gpu(A, **{RECOVERY: 0}), gpu(B, up=False, **{RECOVERY: 0})).reason == (
        "ActionUnknown"
    )
    assert health(nvml_up=False).reason == "NVMLNotAnswering"
    assert health().reason == "NoGPUs"
    assert health(gpu(B, parent=A, **{RECOVERY: 0})).reason == "NoGPUs"  # a MIG instance alone


def test_an_asking_gpu_wins_over_an_unknown_one_and_the_unknown_is_named() -> None:
    found = health(gpu(A, **{PENDING: 1}), gpu(B))
    assert (found.status, found.reason) == ("False", "ResetGPU")
    assert found.message.endswith(f"; unknown: {B}")


def test_mig_instances_are_their_parents() -> None:
    found = health(gpu(A, **{RECOVERY: 0}), gpu("MIG-1", parent=A))
    assert found.status == "True"


def test_reasons_of_unlisted_actions_and_long_messages() -> None:
    assert reason_of("reset_gpu") == "ResetGPU"
    assert reason_of("recovery_action_9") == "RecoveryAction9"
    many = [gpu(f"GPU-{n:08d}-0000-4000-8000-000000000000", **{RECOVERY: 1}) for n in range(40)]
    assert len(health(*many).message) == MAX_MESSAGE


def test_the_flags_default_taint_is_the_charts() -> None:
    from kube_gpu_exporter.exporter.generate.chart_keys import keys

    assert {k.path: k.default for k in keys()}["nodeHealth.taintKey"] == DEFAULT_TAINT
