"""The collection loop around a sampler that stops answering: stall, recovery, shutdown.

The sampler here blocks on an event the test holds, as a hung NVML call would; the same
behaviour over the fake libnvidia-ml in a real process is tests/integration/test_nvml_liveness.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from kube_gpu_exporter.exporter.serve.collection import CollectionLoop, default_stall_timeout
from kube_gpu_exporter.exporter.simulated.sampler import node_sample
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from kube_gpu_exporter.exporter.snapshot import NodeSample
from support import samples, values

NODE = node_sample(Scenario.parse("devices: [{uuid: GPU-a}, {uuid: GPU-b}]").state_at(0))


class HangingSampler:
    """Answers NODE; while `answer` is clear, sample() and close() block as a hung call does."""

    simulated = False

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.answer.set()
        self.closed = False

    def sample(self) -> NodeSample:
        self.answer.wait()
        return NODE

    def close(self) -> None:
        self.answer.wait()
        self.closed = True


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def exposition(loop: CollectionLoop) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    assert loop.latest is not None
    return samples(loop.latest.body("", gzipped=False)[0])


def test_the_default_stall_timeout_is_three_intervals_and_at_least_30s() -> None:
    assert default_stall_timeout(10) == 30
    assert default_stall_timeout(1) == 30
    assert default_stall_timeout(60) == 180


async def test_a_stuck_cycle_is_reported_stalled_over_the_last_data_then_recovers() -> None:
    sampler = HangingSampler()
    loop = CollectionLoop(sampler, interval=0.05, stall_timeout=0.3)
    loop.start()
    await until(lambda: loop.ready, "ready")
    assert values(
        exposition(loop), "kube_gpu_exporter_collection_errors_total", kind="stalled"
    ) == [0]

    sampler.answer.clear()
    await until(lambda: loop.stalled, "stalled")
    assert not loop.ready and loop.alive
    stalled = exposition(loop)
    assert values(stalled, "kube_gpu_exporter_nvml_up") == [0]
    assert values(stalled, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
    assert len(values(stalled, "nvidia_gpu_up")) == 2  # the last data, still served
    await asyncio.sleep(0.5)
    assert values(
        exposition(loop), "kube_gpu_exporter_collection_errors_total", kind="stalled"
    ) == [1]

    sampler.answer.set()
    await until(lambda: loop.ready, "ready again")
    recovered = exposition(loop)
    assert values(recovered, "kube_gpu_exporter_nvml_up") == [1]
    assert values(recovered, "kube_gpu_exporter_collection_errors_total", kind="stalled") == [1]
    assert await loop.stop(timeout=2) and sampler.closed


async def test_stop_gives_up_on_a_stuck_nvml_and_leaves_only_a_daemon_thread() -> None:
    sampler = HangingSampler()
    loop = CollectionLoop(sampler, interval=0.05, stall_timeout=5)
    loop.start()
    await until(lambda: loop.ready, "ready")
    sampler.answer.clear()
    await asyncio.sleep(0.2)  # a cycle is now stuck in sample()
    started = time.monotonic()
    assert not await loop.stop(timeout=0.5)
    assert time.monotonic() - started < 2
    stuck = [t for t in threading.enumerate() if t.name == "collector"]
    assert stuck and all(t.daemon for t in stuck)  # interpreter exit will not wait for it
    sampler.answer.set()  # let it go, and see that it never runs the abandoned close
    await asyncio.sleep(0.2)
    assert not sampler.closed
