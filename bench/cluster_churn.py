"""Changes to the bench's cluster at a steady rate, as a busy cluster sees them.

Each second runs the same 50-step mix through a `Target`: the test API server's hooks (each a
watch event, bench/cluster.py) or the real API server's calls (bench/real_api.py, for
bench/cluster_real.py): 10 pods created (bound, still `Pending` while their containers start),
10 of them turned `Running`, 10 old pods deleted; 4 GPU pods created pending (1 H100 each,
about to be scheduled), 4 bound to an H100 node's free GPU, 4 bound ones deleted (their GPU
freed); 4 node label flips and 4 Ready-condition flips among a few nodes. Creates and deletes
balance, so the number of active pods stays where it was (`expected_pods` follows it exactly).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cluster_fleet import Fleet, cpu_pod, gpu_pod, running_status

from cluster_objects import H100, PRODUCT

MIX: tuple[tuple[str, int], ...] = (
    ("create", 10),
    ("start", 10),
    ("delete", 10),
    ("gpu_create", 4),
    ("gpu_bind", 4),
    ("gpu_delete", 4),
    ("node_label", 4),
    ("node_ready", 4),
)
FLIPPED_NODES = 16  # the nodes whose label and Ready condition flip back and forth
BOUND_BACKLOG = 8  # the churn's GPU pods stay bound until this many more are (the last stay)


class Target(Protocol):
    """Where the changes go: each call makes the server hold the object as given (created or
    updated), or no longer hold the pod."""

    def put(self, pod: dict[str, Any]) -> object: ...

    def delete(self, namespace: str, name: str) -> object: ...

    def put_node(self, node: dict[str, Any]) -> object: ...


@dataclass(frozen=True)
class ChurnResult:
    seconds: float
    done: dict[str, int]  # step → times it changed something
    late_max_s: float  # the furthest a step started behind its schedule
    put_max_s: float  # the slowest single change at the API server (a Target call)


class Churn:
    """Runs the mix in a thread at `rate` changes a second until `stop()`."""

    def __init__(self, api: Target, fleet: Fleet, rate: float) -> None:
        self._api, self._rate = api, rate
        self.expected_pods = len(fleet.pods)
        self._old = deque(
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in fleet.pods
            if p["metadata"]["name"].startswith("web-")
        )
        self._nodes = [n["metadata"]["name"] for n in fleet.nodes]
        self._flipped = [copy.deepcopy(n) for n in fleet.nodes[-FLIPPED_NODES:]]
        self._free = deque(fleet.free_h100)
        self._starting: deque[dict[str, Any]] = deque()
        self._gpu_pending: deque[dict[str, Any]] = deque()
        self._gpu_bound: deque[tuple[dict[str, Any], str]] = deque()
        self._serial = itertools.count(10_000_000)
        # One second's steps, the kinds interleaved (round-robin over MIX) rather than in runs.
        runs = [[name] * n for name, n in MIX]
        self._steps = [s for turn in itertools.zip_longest(*runs) for s in turn if s]
        self._done = dict.fromkeys(dict(MIX), 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)
        self._late = self._put = 0.0
        self._started = self._ended = 0.0

    @property
    def bound_gpus(self) -> int:
        """GPUs the churn's pods hold now (one each)."""
        return len(self._gpu_bound)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> ChurnResult:
        self._stop.set()
        self._thread.join()
        return ChurnResult(self._ended - self._started, dict(self._done), self._late, self._put)

    def _run(self) -> None:
        actions: dict[str, Callable[[], bool]] = {
            name: getattr(self, f"_{name}") for name in self._done
        }
        for i in itertools.count():
            due = self._started + i / self._rate
            wait = due - time.monotonic()
            if self._stop.wait(max(0.0, wait)):
                break
            self._late = max(self._late, -wait)
            step = self._steps[i % len(self._steps)]
            began = time.monotonic()
            if actions[step]():
                self._done[step] += 1
            self._put = max(self._put, time.monotonic() - began)
        self._ended = time.monotonic()

    def _create(self) -> bool:
        n = next(self._serial)
        pod = cpu_pod(f"web-{n}", self._nodes[n % len(self._nodes)], n)
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
        self._api.put(pod)
        self._starting.append(pod)
        self.expected_pods += 1
        return True

    def _start(self) -> bool:
        if not self._starting:
            return False
        pod = self._starting.popleft()
        pod["status"] = running_status(next(self._serial), pod["spec"]["nodeName"])
        self._api.put(pod)
        return True

    def _delete(self) -> bool:
        namespace, name = self._old.popleft()
        self._api.delete(namespace, name)
        self.expected_pods -= 1
        return True

    def _gpu_create(self) -> bool:
        n = next(self._serial)
        pod = gpu_pod(f"churn-{n}", 1, "", n, node_selector={PRODUCT: H100})
        self._api.put(pod)
        self._gpu_pending.append(pod)
        self.expected_pods += 1
        return True

    def _gpu_bind(self) -> bool:
        if not self._gpu_pending or not self._free:
            return False
        pod, node = self._gpu_pending.popleft(), self._free.popleft()
        pod["spec"]["nodeName"] = node
        pod["status"] = running_status(next(self._serial), node)
        self._api.put(pod)
        self._gpu_bound.append((pod, node))
        return True

    def _gpu_delete(self) -> bool:
        if len(self._gpu_bound) <= BOUND_BACKLOG:
            return False
        pod, node = self._gpu_bound.popleft()
        self._api.delete(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self._free.append(node)
        self.expected_pods -= 1
        return True

    def _node_label(self) -> bool:
        node = self._flipped[self._done["node_label"] % FLIPPED_NODES]
        labels = node["metadata"]["labels"]
        if labels.pop("cloud.example.com/maintenance", None) is None:
            labels["cloud.example.com/maintenance"] = "scheduled"
        self._api.put_node(node)
        return True

    def _node_ready(self) -> bool:
        node = self._flipped[self._done["node_ready"] % FLIPPED_NODES]
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        ready["status"] = "False" if ready["status"] == "True" else "True"
        self._api.put_node(node)
        return True
