"""Seeded Kueue scenarios for the Kueue oracle test (test_k8s_kueue_agreement.py): each one
a small world of its own (flavors, nodes, ClusterQueues in a cohort or alone, Jobs already
admitted) and one candidate Job, named apart so that many share one control plane and one
Kueue without touching each other.

Families, each varying what one part of the verdict decides:
- quota: one queue, one flavor; what is used and what the candidate asks around nominal,
  nodes that may be too fragmented for an admitted Job's pods;
- flavors: two flavors tried in order, the first full, tainted (tolerated by the Job, by the
  flavor, or not), or excluded by the Job's node selector;
- cohort: two queues in a cohort, borrowing limits and lending limits, what the other uses;
- fungibility: two flavors, the first only by borrowing from the cohort; the queue's
  `flavorFungibility.whenCanBorrow` stops there (MayStopSearch) or tries the next first;
- nodes: quota to spare, nodes of the flavor too small, full or tainted beyond the flavor;
- priority: the quota held by low-priority Jobs, a high-priority candidate, the queue
  preempting lower priorities or not (preemption is a limit the verdict names).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
POOL = "kueue-oracle/pool"  # the flavors' node label: the scenario's own value
FAMILIES = ("quota", "flavors", "cohort", "nodes", "priority", "fungibility")


@dataclass
class FlavorSpec:
    name: str
    taint: dict[str, str] | None = None  # nodeTaints (the nodes carry it too)
    tolerates: bool = False  # the flavor's tolerations cover its taint


@dataclass
class QueueSpec:
    name: str
    flavors: dict[str, tuple[int, int | None, int | None]]  # nominal, borrowing, lending
    cohort: str = ""
    fungibility: str = ""  # whenCanBorrow, "" for the default
    preempt: bool = False  # withinClusterQueue: LowerPriority


@dataclass
class JobSpec:
    queue: str
    gpus: int
    count: int = 1
    priority: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerate: str = ""  # a taint key the Job tolerates


@dataclass
class Scenario:
    family: str
    name: str  # the prefix of every object
    flavors: list[FlavorSpec]
    nodes: list[tuple[str, int, bool]]  # flavor, GPUs, an extra untolerated taint
    queues: list[QueueSpec]
    background: list[JobSpec]
    candidate: JobSpec

    def pool(self, flavor: str) -> str:
        return f"{self.name}-{flavor}"


def generate(seed: int, per_family: int, tag: str) -> list[Scenario]:
    rng = random.Random(seed)
    out = []
    for family in FAMILIES:
        for index in range(per_family):
            out.append(_MAKERS[family](rng, f"{tag}{family[:3]}{index}"))
    return out


def _quota(rng: random.Random, name: str) -> Scenario:
    nominal = rng.randint(2, 8)
    used = rng.randint(0, nominal)
    background = _split("cq", used, rng)
    node_gpus = rng.choice((4, 8))
    nodes = [("a", node_gpus, False), ("a", node_gpus, False)]
    candidate = JobSpec("cq", rng.randint(1, 4), rng.randint(1, 2))
    return Scenario(
        "quota", name, [FlavorSpec("a")], nodes, [QueueSpec("cq", {"a": (nominal, None, None)})],
        background, candidate,
    )  # fmt: skip


def _flavors(rng: random.Random, name: str) -> Scenario:
    kind = rng.choice(("full", "taint", "taint-job", "taint-flavor", "selector"))
    first = FlavorSpec("a")
    candidate = JobSpec("cq", rng.randint(1, 3), 1)
    background: list[JobSpec] = []
    nominal_a, nominal_b = rng.randint(2, 6), rng.randint(2, 6)
    if kind == "full":
        background = _split("cq", nominal_a - rng.randint(0, 1), rng)
    elif kind.startswith("taint"):
        first.taint = {"key": f"{name}-reserved", "value": "yes", "effect": "NoSchedule"}
        first.tolerates = kind == "taint-flavor"
        if kind == "taint-job":
            candidate.tolerate = f"{name}-reserved"
        if kind == "taint":  # the Job cannot go to a: b full or not
            background = _split("cq", nominal_b - rng.randint(0, 2), rng)
    else:
        candidate.node_selector = {POOL: f"{name}-{rng.choice(('b', 'c'))}"}
    nodes = [("a", rng.choice((2, 4, 8)), False), ("b", rng.choice((2, 4, 8)), False)]
    queue = QueueSpec("cq", {"a": (nominal_a, None, None), "b": (nominal_b, None, None)})
    return Scenario(
        "flavors", name, [first, FlavorSpec("b")], nodes, [queue], background, candidate
    )


def _cohort(rng: random.Random, name: str) -> Scenario:
    cohort = f"{name}-cohort"
    mine = QueueSpec(
        "cq",
        {"a": (rng.randint(1, 4), rng.choice((None, 0, 1, 2, 4)), None)},
        cohort,
    )
    lending = rng.choice((None, None, 0, 2))
    other = QueueSpec("other", {"a": (rng.randint(2, 6), None, lending)}, cohort)
    used_other = rng.randint(0, other.flavors["a"][0])
    used_mine = rng.randint(0, mine.flavors["a"][0] // 2)
    background = _split("other", used_other, rng) + _split("cq", used_mine, rng)
    nodes = [("a", 8, False), ("a", 8, False)]
    candidate = JobSpec("cq", rng.randint(1, 5), 1)
    return Scenario("cohort", name, [FlavorSpec("a")], nodes, [mine, other], background, candidate)


def _fungibility(rng: random.Random, name: str) -> Scenario:
    cohort = f"{name}-cohort"
    policy = rng.choice(("MayStopSearch", "TryNextFlavor"))
    mine = QueueSpec(
        "cq", {"a": (rng.randint(0, 2), None, None), "b": (rng.randint(1, 4), None, None)},
        cohort, fungibility=policy,
    )  # fmt: skip
    lender = QueueSpec("lender", {"a": (rng.randint(2, 6), None, None)}, cohort)
    background = _split("lender", rng.randint(0, lender.flavors["a"][0]), rng)
    nodes = [("a", 8, False), ("b", 4, False)]
    candidate = JobSpec("cq", rng.randint(1, 4), 1)
    flavors = [FlavorSpec("a"), FlavorSpec("b")]
    return Scenario("fungibility", name, flavors, nodes, [mine, lender], background, candidate)


def _nodes(rng: random.Random, name: str) -> Scenario:
    nodes = [("a", rng.choice((1, 2, 4)), rng.random() < 0.3) for _ in range(rng.randint(1, 2))]
    queue = QueueSpec("cq", {"a": (16, None, None)})
    background = _split("cq", rng.randint(0, 2), rng)
    candidate = JobSpec("cq", rng.randint(1, 4), rng.randint(1, 3))
    return Scenario("nodes", name, [FlavorSpec("a")], nodes, [queue], background, candidate)


def _priority(rng: random.Random, name: str) -> Scenario:
    nominal = rng.randint(2, 6)
    background = [
        JobSpec("cq", job.gpus, job.count, priority="low")
        for job in _split("cq", nominal - rng.randint(0, 1), rng)
    ]
    queue = QueueSpec("cq", {"a": (nominal, None, None)}, preempt=rng.random() < 0.5)
    candidate = JobSpec("cq", rng.randint(1, 3), 1, priority="high")
    nodes = [("a", 8, False)]
    return Scenario("priority", name, [FlavorSpec("a")], nodes, [queue], background, candidate)


_MAKERS: dict[str, Any] = {
    "quota": _quota,
    "flavors": _flavors,
    "cohort": _cohort,
    "fungibility": _fungibility,
    "nodes": _nodes,
    "priority": _priority,
}


def _split(queue: str, gpus: int, rng: random.Random) -> list[JobSpec]:
    """Jobs of one pod each that hold `gpus` GPUs between them."""
    jobs = []
    while gpus > 0:
        take = rng.randint(1, min(gpus, 3))
        jobs.append(JobSpec(queue, take))
        gpus -= take
    return jobs
