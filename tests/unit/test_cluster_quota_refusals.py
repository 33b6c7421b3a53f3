"""Which FailedCreate events are GPU quota refusals, and how the counter grows from them:
events of the first list are a baseline at 0, later ones count their whole count, repeats
their growth, and a relist (also one that failed half-way) counts nothing twice."""

from __future__ import annotations

from typing import Any

import pytest

from cluster_objects import make_quota, quota_refusal
from kube_gpu_exporter.demo.kube_api import make_event
from kube_gpu_exporter.exporter.cluster import DEFAULT_SETTINGS, ClusterSettings, parse_quota
from kube_gpu_exporter.exporter.cluster.quota import quota_checks
from kube_gpu_exporter.exporter.cluster.quota_events import (
    QuotaRefusal,
    QuotaRejections,
    parse_refusal,
)

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
GPU_REFUSAL = quota_refusal("gpu-quota", {f"requests.{GPU}": "4"})


def refusal(message: str, **event: Any) -> QuotaRefusal | None:
    obj = make_event("train-7f9c.17c1", "team", message=message, uid="u1", **event)
    return parse_refusal(obj, DEFAULT_SETTINGS)


def test_a_refusal_names_its_namespace_quota_resource_and_count() -> None:
    assert refusal(GPU_REFUSAL, count=3) == QuotaRefusal("u1", "team", 3, "gpu-quota", (GPU,))


def test_the_resource_is_named_as_the_quota_series_name_it() -> None:
    quota = parse_quota(make_quota("gpu-quota", "team"))
    parsed = refusal(GPU_REFUSAL)
    assert quota is not None and parsed is not None
    assert parsed.resources == tuple(quota.hard)


@pytest.mark.parametrize(
    ("requested", "resources"),
    [
        # several exceeded resources: only the GPU ones count
        ({"requests.cpu": "2", f"requests.{GPU}": "4", "count/pods": "1"}, (GPU,)),
        ({f"requests.{GPU}": "1", f"requests.{MIG}": "2"}, (GPU, MIG)),
        ({f"requests.{MIG}": "2"}, (MIG,)),
        # an extended resource quoted without `requests.`
        ({GPU: "4"}, (GPU,)),
        ({"nvidia.com/gpu.shared": "1", "requests.memory": "1Gi"}, ("nvidia.com/gpu.shared",)),
    ],
)
def test_gpu_resources_of_the_requested_list(
    requested: dict[str, str], resources: tuple[str, ...]
) -> None:
    parsed = refusal(quota_refusal("q", requested))
    assert parsed is not None and parsed.resources == resources


@pytest.mark.parametrize(
    "message",
    [
        # prefixes the recorder and the StatefulSet controller put before the refusal
        "(combined from similar events): " + GPU_REFUSAL,
        "create Pod train-0 in StatefulSet train failed error: "
        + quota_refusal("gpu-quota", {f"requests.{GPU}": "4"}, pod="train-0"),
    ],
)
def test_the_refusal_is_found_after_a_prefix(message: str) -> None:
    parsed = refusal(message)
    assert parsed is not None and parsed.quota == "gpu-quota"


@pytest.mark.parametrize(
    "message",
    [
        quota_refusal("cpu-quota", {"requests.cpu": "2", "requests.memory": "4Gi"}),
        quota_refusal("pods", {"count/pods": "1"}),
        'Error creating: admission webhook "gpu.example.com" denied the request: no GPUs',
        'Error creating: pods "x" is forbidden: failed quota: gpu-quota: must specify '
        "requests.nvidia.com/gpu",
        "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=4",  # no refusal
        "is forbidden: exceeded quota: , requested: , used: ",
        "",
        "\x00" * 10_000,
    ],
)
def test_other_messages_are_not_refusals(message: str) -> None:
    assert refusal(message) is None


def test_only_warning_failed_create_events_with_identity_count() -> None:
    assert refusal(GPU_REFUSAL, kind="Normal") is None
    assert refusal(GPU_REFUSAL, reason="FailedScheduling") is None
    event = make_event("e", "team", message=GPU_REFUSAL)
    for broken in ({"uid": ""}, {"namespace": None}):
        obj = {**event, "metadata": {**event["metadata"], **broken}, "involvedObject": {}}
        assert parse_refusal(obj, DEFAULT_SETTINGS) is None
    assert parse_refusal({**event, "message": ["not", "text"]}, DEFAULT_SETTINGS) is None


def test_count_is_count_or_series_count_and_at_least_one() -> None:
    assert _count(count=4) == 4
    assert _count(count=1, series={"count": 6}) == 6
    assert _count(count=None) == 1
    assert _count(count="7", series={"count": True}) == 1


def _count(**fields: Any) -> int:
    event = make_event("e", "team", message=GPU_REFUSAL)
    parsed = parse_refusal({**event, **fields}, DEFAULT_SETTINGS)
    assert parsed is not None
    return parsed.count


def test_the_settings_name_the_gpu_resources() -> None:
    renamed = ClusterSettings(gpu_resources=("nvidia.com/gpu-h100",))
    message = quota_refusal("q", {"requests.nvidia.com/gpu-h100": "8"})
    obj = make_event("e", "team", message=message)
    parsed = parse_refusal(obj, renamed)
    assert parsed is not None and parsed.resources == ("nvidia.com/gpu-h100",)
    assert parse_refusal(obj, DEFAULT_SETTINGS) is None


class Watch:
    """What `ListWatch` does with the parser and publish: a list builds a new dict that is
    published at its end, each event changes the held dict and publishes it."""

    def __init__(self, rejections: QuotaRejections) -> None:
        self.rejections = rejections
        self.held: dict[str, int] = {}

    def list(self, *events: dict[str, Any], fail_after: int | None = None) -> None:
        items: dict[str, int] = {}
        for i, event in enumerate(events):
            if i == fail_after:
                return  # the next page failed: nothing published
            parsed = self.rejections.parse(event)
            if parsed is not None:
                items[parsed[0]] = parsed[1]
        self.held = items
        self.rejections.publish(items)

    def event(self, kind: str, event: dict[str, Any]) -> None:
        parsed = self.rejections.parse(event)
        if parsed is not None:
            if kind == "DELETED":
                self.held.pop(parsed[0], None)
            else:
                self.held[parsed[0]] = parsed[1]
            self.rejections.publish(self.held)


def gpu_event(name: str, count: int, namespace: str = "team") -> dict[str, Any]:
    return make_event(name, namespace, message=GPU_REFUSAL, uid=name, count=count)


def total(rejections: QuotaRejections, namespace: str = "team") -> int | None:
    return rejections.totals.get((namespace, "gpu-quota", GPU))


def test_the_first_list_is_a_baseline_at_zero_and_later_events_count() -> None:
    rejections = QuotaRejections(DEFAULT_SETTINGS)
    watch = Watch(rejections)
    watch.list(gpu_event("old", 40), gpu_event("other", 2, "other-team"))
    assert rejections.totals == {("team", "gpu-quota", GPU): 0, ("other-team", "gpu-quota", GPU): 0}
    watch.event("MODIFIED", gpu_event("old", 42))  # a baseline event repeats: its growth
    assert total(rejections) == 2
    watch.event("ADDED", gpu_event("new", 1))
    watch.event("MODIFIED", gpu_event("new", 3))
    assert total(rejections) == 5
    watch.event("MODIFIED", gpu_event("new", 3))  # no growth
    assert total(rejections) == 5
    assert rejections.events == 2 + 1


def test_a_relist_counts_only_what_is_new_or_grew() -> None:
    rejections = QuotaRejections(DEFAULT_SETTINGS)
    watch = Watch(rejections)
    watch.list(gpu_event("old", 4))
    watch.event("ADDED", gpu_event("seen", 2))
    # 410: relisted; "seen" grew by 1, "missed" came and was never watched
    watch.list(gpu_event("old", 4), gpu_event("seen", 3), gpu_event("missed", 5))
    assert total(rejections) == 2 + 1 + 5
    # a relist that fails half-way, then one that succeeds: nothing counted twice
    watch.list(gpu_event("seen", 4), gpu_event("late", 1), fail_after=2)
    assert total(rejections) == 8 + 1 + 1
    watch.list(gpu_event("seen", 4), gpu_event("late", 1))
    assert total(rejections) == 10


def test_deleted_events_are_forgotten_and_the_remembered_are_bounded() -> None:
    rejections = QuotaRejections(DEFAULT_SETTINGS, remembered=3)
    watch = Watch(rejections)
    watch.list()
    watch.event("ADDED", gpu_event("a", 1))
    watch.event("DELETED", gpu_event("a", 1))
    assert rejections.events == 0
    for name in "bcde":
        watch.event("ADDED", gpu_event(name, 1))
    assert rejections.events == 3 and "b" not in watch.held  # the earliest dropped
    assert total(rejections) == 5


def test_the_totals_handed_out_never_change() -> None:
    rejections = QuotaRejections(DEFAULT_SETTINGS)
    watch = Watch(rejections)
    watch.list()
    watch.event("ADDED", gpu_event("a", 1))
    seen = rejections.totals
    watch.event("MODIFIED", gpu_event("a", 5))
    assert dict(seen) == {("team", "gpu-quota", GPU): 1}
    assert total(rejections) == 5
    with pytest.raises(TypeError):
        seen[("team", "gpu-quota", GPU)] = 0  # type: ignore[index]


def test_a_quota_not_counted_yet_is_unknown_not_free() -> None:
    """Before the ResourceQuota controller writes `status.used`, how much is used is unknown:
    the check is neither passed as if nothing were used nor failed."""
    fresh = parse_quota(make_quota("new", "ml", hard=2, used=None))
    assert fresh is not None
    (check,) = quota_checks([fresh], {"nvidia.com/gpu": 4})
    assert check.used is None and check.left is None and not check.exceeded
    assert "? (not counted yet) of 2 used, ? left, 4 requested" in str(check)
    counted = parse_quota(make_quota("old", "ml", hard=2, used=0))
    assert counted is not None
    (check,) = quota_checks([counted], {"nvidia.com/gpu": 4})
    assert check.exceeded and check.left == 2
