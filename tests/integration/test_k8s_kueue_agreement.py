"""The real Kueue and the real kube-scheduler as the judges of `explain` on queued Jobs.

Seeded scenarios (kueue_scenarios.py), each a world of its own in one control plane with one
Kueue: flavors with node labels and taints, ClusterQueues alone or in a cohort with borrowing
and lending limits, Jobs already admitted, priorities. Before each candidate Job is
submitted, `kube-gpu-exporter explain -f job.yaml` predicts: will Kueue admit it now (and in
which flavor), and will its pods then fit nodes. Then it is submitted, and Kueue's
QuotaReserved condition and the scheduler's binding of every pod decide. A verdict that
names a limit it does not judge (preemption, where the queue may preempt) is counted apart;
every other verdict must agree. KGE_REWRITE_DOCS=1 writes the table into
docs/kueue-agreement.md.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from kueue import Kueue
from kueue_bench import (
    V1BETA2,
    add_node,
    add_queues,
    cluster_queue_spec,
    condition,
    explain,
    flavor_quota,
    gpu_job,
    gpu_pod_spec,
    job_pods,
    kueue_bench,
    kueue_object,
    wait_active,
    workload_of,
)
from kueue_scenarios import (
    FAMILIES,
    GPU,
    POOL,
    FlavorSpec,
    JobSpec,
    QueueSpec,
    Scenario,
    generate,
)

from kube_gpu_exporter.demo.kube_api.cluster_objects import GPU_TAINT
from support import wait_until

pytestmark = pytest.mark.k8s

SEED = 7
PER_FAMILY = 10
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
DOC = Path(__file__).parents[2] / "docs" / "kueue-agreement.md"
BEGIN, END = "<!-- BEGIN kueue-table -->", "<!-- END kueue-table -->"
ASSIGNED = re.compile(r"Kueue would assign (\S+) for ")
REFUSED = re.compile(r"^will not be admitted (?:now|without preemption): (.*)$", re.MULTILINE)
PREEMPTING = "Pending the preemption of"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kueue]]:
    with kueue_bench(tmp_path_factory.mktemp("kueue-bench")) as (plane, kueue):
        for name, value in (("low", 100), ("high", 1000)):
            plane.ok(
                "POST",
                f"{V1BETA2}/workloadpriorityclasses",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        yield plane, kueue


@dataclass
class Said:
    admitted: bool
    fits: bool
    flavor: str
    limited: bool
    message: str
    output: str


@dataclass
class Done:
    admitted: bool
    fits: bool
    flavor: str
    message: str


def _world(plane: ControlPlane, s: Scenario) -> None:
    plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": s.name}})
    for flavor in s.flavors:
        spec: dict[str, Any] = {"nodeLabels": {POOL: s.pool(flavor.name)}}
        if flavor.taint:
            spec["nodeTaints"] = [flavor.taint]
            if flavor.tolerates:
                spec["tolerations"] = [{"key": flavor.taint["key"], "operator": "Exists"}]
        made = kueue_object("ResourceFlavor", s.pool(flavor.name), spec)
        plane.ok("POST", f"{V1BETA2}/resourceflavors", made)
    taints = {f.name: f.taint for f in s.flavors}
    for number, (flavor, gpus, broken) in enumerate(s.nodes):
        extra = [taints[flavor]] if taints[flavor] else []
        if broken:
            extra.append({"key": f"{s.name}-broken", "effect": "NoSchedule"})
        add_node(
            plane,
            f"{s.name}-n{number}",
            gpus,
            labels={POOL: s.pool(flavor)},
            taints=(GPU_TAINT, *extra),
        )
    for queue in s.queues:
        spec = cluster_queue_spec(
            *(flavor_quota(s.pool(f), *limits) for f, limits in queue.flavors.items())
        )
        if queue.cohort:
            spec["cohortName"] = queue.cohort
        if queue.fungibility:
            spec["flavorFungibility"] = {"whenCanBorrow": queue.fungibility}
        if queue.preempt:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        add_queues(plane, s.name, f"{s.name}-{queue.name}", f"lq-{queue.name}", spec)


def _job(s: Scenario, name: str, job: JobSpec) -> dict[str, Any]:
    labels = {PRIORITY_LABEL: job.priority} if job.priority else {}
    tolerations = [{"key": job.tolerate, "operator": "Exists"}] if job.tolerate else []
    pod = gpu_pod_spec(job.gpus, tolerations=tolerations, node_selector=job.node_selector)
    return gpu_job(name, f"lq-{job.queue}", pod, job.count, namespace=s.name, labels=labels)


def _decided(plane: ControlPlane, ns: str, job: str) -> dict[str, Any] | None:
    """The Workload once Kueue has said QuotaReserved either way, and is not waiting for the
    workloads it preempts to go (it admits once they have)."""
    workload = workload_of(plane, ns, job=job)
    reserved = condition(workload, "QuotaReserved")
    if not reserved or PREEMPTING in (reserved.get("message") or ""):
        return None
    return workload


def _pods_settled(
    plane: ControlPlane, ns: str, job: str, count: int
) -> list[dict[str, Any]] | None:
    pods = job_pods(plane, ns, job)
    if len(pods) < count:
        return None
    for pod in pods:
        scheduled = condition(pod, "PodScheduled")
        if not pod["spec"].get("nodeName") and not (
            scheduled
            and scheduled["status"] == "False"
            and scheduled.get("reason") == "Unschedulable"
        ):
            return None
    return pods


def _predict(plane: ControlPlane, s: Scenario, manifest: Path) -> Said:
    run = explain(plane, "-f", str(manifest))
    assert run.returncode in (0, 1), f"{s.name}: {run.returncode} {run.stderr}"
    out = run.stdout
    admitted = "would be admitted" in out or "admitted by quota" in out
    assigned = ASSIGNED.search(out)
    flavor = assigned.group(1).removeprefix(f"{s.name}-") if assigned else ""
    limited = "without preemption" in out
    refused = REFUSED.search(out)
    assert (run.returncode == 0) == ("would be admitted and scheduled" in out), out
    return Said(
        admitted, run.returncode == 0, flavor, limited, refused.group(1) if refused else "", out
    )


def test_explain_agrees_with_kueue_and_the_scheduler(
    bench: tuple[ControlPlane, Kueue], tmp_path: Path
) -> None:
    plane, kueue = bench
    tag = f"k{uuid.uuid4().hex[:4]}"
    scenarios = generate(SEED, PER_FAMILY, tag)
    for s in scenarios:
        _world(plane, s)
    wait_active(plane, [f"{s.name}-{q.name}" for s in scenarios for q in s.queues], timeout=120)
    # the Jobs already there: admitted one after another (each into a queue with room), settled
    for s in scenarios:
        for number, job in enumerate(s.background):
            plane.ok(
                "POST", f"/apis/batch/v1/namespaces/{s.name}/jobs", _job(s, f"bg{number}", job)
            )
    for s in scenarios:
        for number, job in enumerate(s.background):
            workload = wait_until(
                lambda s=s, n=number: _decided(plane, s.name, f"bg{n}"),
                timeout=180,
                what=f"{s.name}/bg{number} decided",
            )
            reserved = condition(workload, "QuotaReserved")
            assert reserved and reserved["status"] == "True", (s, workload["status"])
            wait_until(
                lambda s=s, n=number, j=job: _pods_settled(plane, s.name, f"bg{n}", j.count),
                timeout=180,
                what=f"{s.name}/bg{number}'s pods settled",
            )
    # explain -f on each candidate before it exists
    manifests = []
    for s in scenarios:
        path = tmp_path / f"{s.name}.yaml"
        path.write_text(yaml.safe_dump(_job(s, "candidate", s.candidate)))
        manifests.append(path)
    with ThreadPoolExecutor(4) as pool:
        said = list(pool.map(lambda a: _predict(plane, *a), zip(scenarios, manifests, strict=True)))
    # then the real components decide
    for s in scenarios:
        plane.ok(
            "POST", f"/apis/batch/v1/namespaces/{s.name}/jobs", _job(s, "candidate", s.candidate)
        )
    done = []
    for s in scenarios:
        workload = wait_until(
            lambda s=s: _decided(plane, s.name, "candidate"), timeout=180, what=f"{s.name} decided"
        )
        reserved = condition(workload, "QuotaReserved") or {}
        admitted = reserved.get("status") == "True"
        flavor, fits = "", False
        if admitted:
            assignment = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
            flavor = assignment[GPU].removeprefix(f"{s.name}-")
            pods = wait_until(
                lambda s=s: _pods_settled(plane, s.name, "candidate", s.candidate.count),
                timeout=180,
                what=f"{s.name}'s candidate pods settled",
            )
            fits = all(p["spec"].get("nodeName") for p in pods)
        done.append(Done(admitted, fits, flavor, str(reserved.get("message") or "")))
    # tally
    rows: dict[str, Counter[str]] = {f: Counter() for f in FAMILIES}
    wrong = []
    for s, ours, theirs in zip(scenarios, said, done, strict=True):
        row = rows[s.family]
        row["scenarios"] += 1
        row["admitted"] += theirs.admitted
        row["scheduled"] += theirs.fits
        agree = (ours.admitted, ours.fits) == (theirs.admitted, theirs.fits) and (
            not theirs.admitted or ours.flavor == theirs.flavor
        )
        if ours.limited and not agree:
            row["stated limit"] += 1
            continue
        row["agree" if agree else "disagree"] += 1
        if not theirs.admitted and not ours.admitted:
            row["refused"] += 1
            row["same message"] += ours.message == theirs.message
        if not agree:
            wrong.append((s, ours, theirs))
    table = _table(rows)
    for s, ours, theirs in zip(scenarios, said, done, strict=True):
        print(
            f"{s.family} {s.name}: {ours.admitted=} {ours.fits=} {ours.flavor=} "
            f"{ours.limited=} | {theirs}"
        )
    print(table)
    if os.environ.get("KGE_REWRITE_DOCS") == "1":
        text = DOC.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        DOC.write_text(text[:start] + "\n" + table + text[end:])
    detail = "\n\n".join(
        f"{s.family} {s.name}: explain said {o.admitted=} {o.fits=} {o.flavor=}; Kueue and the "
        f"scheduler: {t.admitted=} {t.fits=} {t.flavor=} ({t.message})\n{s}\n{o.output}"
        for s, o, t in wrong
    )
    assert not wrong, f"{len(wrong)} verdicts disagree:\n{detail}"
    worded = [
        (s.name, o.message, t.message)
        for s, o, t in zip(scenarios, said, done, strict=True)
        if not o.admitted and not t.admitted and o.message != t.message
    ]
    assert not worded, f"Kueue words these refusals otherwise: {worded}"
    assert sum(r["scenarios"] for r in rows.values()) == len(FAMILIES) * PER_FAMILY
    assert kueue.log_tail(5)  # Kueue ran throughout


def _table(rows: dict[str, Counter[str]]) -> str:
    lines = [
        "| family | scenarios | admitted by Kueue | all pods bound | agree | stated limit "
        "| disagree | Kueue's message, word for word |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family, row in rows.items():
        lines.append(
            f"| {family} | {row['scenarios']} | {row['admitted']} | {row['scheduled']} | "
            f"{row['agree']} | {row['stated limit']} | {row['disagree']} | "
            f"{row['same message']} of {row['refused']} |"
        )
    return "\n".join(lines) + "\n"


def test_explain_names_a_job_or_its_workload(bench: tuple[ControlPlane, Kueue]) -> None:
    """`explain job/NAME` and `workload/NAME` on Jobs Kueue holds: one admitted (its pod
    bound), one waiting with Kueue's own words, its position unknown (the visibility API is
    off in this bench), and a Job that does not exist (exit 2, one line)."""
    plane, _ = bench
    s = Scenario(
        "cli", f"cli{uuid.uuid4().hex[:4]}", [FlavorSpec("a")], [("a", 4, False)],
        [QueueSpec("cq", {"a": (2, None, None)})], [], JobSpec("cq", 1),
    )  # fmt: skip
    _world(plane, s)
    jobs = f"/apis/batch/v1/namespaces/{s.name}/jobs"
    plane.ok("POST", jobs, _job(s, "first", JobSpec("cq", 2)))
    first = wait_until(lambda: _decided(plane, s.name, "first"), timeout=120, what="first decided")
    assert (condition(first, "QuotaReserved") or {}).get("status") == "True"
    wait_until(lambda: _pods_settled(plane, s.name, "first", 1), timeout=120, what="first's pod")
    plane.ok("POST", jobs, _job(s, "second", JobSpec("cq", 1)))
    second = wait_until(lambda: _decided(plane, s.name, "second"), timeout=120, what="second")
    assert (condition(second, "QuotaReserved") or {}).get("status") == "False"

    admitted = explain(plane, "job/first", "-n", s.name)
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert f"LocalQueue lq-cq → ClusterQueue {s.name}-cq" in admitted.stdout
    assert "QuotaReserved=True" in admitted.stdout
    assert f"admitted by Kueue in {s.name}-a for {GPU}" in admitted.stdout

    for target in ("job/second", f"workload/{second['metadata']['name']}"):
        waiting = explain(plane, target, "-n", s.name)
        assert waiting.returncode == 1, waiting.stdout + waiting.stderr
        assert "QuotaReserved=False Pending: couldn't assign flavors" in waiting.stdout
        assert "position: unknown (visibility API not served)" in waiting.stdout
        assert (
            waiting.stdout.rstrip()
            .splitlines()[-2]
            .startswith(
                "will not be admitted now: couldn't assign flavors to pod set main: insufficient "
                f"unused quota for {GPU} in flavor {s.name}-a, 1 more needed"
            )
        ), waiting.stdout

    missing = explain(plane, "job/absent", "-n", s.name)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == f"kube-gpu-exporter: error: job {s.name}/absent not found\n"


def test_without_kueue_a_queued_job_is_its_pod_template(tmp_path: Path) -> None:
    """No Kueue in the cluster: one note line, then the pod template's plain explain."""
    with run_control_plane(tmp_path / "plane", scheduler=True) as plane:
        add_node(plane, "h100-0", 8)
        s = Scenario("none", "team", [], [], [], [], JobSpec("cq", 2))
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": s.name}})
        wait_until(
            lambda: (
                plane.request("GET", f"/api/v1/namespaces/{s.name}/serviceaccounts/default")[0]
                in (200, 404)
            ),
            what="the namespace",
        )
        manifest = tmp_path / "job.yaml"
        manifest.write_text(yaml.safe_dump(_job(s, "train", s.candidate)))
        said = explain(plane, "-f", str(manifest))
        assert said.returncode == 0, said.stdout + said.stderr
        assert said.stderr == (
            "kube-gpu-exporter: note: the Job names LocalQueue lq-cq but the cluster serves no "
            "kueue.x-k8s.io API (no Kueue): its pod template is judged alone\n"
        )
        assert said.stdout.startswith(f"pod {s.name}/train (not created yet) requests")
        assert "would schedule" in said.stdout
        absent = explain(plane, "workload/w", "-n", s.name)
        assert absent.returncode == 2
        assert "serves no kueue.x-k8s.io API" in absent.stderr


def test_a_waiting_job_s_position_from_kueue_s_visibility_api(tmp_path: Path) -> None:
    """Kueue's visibility API served (aggregated by the API server): explain names the
    waiting Workload's position in its LocalQueue and ClusterQueue, as Kueue reports it."""
    with kueue_bench(tmp_path, visibility=True) as (plane, kueue):
        assert kueue.visibility_port is not None
        s = Scenario(
            "cli", "seen", [FlavorSpec("a")], [("a", 4, False)],
            [QueueSpec("cq", {"a": (1, None, None)})], [], JobSpec("cq", 1),
        )  # fmt: skip
        _world(plane, s)
        wait_active(plane, ["seen-cq"])
        jobs = f"/apis/batch/v1/namespaces/{s.name}/jobs"
        plane.ok("POST", jobs, _job(s, "first", JobSpec("cq", 1)))
        wait_until(lambda: _decided(plane, s.name, "first"), timeout=120, what="first")
        for name in ("second", "third"):
            plane.ok("POST", jobs, _job(s, name, JobSpec("cq", 1)))
            made = wait_until(lambda n=name: _decided(plane, s.name, n), timeout=120, what=name)
            # Kueue orders a queue by creation time, in whole seconds, and a tie by uid: the
            # next Job is created in a later second, or the two positions are a coin toss
            stamp = made["metadata"]["creationTimestamp"].replace("Z", "+00:00")
            created = datetime.fromisoformat(stamp).timestamp()
            wait_until(lambda c=created: time.time() >= c + 1, what=f"a second after {name}")
        third = workload_of(plane, s.name, job="third")
        assert third is not None
        listed = plane.ok(
            "GET",
            f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{s.name}/localqueues/lq-cq/"
            "pendingworkloads",
        )
        positions = {
            w["metadata"]["name"]: (w["positionInLocalQueue"], w["positionInClusterQueue"])
            for w in listed["items"]
        }
        assert positions[third["metadata"]["name"]] == (1, 1), positions
        said = explain(plane, "job/third", "-n", s.name)
        assert said.returncode == 1, said.stdout + said.stderr
        assert "position: 1 in its LocalQueue, 1 in its ClusterQueue (0 is next)" in said.stdout
