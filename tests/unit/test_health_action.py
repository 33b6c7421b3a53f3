"""What nvidia_gpu_action_required says for each combination of NVML's readings: "none" only
where the recovery action was read, nothing where NVML cannot say, every asking reading named;
and which Xids hold an action on their GPU, and which one is held."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.health_action import (
    actions,
    health_labels,
    hold,
    xid_action,
)
from kube_gpu_exporter.exporter.snapshot import HeldXid

RECOVERY, PENDING, FAILED = (
    c.RECOVERY_ACTION.name,
    c.ROW_REMAP_PENDING.name,
    c.ROW_REMAP_FAILED.name,
)


def test_nothing_read_is_unknown_not_healthy() -> None:
    assert actions({}) == ()
    assert actions({PENDING: 0, FAILED: 0}) == ()  # the remapper alone cannot say "nothing"


def test_none_only_where_the_recovery_action_was_read() -> None:
    assert actions({RECOVERY: 0}) == (("none", "nvml"),)
    assert actions({RECOVERY: 0, PENDING: 0, FAILED: 0}) == (("none", "nvml"),)


def test_every_asking_reading_is_named() -> None:
    assert actions({RECOVERY: 4, PENDING: 1, FAILED: 1}) == (
        ("drain_and_reset", "recovery_action"),
        ("reset_gpu", "row_remap_pending"),
        ("rma", "row_remap_failed"),
    )
    assert actions({PENDING: 1}) == (("reset_gpu", "row_remap_pending"),)


def test_a_recovery_action_newer_than_the_table_keeps_its_code() -> None:
    assert actions({RECOVERY: 9}) == (("recovery_action_9", "recovery_action"),)


def test_an_xid_holds_its_catalogs_reset_or_reboot_and_nothing_else() -> None:
    assert xid_action(109) == "reset_gpu"  # RESET_GPU
    assert xid_action(79) == "reboot"  # RESTART_BM
    assert xid_action(151) == "reboot"  # RESTART_VM
    for code in (13, 31, 94):  # RESTART_APP: the workload's, the GPU goes on
        assert xid_action(code) is None
    for code in (43, 92, 48, 154, 61, 999):  # IGNORE, investigate, WORKFLOW, 154, none, unknown
        assert xid_action(code) is None


def test_a_held_xid_keeps_its_first_code_until_a_more_pressing_one() -> None:
    held = hold(None, [13, 109], 10.0)
    assert held == HeldXid(109, "reset_gpu", 10.0)
    assert hold(held, [95, 13], 20.0) == held  # another reset: the first one and its time
    assert hold(held, [79], 30.0) == HeldXid(79, "reboot", 30.0)
    assert hold(HeldXid(79, "reboot", 30.0), [109], 40.0) == HeldXid(79, "reboot", 30.0)
    assert hold(None, [13, 43], 10.0) is None


def test_a_held_xid_is_a_source_of_its_own_and_is_not_none() -> None:
    xid = HeldXid(109, "reset_gpu", 10.0)
    assert actions({RECOVERY: 0}, xid) == (("reset_gpu", "xid"),)
    assert actions({}, xid) == (("reset_gpu", "xid"),)  # the Xid says it, whatever NVML reads
    assert actions({RECOVERY: 2}, xid) == (("reboot", "recovery_action"), ("reset_gpu", "xid"))
    assert health_labels("reset_gpu", "xid", xid) == {
        "action": "reset_gpu",
        "source": "xid",
        "xid": "109",
    }
    assert health_labels("reboot", "recovery_action", xid) == {
        "action": "reboot",
        "source": "recovery_action",
    }
