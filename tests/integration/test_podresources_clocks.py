"""How the pod-resources watcher tells a listing's age, and what it says of the kubelet's
refusals over time, against the real gRPC fake kubelet on a unix socket.

A listing's age is measured on a monotonic clock: the wall clock can step (NTP, a VM
resumed from a snapshot), and neither a step forward nor one back may change whether the
listing is trusted. The wall clock only stamps `last_success`, the exposed timestamp.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from kube_gpu_exporter.exporter.kubelet.client import PodResourcesClient, PodResourcesWatcher
from kubelet_server import FakeKubelet, container, devices, pod

T = TypeVar("T")
INTERVAL = 0.2
STALE = PodResourcesWatcher.STALE_AFTER_INTERVALS * INTERVAL
HOUR = 3600.0


async def eventually(check: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)
    return result


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "pod-resources" / "kubelet.sock"


@pytest.fixture
def kubelet(socket_path: Path) -> Iterator[FakeKubelet]:
    server = FakeKubelet(socket_path)
    server.pods = [pod("ml", "p", container("c", devices("nvidia.com/gpu", "GPU-a")))]
    yield server
    server.stop()


@pytest.fixture
async def client(socket_path: Path) -> AsyncIterator[PodResourcesClient]:
    client = PodResourcesClient(str(socket_path), timeout=5.0)
    yield client
    await client.close()


async def test_a_wall_clock_step_does_not_change_the_staleness_verdict(
    kubelet: FakeKubelet, client: PodResourcesClient
) -> None:
    monotonic, wall = [500.0], [1_700_000_000.0]
    watcher = PodResourcesWatcher(
        client, interval=INTERVAL, clock=lambda: monotonic[0], wall_clock=lambda: wall[0]
    )
    kubelet.start()
    watcher.start()
    try:
        listing = await eventually(lambda: watcher.latest, "the first listing")
        assert watcher.last_success == 1_700_000_000.0  # the exposed timestamp is wall time
        kubelet.stop()
        await eventually(lambda: not watcher.up, "a failed try")

        wall[0] += HOUR  # the wall clock jumps forward: the listing is as fresh as it was
        assert watcher.latest is listing
        wall[0] -= 2 * HOUR  # and back, past the listing's own time
        assert watcher.latest is listing

        monotonic[0] += STALE + 0.01  # time really passes: stale, whatever the wall says
        assert watcher.latest is None
        wall[0] -= HOUR
        assert watcher.latest is None
    finally:
        await watcher.stop()


async def test_the_default_clocks(kubelet: FakeKubelet, client: PodResourcesClient) -> None:
    """Without injected clocks: a wall-clock timestamp, withheld once really stale."""
    watcher = PodResourcesWatcher(client, interval=INTERVAL)
    kubelet.start()
    watcher.start()
    try:
        before = time.time()
        await eventually(lambda: watcher.latest, "the first listing")
        assert before - 5 < watcher.last_success <= time.time()
        kubelet.stop()
        await eventually(lambda: watcher.latest is None, "the listing to go stale")
    finally:
        await watcher.stop()


async def test_an_allocatable_refusal_is_logged_again_after_it_was_answered(
    kubelet: FakeKubelet, client: PodResourcesClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal is logged once while it lasts; once answered in between (a kubelet
    upgraded, a feature gate turned on), the same refusal later is news and is logged again."""
    kubelet.allocatable = [devices("nvidia.com/gpu", "GPU-a")]
    kubelet.allocatable_error = (grpc.StatusCode.UNKNOWN, "feature gate off")
    kubelet.start()
    with caplog.at_level(logging.INFO):
        assert (await client.list()).allocatable is None
        assert (await client.list()).allocatable is None
        kubelet.allocatable_error = None
        assert (await client.list()).allocatable is not None
        kubelet.allocatable_error = (grpc.StatusCode.UNKNOWN, "feature gate off")
        assert (await client.list()).allocatable is None
    refusals = [r for r in caplog.records if "cannot list allocatable" in r.getMessage()]
    assert len(refusals) == 2


async def test_an_answer_that_empties_the_node_is_believed_only_when_confirmed(
    kubelet: FakeKubelet, client: PodResourcesClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted kubelet lists no pods until its pod manager has them back (about a second
    on a real 1.37): one such answer keeps the last listing, asked again soon; an empty node
    is believed once a second answer `CONFIRM_EMPTY` later says so too."""
    monotonic = [500.0]
    watcher = PodResourcesWatcher(client, interval=INTERVAL, clock=lambda: monotonic[0])
    held = kubelet.pods
    kubelet.start()
    watcher.start()
    try:
        with caplog.at_level(logging.INFO):
            first = await eventually(lambda: watcher.latest, "the first listing")
            assert [a.pod for a in first.allocations] == ["p"]
            kubelet.pods = []  # the kubelet restarted: no pods yet
            await eventually(lambda: "asking again" in caplog.text, "the empty answer")
            assert watcher.latest is first  # not believed yet
            kubelet.pods = held  # its pods back
            await eventually(lambda: watcher.latest is not first, "the next answer")
            assert [a.pod for a in watcher.latest.allocations] == ["p"]  # type: ignore[union-attr]

            caplog.clear()
            kubelet.pods = []  # the node drained for real
            await eventually(lambda: "asking again" in caplog.text, "the empty answer")
            monotonic[0] += PodResourcesWatcher.CONFIRM_EMPTY
            emptied = await eventually(
                lambda: watcher.latest is not None and not watcher.latest.allocations and 1,
                "the confirmed empty answer",
            )
            assert emptied and watcher.up
    finally:
        await watcher.stop()
