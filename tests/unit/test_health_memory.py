"""What the collection loop remembers of a GPU's needed action across cycles: an Xid's action
held from the cycle that sees its count rise until the GPU shows it was acted on (lost and
answering again, a new NVML session), and since when each series has been served."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.health_memory import HealthMemory
from kube_gpu_exporter.exporter.snapshot import (
    DeviceIdentity,
    DeviceSample,
    HeldXid,
    NodeSample,
)

GPU = DeviceIdentity(0, "GPU-0", "H100", "00000000:18:00.0")
WATCH = 1_000.0  # the Xid watch's start


def node(
    xids: dict[int, int] | None = None,
    recovery: float | None = 0,
    up: bool = True,
    watch: float | None = WATCH,
) -> NodeSample:
    values = {} if recovery is None else {c.RECOVERY_ACTION.name: recovery}
    device = DeviceSample(GPU, up, values if up else {}, xid_counts=xids or {}, xid_watched=True)
    return NodeSample(nvml_up=True, devices=(device,), xid_watch_start=watch)


def served(memory: HealthMemory, sample: NodeSample, now: float) -> dict[tuple[str, str], float]:
    """(action, source) → since, for the one GPU; {} where it has no series."""
    health = memory.update(sample, now).get(GPU.uuid)
    return dict(health.since) if health else {}


def test_an_xid_holds_its_action_from_the_cycle_that_sees_it() -> None:
    memory = HealthMemory()
    assert served(memory, node(), 10.0) == {("none", "nvml"): 10.0}
    assert served(memory, node({109: 1}), 20.0) == {("reset_gpu", "xid"): 20.0}
    # Nothing new: held, with its time; NVML's recovery action says none all along
    assert served(memory, node({109: 1}), 30.0) == {("reset_gpu", "xid"): 20.0}
    assert memory.update(node({109: 1}), 40.0)[GPU.uuid].xid == HeldXid(109, "reset_gpu", 20.0)


def test_application_and_ignored_xids_hold_nothing() -> None:
    memory = HealthMemory()
    served(memory, node(), 10.0)
    assert served(memory, node({13: 3, 43: 1, 94: 1}), 20.0) == {("none", "nvml"): 10.0}


def test_a_counter_served_at_zero_is_no_event() -> None:
    memory = HealthMemory()
    assert served(memory, node({109: 0}), 10.0) == {("none", "nvml"): 10.0}


def test_a_gpu_lost_and_answering_again_was_reset() -> None:
    memory = HealthMemory()
    served(memory, node({79: 1}), 10.0)
    assert memory.update(node({79: 1}, up=False), 20.0) == {}  # a lost GPU: no series
    assert served(memory, node({79: 1}), 30.0) == {("none", "nvml"): 30.0}
    assert served(memory, node({79: 2}), 40.0) == {("reboot", "xid"): 40.0}  # a new one


def test_a_new_nvml_session_forgets_held_xids() -> None:
    memory = HealthMemory()
    served(memory, node({109: 1}), 10.0)
    assert memory.update(NodeSample(nvml_up=False), 20.0) == {}
    # The reloaded driver's watch counts from its own start; old events are not delivered
    assert served(memory, node({}, watch=2_000.0), 30.0) == {("none", "nvml"): 30.0}
    served(memory, node({109: 1}, watch=2_000.0), 40.0)
    assert served(memory, node({109: 1}, watch=3_000.0), 50.0) == {("reset_gpu", "xid"): 50.0}


def test_since_is_kept_while_served_and_restarts_after() -> None:
    memory = HealthMemory()
    assert served(memory, node(recovery=1), 10.0) == {("reset_gpu", "recovery_action"): 10.0}
    assert served(memory, node(recovery=1), 20.0) == {("reset_gpu", "recovery_action"): 10.0}
    assert served(memory, node(recovery=0), 30.0) == {("none", "nvml"): 30.0}
    assert served(memory, node(recovery=1), 40.0) == {("reset_gpu", "recovery_action"): 40.0}


def test_unknown_has_no_since() -> None:
    memory = HealthMemory()
    assert served(memory, node(recovery=None), 10.0) == {}


def test_a_gpu_gone_from_discovery_is_forgotten() -> None:
    memory = HealthMemory()
    served(memory, node({109: 1}), 10.0)
    assert memory.update(NodeSample(nvml_up=True, xid_watch_start=WATCH), 20.0) == {}
    # Back (a replaced board under the same uuid is not told apart): its count is new again
    assert served(memory, node({109: 1}), 30.0) == {("reset_gpu", "xid"): 30.0}
