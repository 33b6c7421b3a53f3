"""What nvidia_gpu_action_required says for each combination of NVML's readings: "none" only
where the recovery action was read, nothing where NVML cannot say, every asking reading named."""

from __future__ import annotations

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.exporter.exposition.health_action import actions

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
