"""The real kube-scheduler as the judge of the cluster view and `explain`: a differential test.

A seeded generator (oracle_scenarios.py) makes hundreds of small GPU clusters in one real
control plane, each with one candidate pod, and then families of scenarios that each vary one
thing the API server or the scheduler decides (quotas on pods, CPU and memory, scoped quotas,
RuntimeClasses, LimitRanges, invalid manifests, spec.nodeName, Gt/Lt label values, nodes
whose Ready is Unknown, inter-pod affinity, spread, host ports, preemption). Before the
candidates are created, the cluster is read back from the API server and each candidate's
manifest judged as `explain -f` does (the API server's dry run, then the classification);
after the scheduler has settled, each is classified again as the cluster view does, and both
are held to what the scheduler (and the API server's admission and validation) did:

- fits or not: the scheduler bound the pod ⇔ it fit (on the state before, or, when it bound
  by preempting, on the state after with itself taken out), 100 %;
- node verdicts: the scheduler's message counts, per failure, the nodes it stopped at
  ("1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu"); the counts predicted
  from our per-node checks must be the same;
- reason: the filter our reason blames is among those the scheduler names (the agreement
  table, docs/scheduler-agreement.md, written by this test: KGE_REWRITE_DOCS=1 rewrites it);
- refusals: the dry run refused exactly the candidates the API server refused, with the same
  message (422 for an invalid one, 403 for a quota or another admission plugin);
- limits: where explain's verdict names what it does not judge (limits.py), a verdict the
  scheduler contradicts is counted apart; everywhere else, every verdict must agree.

The real `explain` CLI runs against the same API server for a sample, to prove the wiring.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from oracle_scenarios import FAMILIES, HIGH_PRIORITY, ROLE, Scenario, generate

from kube_gpu_exporter.exporter.cluster import (
    ClusterView,
    Node,
    Pod,
    Quota,
    Reason,
    check_node,
    classify,
    parse_node,
    parse_pod,
    parse_quota,
)
from kube_gpu_exporter.exporter.cluster.explain import limits
from kube_gpu_exporter.exporter.cluster.explain.admission import admit
from kube_gpu_exporter.exporter.cluster.explain.api import ApiReader, default_kubeconfig
from kube_gpu_exporter.exporter.cluster.explain.manifest import load_manifest, read_manifest
from kube_gpu_exporter.exporter.cluster.objects import UNSCHEDULABLE_TAINT
from kube_gpu_exporter.exporter.cluster.settings import DEFAULT_SETTINGS
from kube_gpu_exporter.exporter.input_errors import InputError
from support import exporter_command, wait_until

pytestmark = pytest.mark.k8s

SEED = 21
SCENARIOS = 520
PER_FAMILY = 10
DOC = Path(__file__).parents[2] / "docs" / "scheduler-agreement.md"
BEGIN, END = "<!-- BEGIN oracle-table -->", "<!-- END oracle-table -->"
FAMILY_BEGIN, FAMILY_END = "<!-- BEGIN oracle-families -->", "<!-- END oracle-families -->"
CLI_SAMPLE = 5  # scenarios whose candidate the real CLI also judges, each way

UNSCHEDULABLE = "node(s) were unschedulable"
TAINTED = "node(s) had untolerated taint(s)"
UNMATCHED = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
ELSEWHERE = re.compile(r"node\(s\) didn't satisfy plugin\(s\) \[NodeAffinity\]")
MESSAGE = re.compile(r"^0/(\d+) nodes are available: (.*?)\.( preemption: .*)?$")
ENTRY = re.compile(r"(\d+) (.*?)(?=, \d+ |$)")


# ---- the run: scenarios in, the scheduler's verdicts out -------------------------------------


@dataclass
class Judged:
    """explain -f's verdict on a manifest: the classification of the pod the dry run
    admitted, or the dry run's refusal (`quota`: a quota's), or the manifest invalid, or
    bound by its spec.nodeName; `stated`: the limits its verdict names."""

    result: Any = None  # Classification
    refusal: str = ""
    quota: bool = False
    invalid: str = ""
    bound_to: str = ""
    stated: tuple[str, ...] = ()


@dataclass
class Outcome:
    """One candidate: what we said and what the real components did."""

    scenario: Scenario
    judged: Judged  # explain -f on the state before
    refused: str = ""  # the API server's refusal of the candidate (admission, validation)
    refused_status: int = 0
    created: dict[str, Any] = field(default_factory=dict)  # the candidate as created
    as_written: Any = None  # Classification of the manifest as written (explain -f before)
    node: str = ""  # where the scheduler bound it
    message: str = ""  # PodScheduled=False's message, the final verdict
    events: tuple[str, ...] = ()  # FailedScheduling messages, oldest first
    after: Any = None  # Classification on the final state (the cluster view's)
    predicted: Counter[str] | None = None  # the message's counts, from our node checks
    total_nodes: int = 0
    probes: dict[str, str] = field(default_factory=dict)  # probe kind → "" (bound) or message

    @property
    def before(self) -> Any:
        return self.judged.result


def _pool(calls: Iterable[Callable[[], Any]], workers: int = 12) -> list[Any]:
    with ThreadPoolExecutor(workers) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def _list(plane: ControlPlane, path: str) -> list[dict[str, Any]]:
    items, token = [], ""
    while True:
        sep = "&" if "?" in path else "?"
        page = plane.ok("GET", f"{path}{sep}limit=500" + (f"&continue={token}" if token else ""))
        items += page["items"]
        token = page["metadata"].get("continue") or ""
        if not token:
            return items


@dataclass
class State:
    nodes: dict[str, Node]
    pods: list[Pod]
    quotas: dict[str, list[Quota]]
    raw_nodes: int

    @classmethod
    def read(cls, plane: ControlPlane) -> State:
        nodes = [parse_node(n) for n in _list(plane, "/api/v1/nodes")]
        pods = [parse_pod(p) for p in _list(plane, "/api/v1/pods")]
        quotas: dict[str, list[Quota]] = {}
        for raw in _list(plane, "/api/v1/resourcequotas"):
            quota = parse_quota(raw)
            assert quota is not None
            quotas.setdefault(quota.namespace, []).append(quota)
        return cls(
            nodes={n.name: n for n in nodes if n is not None},
            pods=[p for p in pods if p is not None],
            quotas=quotas,
            raw_nodes=len(nodes),
        )

    def view(self, scenario: Scenario, without: tuple[str, str] | None = None) -> ClusterView:
        """The scenario's own nodes, the pods bound to them, its namespace's quotas."""
        names = set(scenario.node_names)
        pods = [
            p
            for p in self.pods
            if (p.node_name in names or p.namespace == scenario.namespace)
            and (p.namespace, p.name) != without
        ]
        return ClusterView.build(
            (self.nodes[n] for n in sorted(names)),
            pods,
            self.quotas.get(scenario.namespace, ()),
        )


def _prepare(plane: ControlPlane, scenarios: list[Scenario]) -> None:
    plane.ok(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": HIGH_PRIORITY}, "value": 1000},
    )
    _pool(
        lambda s=s: plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": s.namespace}})
        for s in scenarios
    )
    quotas = [(s, q) for s in scenarios for q in s.all_quotas]
    _pool(
        lambda s=s, q=q: plane.ok("POST", f"/api/v1/namespaces/{s.namespace}/resourcequotas", q)
        for s, q in quotas
    )

    def counted() -> bool:  # admission refuses pods until the controller has filled status
        listed = _list(plane, "/api/v1/resourcequotas")
        return sum(1 for q in listed if q.get("status", {}).get("hard")) == len(quotas)

    wait_until(counted, timeout=60, what="every quota's status filled")
    _pool(lambda n=n: plane.ok("POST", "/api/v1/nodes", n) for s in scenarios for n in s.nodes)
    _pool(
        lambda p=p: plane.ok("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
        for s in scenarios
        for p in s.background
    )
    _pool(lambda o=o: plane.ok("POST", o[0], o[1]) for s in scenarios for o in s.objects)
    barrier = {
        "metadata": {"name": "oracle-barrier", "labels": {"oracle-barrier": "yes"}},
        "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "100"}},
    }
    barrier["status"]["capacity"] = barrier["status"]["allocatable"]
    plane.ok("POST", "/api/v1/nodes", barrier)
    _barrier(plane, "oracle-barrier-0")


def _barrier(plane: ControlPlane, name: str) -> None:
    """A pod created after everything before it; once the scheduler has bound it to the
    barrier node (created after every scenario node), its node and pod informers have
    delivered all that came before: creations, bindings, deletions."""
    plane.ok(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"oracle-barrier": "yes"},
                "containers": [{"name": "c", "image": "registry.invalid/none"}],
            },
        },
    )
    wait_until(
        lambda: plane.ok("GET", f"/api/v1/namespaces/default/pods/{name}")["spec"].get("nodeName"),
        timeout=120,
        what=f"{name} bound",
    )


def _create_candidate(plane: ControlPlane, scenario: Scenario) -> tuple[int, str]:
    """(201, '') when created, else the API server's status and refusal."""
    status, answer = plane.request(
        "POST", f"/api/v1/namespaces/{scenario.namespace}/pods", scenario.candidate
    )
    if status == 201:
        return status, ""
    assert status in (403, 422), (status, answer)
    return status, " ".join(str(answer["message"]).split())


def judge_manifest(
    reader: ApiReader, view: ClusterView, path: Path, namespace: str
) -> tuple[Judged, Any]:
    """explain -f's judgement, in-process: the manifest dry-run created, the admitted pod
    classified on `view`; with the parsed pod (None where there is none)."""
    manifest = read_manifest(str(path), namespace)
    try:
        admission = admit(reader, manifest, f"manifest {path}")
    except InputError as exc:
        return Judged(invalid=str(exc)), None
    if admission.refusal:
        return Judged(refusal=admission.refusal, quota=admission.quota), None
    assert admission.pod is not None, admission.unasked
    pod = parse_pod(admission.pod)
    assert pod is not None
    if pod.node_name:
        return Judged(bound_to=pod.node_name), pod
    result = classify(view, pod)  # admitted: every quota passed
    stated = limits.unchecked(admission.pod, pod)
    if limits.preemptible(view, admission.pod, pod, result):
        stated += (limits.PREEMPTION,)
    return Judged(result=result, stated=stated), pod


def _settled(
    plane: ControlPlane, expected: int, role: str = "candidate"
) -> list[dict[str, Any]] | None:
    """The pods of `role`, once each is bound or judged unschedulable with no preemption
    under way; None before."""
    pods = _list(plane, f"/api/v1/pods?labelSelector={ROLE}%3D{role}")
    if len(pods) != expected:
        return None
    for pod in pods:
        if pod["spec"].get("nodeName"):
            continue
        scheduled = _condition(pod, "PodScheduled")
        if not scheduled or scheduled.get("reason") != "Unschedulable":
            return None
        if pod["status"].get("nominatedNodeName"):
            return None
    return pods


def _condition(pod: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    found = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


def _events(plane: ControlPlane) -> dict[tuple[str, str], list[str]]:
    """FailedScheduling messages per pod, oldest first."""
    events = _list(plane, "/apis/events.k8s.io/v1/events?fieldSelector=reason%3DFailedScheduling")
    by_pod: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for event in events:
        regarding = event["regarding"]
        when = (event.get("series") or {}).get("lastObservedTime") or event.get("eventTime")
        key = (regarding.get("namespace", ""), regarding.get("name", ""))
        by_pod.setdefault(key, []).append((when or "", event.get("note", "")))
    return {key: [note for _, note in sorted(found)] for key, found in by_pod.items()}


def _explain_cli(plane: ControlPlane, *args: str, kubeconfig: Path | None = None) -> Any:
    return subprocess.run(
        exporter_command(
            "explain", "--kubeconfig", str(kubeconfig or plane.kubeconfig), "--color=never", *args
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class OracleRun:
    outcomes: list[Outcome]
    cli_manifests: list[tuple[Outcome, Any, Judged]]  # explain -f, whole-cluster judgement
    cli_pending: list[tuple[Outcome, int, str, Any]]  # explain POD, whole-cluster classification
    seconds: dict[str, float]
    plane: ControlPlane
    workdir: Path


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OracleRun]:
    started = time.monotonic()
    seconds: dict[str, float] = {}
    scenarios = generate(SEED, SCENARIOS, PER_FAMILY)
    workdir = tmp_path_factory.mktemp("oracle")
    with run_control_plane(
        workdir,
        scheduler=True,
        controllers=("resourcequota",),
        extra_scheduler_args=("--kube-api-qps=500", "--kube-api-burst=1000"),
    ) as plane:
        seconds["control plane up"] = time.monotonic() - started
        _prepare(plane, scenarios)
        seconds["scenarios created"] = time.monotonic() - started
        before = State.read(plane)
        reader = ApiReader(default_kubeconfig(str(plane.kubeconfig)), DEFAULT_SETTINGS)

        def judged(scenario: Scenario) -> Outcome:  # explain -f, in-process
            path = workdir / f"{scenario.namespace}.yaml"
            path.write_text(yaml.safe_dump(scenario.candidate))
            view = before.view(scenario)
            outcome = Outcome(scenario, judge_manifest(reader, view, path, scenario.namespace)[0])
            written = load_manifest(str(path), scenario.namespace)
            outcome.as_written = classify(view, written, admitted=False)
            return outcome

        outcomes = _pool((lambda s=s: judged(s)) for s in scenarios)
        seconds["manifests judged"] = time.monotonic() - started
        sample = outcomes[:CLI_SAMPLE] + [
            next(o for o in outcomes if o.scenario.family == family) for family in FAMILIES
        ]
        manifests = _cli_manifests(plane, reader, workdir, sample)
        refusals = _pool(lambda s=s: _create_candidate(plane, s) for s in scenarios)
        for outcome, (status, refusal) in zip(outcomes, refusals, strict=True):
            outcome.refused, outcome.refused_status = refusal, status if refusal else 0
        created = sum(1 for _, r in refusals if not r)
        pods = wait_until(
            lambda: _settled(plane, created), timeout=240, what="the scheduler settled"
        )
        seconds["scheduler settled"] = time.monotonic() - started
        _judge(plane, outcomes, pods)
        seconds["verdicts compared"] = time.monotonic() - started
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": PROBE_NAMESPACE}})
        waiting = [o for o in outcomes if o.message]
        for kind in (TOLERATING, OPEN):
            _probe_round(plane, waiting, kind)
            seconds[f"{kind} probes"] = time.monotonic() - started
        cli_pending = _cli_pending(plane, waiting[:CLI_SAMPLE])
        seconds["CLI sample"] = time.monotonic() - started
        if os.environ.get("KGE_ORACLE_DUMP"):  # every differing case, to study them
            wrong = [_describe(o) for o in outcomes if not agrees(o)]
            Path(os.environ["KGE_ORACLE_DUMP"]).write_text("\n".join(wrong))
        try:
            yield OracleRun(outcomes, manifests, cli_pending, seconds, plane, workdir)
        finally:
            reader.close()


def _judge(plane: ControlPlane, outcomes: list[Outcome], pods: list[dict[str, Any]]) -> None:
    events = _events(plane)
    after = State.read(plane)
    by_namespace = {p["metadata"]["namespace"]: p for p in pods}
    for outcome in outcomes:
        scenario = outcome.scenario
        raw = by_namespace.get(scenario.namespace)
        if raw is None:
            continue
        outcome.node = raw["spec"].get("nodeName") or ""
        outcome.created = raw
        outcome.events = tuple(events.get((scenario.namespace, "candidate"), ()))
        outcome.total_nodes = after.raw_nodes
        pod = parse_pod(raw)
        assert pod is not None
        if outcome.node:  # bound: does it fit where it is, with itself taken out?
            view = after.view(scenario, without=(pod.namespace, pod.name))
            unbound = parse_pod({**raw, "spec": {**raw["spec"], "nodeName": ""}})
            assert unbound is not None
            outcome.after = classify(view, unbound)
        else:
            scheduled = _condition(raw, "PodScheduled") or {}
            outcome.message = str(scheduled.get("message", ""))
            view = after.view(scenario)
            outcome.after = classify(view, pod)
            outcome.predicted = predicted_message(view, pod)


def _cli_manifests(
    plane: ControlPlane, reader: ApiReader, workdir: Path, outcomes: list[Outcome]
) -> list[tuple[Outcome, Any, Judged]]:
    """The real CLI's `explain -f` on each outcome's manifest, and the in-process judgement
    of the same manifest on the whole cluster listed from the API server."""
    whole = State.read(plane)

    def one(outcome: Outcome) -> tuple[Outcome, Any, Judged]:
        namespace = outcome.scenario.namespace
        path = workdir / f"{namespace}.yaml"
        run = _explain_cli(plane, "-f", str(path))
        quotas = whole.quotas.get(namespace, ())
        view = ClusterView.build(whole.nodes.values(), whole.pods, quotas)
        return outcome, run, judge_manifest(reader, view, path, namespace)[0]

    return _pool((lambda o=o: one(o) for o in outcomes), workers=4)


def _cli_pending(
    plane: ControlPlane, outcomes: list[Outcome]
) -> list[tuple[Outcome, int, str, Any]]:
    whole = State.read(plane)
    views = ClusterView.build(whole.nodes.values(), whole.pods, ())

    def one(outcome: Outcome) -> tuple[Outcome, int, str, Any]:
        namespace = outcome.scenario.namespace
        run = _explain_cli(plane, "candidate", "-n", namespace)
        status, out = run.returncode, run.stdout
        pod = next(p for p in whole.pods if p.namespace == namespace and p.name == "candidate")
        return outcome, status, out, classify(views, pod)

    return _pool((lambda o=o: one(o) for o in outcomes), workers=4)


# ---- probes: what the scheduler says of the pod with a filter lifted -------------------------

PROBE_NAMESPACE = "oracle-probes"
TOLERATING, OPEN = "tolerating", "open"  # every taint tolerated; and no node selection either


def _probe(outcome: Outcome, kind: str) -> dict[str, Any]:
    """The candidate as created (admission's defaults, overhead and selectors in it)
    tolerating every taint (cordons included) and, `OPEN`, selecting no node but its
    scenario's (its RuntimeClass's twin without scheduling); without priority, so that it
    preempts nothing."""
    pod = {"spec": copy.deepcopy(outcome.created["spec"])}
    pod["metadata"] = {
        "name": f"{kind}-{outcome.scenario.index}",
        "namespace": PROBE_NAMESPACE,
        "labels": {ROLE: kind},
    }
    spec = pod["spec"]
    for key in ("priorityClassName", "priority", "preemptionPolicy"):
        spec.pop(key, None)
    spec["tolerations"] = [{"operator": "Exists"}]
    if kind == OPEN:
        spec.pop("nodeSelector", None)
        if spec.get("runtimeClassName"):
            spec["runtimeClassName"] += "-open"
        affinity = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        affinity["nodeSelectorTerms"] = [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
            for name in outcome.scenario.node_names
        ]
    return pod


def _probe_round(plane: ControlPlane, outcomes: list[Outcome], kind: str) -> None:
    """Every probe of `kind` created at once, judged, recorded, then deleted (and the
    scheduler made to see the deletions) before the next round."""
    path = f"/api/v1/namespaces/{PROBE_NAMESPACE}/pods"
    _pool(lambda o=o: plane.ok("POST", path, _probe(o, kind)) for o in outcomes)
    pods = wait_until(
        lambda: _settled(plane, len(outcomes), kind), timeout=240, what=f"{kind} probes judged"
    )
    by_name = {p["metadata"]["name"]: p for p in pods}
    for outcome in outcomes:
        pod = by_name[f"{kind}-{outcome.scenario.index}"]
        scheduled = _condition(pod, "PodScheduled") or {}
        verdict = "" if pod["spec"].get("nodeName") else str(scheduled.get("message", ""))
        outcome.probes[kind] = verdict
    plane.ok(
        "DELETE",
        f"{path}?labelSelector={ROLE}%3D{kind}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )
    _barrier(plane, f"oracle-barrier-{kind}")


# ---- reading the scheduler's verdict -----------------------------------------------------------


def message_counts(message: str) -> tuple[int, Counter[str], int]:
    """'0/12 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu,
    9 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: …' → (12, the counts of
    the scenario's own nodes, 9 nodes the pinning left out)."""
    match = MESSAGE.match(message)
    assert match, f"not a scheduler verdict: {message!r}"
    counts: Counter[str] = Counter()
    elsewhere = 0
    for number, text in ENTRY.findall(match.group(2)):
        if ELSEWHERE.fullmatch(text):
            elsewhere += int(number)
        else:
            counts[text] += int(number)
    return int(match.group(1)), counts, elsewhere


def predicted_message(view: ClusterView, pod: Pod) -> Counter[str]:
    """The counts the scheduler's message should hold, from our checks of each node: its
    filters in kube-scheduler's order (NodeUnschedulable, TaintToleration, NodeAffinity,
    NodeResourcesFit), the first failing one reported, NodeResourcesFit with every resource
    short."""
    counts: Counter[str] = Counter()
    requested = view.gpu_requests(pod)
    for state in view.nodes.values():
        check = check_node(pod, state, requested, view.settings.gpu_type_labels)
        cordon = [t for t in check.untolerated if t.key == UNSCHEDULABLE_TAINT]
        if cordon and state.node.unschedulable:
            counts[UNSCHEDULABLE] += 1
        elif check.untolerated:
            counts[TAINTED] += 1
        elif not check.selectors.passed:
            counts[UNMATCHED] += 1
        else:
            for resource, amount in requested.items():
                if check.gpu_free.get(resource, 0) < amount:
                    counts[f"Insufficient {resource}"] += 1
            for short in check.short:
                counts[
                    TOO_MANY_PODS if short.resource == "pods" else f"Insufficient {short.resource}"
                ] += 1
    return counts


# What each reason claims would have to change, as one of four classes the probes tell apart.
TAINT_CLASS, SELECTOR_CLASS, RESOURCES_CLASS, GPUS_CLASS = "taints", "selectors", "other", "gpus"
CLASS_OF = {
    Reason.TAINT_NOT_TOLERATED: TAINT_CLASS,
    Reason.GPU_TYPE_UNAVAILABLE: SELECTOR_CLASS,
    Reason.AFFINITY_UNMATCHED: SELECTOR_CLASS,
    Reason.OTHER: RESOURCES_CLASS,
    Reason.INSUFFICIENT_GPUS: GPUS_CLASS,
    Reason.FRAGMENTED: GPUS_CLASS,
    Reason.NOT_ADVERTISED: GPUS_CLASS,
}


def scheduler_class(outcome: Outcome) -> str:
    """The scheduler's answer to "what keeps the pod off": it binds the pod once every
    taint is tolerated (taints); once, besides, it may use any node of its scenario
    (selectors); else some node has the GPUs but lacks CPU, memory or a pod slot (other),
    or none has them (gpus). The last two are read off the open probe's message: the nodes
    it does not count `Insufficient <gpu>` have the GPUs (one GPU resource per candidate)."""
    if outcome.probes[TOLERATING] == "":
        return TAINT_CLASS
    if outcome.probes[OPEN] == "":
        return SELECTOR_CLASS
    _, counts, _ = message_counts(outcome.probes[OPEN])
    short = max(counts[f"Insufficient {r}"] for r in outcome.after.requested)
    return RESOURCES_CLASS if short < len(outcome.scenario.nodes) else GPUS_CLASS


# ---- agreement ---------------------------------------------------------------------------------

BOUND, PREEMPTED, REFUSED, OTHER_REFUSAL, INVALID, NODE_NAME = (
    "fits (bound)",
    "fits after preemption (bound)",
    "quota_exceeded (refused)",
    "refused by another admission plugin",
    "invalid (422)",
    "spec.nodeName (bound by the API server)",
)


def row_of(outcome: Outcome) -> str:
    if outcome.refused_status == 422:
        return INVALID
    if outcome.refused:
        return REFUSED if "exceeded quota" in outcome.refused else OTHER_REFUSAL
    if outcome.judged.bound_to:
        return NODE_NAME
    if outcome.node:
        return PREEMPTED if outcome.before.reason is not None else BOUND
    return str(outcome.after.reason)


def fit_agrees(outcome: Outcome) -> bool:
    """Fits or not, as the scheduler (or the API server) decided: refused by the dry run
    exactly when the create was, with the same message; bound by spec.nodeName as said; a
    pod bound by preempting was said to fit only by preemption."""
    judged, before = outcome.judged, outcome.before
    if outcome.refused_status == 422 or judged.invalid:
        return outcome.refused_status == 422 and _same(judged.invalid, outcome.refused)
    if outcome.refused or judged.refusal:
        quota = "exceeded quota" in outcome.refused
        return judged.quota == quota and _same(judged.refusal, outcome.refused)
    if judged.bound_to:
        return outcome.node == judged.bound_to
    if outcome.node:  # it fits where it is, once the pods it preempted (if any) are gone
        fits_now = outcome.after.schedulable and outcome.node in outcome.after.fits
        # bound by preempting: the scheduler too found no room at first, and we said so
        preempted = bool(outcome.events) and limits.PREEMPTION in judged.stated
        return fits_now and (before.reason is None or preempted)
    return before.reason is not None and outcome.after.reason is not None


def _same(said: str, refused: str) -> bool:
    """explain's line holds the API server's message (cut, as every error line is)."""
    said = " ".join(said.split()).removesuffix("…")
    shown = said[said.index(refused[:40]) :] if refused[:40] in said else ""
    return bool(refused) and bool(shown) and refused.startswith(shown)


def nodes_agree(outcome: Outcome) -> bool:
    """The scheduler's per-failure node counts are the ones our node checks predict."""
    if not outcome.message or outcome.before is None:
        return True
    total, counts, elsewhere = message_counts(outcome.message)
    own = len(outcome.scenario.nodes)
    return total == outcome.total_nodes and elsewhere == total - own and counts == outcome.predicted


def reason_agrees(outcome: Outcome) -> bool:
    if not outcome.message or outcome.before is None:
        return True
    same = outcome.after.reason == outcome.before.reason
    return same and CLASS_OF.get(outcome.after.reason) == scheduler_class(outcome)


def agrees(outcome: Outcome) -> bool:
    return fit_agrees(outcome) and nodes_agree(outcome) and reason_agrees(outcome)


def excused(outcome: Outcome) -> bool:
    """A verdict that differs where it names what explain does not judge (limits.py)."""
    return not agrees(outcome) and bool(outcome.judged.stated)


def written_fit_agrees(outcome: Outcome) -> bool:
    """Fits or not as the manifest read as written (explain -f before the dry run) said:
    it never saw a refusal but its own GPU quota's, an invalid spec or spec.nodeName."""
    said = outcome.as_written
    if outcome.refused:
        quota = "exceeded quota" in outcome.refused
        return quota and said.reason is Reason.QUOTA_EXCEEDED and "nvidia" in outcome.refused
    if outcome.judged.bound_to or said.reason is Reason.QUOTA_EXCEEDED:
        return False
    if outcome.node:
        return said.reason is None or bool(outcome.events)
    return said.reason is not None


def family_table(outcomes: list[Outcome]) -> str:
    rows: dict[str, list[int]] = {}
    for outcome in outcomes:
        row = rows.setdefault(outcome.scenario.family, [0, 0, 0, 0, 0])
        row[0] += 1
        row[1] += written_fit_agrees(outcome)
        row[2] += agrees(outcome)
        row[3] += bool(outcome.judged.stated)
        row[4] += excused(outcome)
    lines = [
        "| family | cases | fit agreed, as written | agreed | limit named "
        "| differing, limit named | differing |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (cases, written, agreed, named, limited) in rows.items():
        wrong = cases - agreed - limited
        lines.append(f"| {name} | {cases} | {written} | {agreed} | {named} | {limited} | {wrong} |")
    return "\n".join(lines)


def table(outcomes: list[Outcome]) -> str:
    rows: dict[str, list[int]] = {}
    for outcome in outcomes:
        row = rows.setdefault(row_of(outcome), [0, 0, 0, 0])
        row[0] += 1
        row[1] += fit_agrees(outcome)
        row[2] += nodes_agree(outcome) and reason_agrees(outcome)
        row[3] += agrees(outcome)
    order = [BOUND, PREEMPTED, NODE_NAME, REFUSED, OTHER_REFUSAL, INVALID]
    order += [r.value for r in Reason]
    lines = [
        "| our verdict | cases | fit agreed | reason agreed | agreed | differing |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(rows, key=lambda r: order.index(r) if r in order else len(order)):
        cases, fit, reason, both = rows[name]
        lines.append(f"| {name} | {cases} | {fit} | {reason} | {both} | {cases - both} |")
    cases = len(outcomes)
    fit = sum(map(fit_agrees, outcomes))
    both = sum(map(agrees, outcomes))
    reason = sum(1 for o in outcomes if nodes_agree(o) and reason_agrees(o))
    lines.append(f"| **all** | {cases} | {fit} | {reason} | {both} | {cases - both} |")
    return "\n".join(lines)


def _describe(outcome: Outcome) -> str:
    return json.dumps(
        {
            "scenario": outcome.scenario.index,
            "family": outcome.scenario.family,
            "row": row_of(outcome),
            "judged": {k: v for k, v in vars(outcome.judged).items() if k != "result" and v},
            "before": str(outcome.before and outcome.before.reason),
            "before_summary": outcome.before and outcome.before.summary,
            "after": str(outcome.after and outcome.after.reason),
            "node": outcome.node,
            "refused": outcome.refused,
            "candidate": outcome.scenario.candidate["spec"],
            "message": outcome.message,
            "predicted": dict(outcome.predicted or {}),
            "events": outcome.events,
            "probes": outcome.probes,
            "scheduler_class": scheduler_class(outcome) if outcome.probes else "",
        },
        indent=1,
    )


def test_scenarios_cover_every_verdict(oracle: OracleRun) -> None:
    rows = Counter(map(row_of, oracle.outcomes))
    assert len(oracle.outcomes) >= 500
    assert rows[BOUND] >= 25 and rows[PREEMPTED] >= 1 and rows[REFUSED] >= 25, rows
    assert rows[INVALID] >= 5 and rows[OTHER_REFUSAL] >= 1 and rows[NODE_NAME] >= 5, rows
    for reason in (
        Reason.INSUFFICIENT_GPUS,
        Reason.TAINT_NOT_TOLERATED,
        Reason.GPU_TYPE_UNAVAILABLE,
        Reason.AFFINITY_UNMATCHED,
        Reason.NOT_ADVERTISED,
        Reason.OTHER,
    ):
        assert rows[reason.value] >= 10, rows
    assert rows[Reason.FRAGMENTED.value] >= 1, rows
    families = Counter(o.scenario.family for o in oracle.outcomes)
    assert all(families[name] == PER_FAMILY for name in FAMILIES), families


def test_fits_or_not_agrees_with_the_scheduler_every_time(oracle: OracleRun) -> None:
    wrong = [o for o in oracle.outcomes if not fit_agrees(o) and not o.judged.stated]
    assert not wrong, "\n".join(map(_describe, wrong[:5]))


def test_node_verdicts_agree_with_the_schedulers_message(oracle: OracleRun) -> None:
    wrong = [o for o in oracle.outcomes if not nodes_agree(o) and not o.judged.stated]
    assert not wrong, "\n".join(map(_describe, wrong[:5]))


def test_reason_agrees_with_the_scheduler_in_99_percent(oracle: OracleRun) -> None:
    judged = [o for o in oracle.outcomes if o.message and not o.judged.stated]
    wrong = [o for o in judged if not reason_agrees(o)]
    pairs = Counter((str(o.after.reason), scheduler_class(o)) for o in wrong)
    assert len(wrong) <= len(judged) // 100, f"{pairs}\n" + "\n".join(map(_describe, wrong[:6]))


def test_every_family_agrees_outside_the_limits_it_names(oracle: OracleRun) -> None:
    """Each family's verdicts all agree with the API server and the scheduler, but where
    the verdict names what explain does not judge; and it names what the pod has of it."""
    wrong = [o for o in oracle.outcomes if o.scenario.family != "base" and not agrees(o)]
    wrong = [o for o in wrong if not excused(o)]
    assert not wrong, "\n".join(map(_describe, wrong[:5]))
    for outcome in oracle.outcomes:
        unjudged = set(outcome.scenario.limits) - {limits.PREEMPTION}
        if outcome.before is not None:
            assert unjudged <= set(outcome.judged.stated), _describe(outcome)


def test_pending_verdict_is_the_condition_and_the_last_event(oracle: OracleRun) -> None:
    for outcome in oracle.outcomes:
        if outcome.message:
            assert outcome.events and outcome.events[-1] == outcome.message, _describe(outcome)


def expected_verdict(judged: Judged) -> tuple[int, str]:
    """explain -f's exit status and the start of its verdict (stdout; stderr when invalid)."""
    if judged.invalid:
        return 2, f"kube-gpu-exporter: error: {judged.invalid}"
    if judged.refusal:
        if judged.quota:
            return 1, f"will not schedule: quota_exceeded\n  {judged.refusal}"
        return 1, f"will not be created: refused by the API server's admission\n  {judged.refusal}"
    if judged.bound_to:
        return 0, f"not for the scheduler: spec.nodeName binds it to {judged.bound_to}"
    result = judged.result
    unjudged = [s for s in judged.stated if s != limits.PREEMPTION]
    if result.reason is None:
        if unjudged:
            held = ", ".join(unjudged)
            return 0, f"would schedule, unless what explain does not check holds it: {held}"
        return 0, "would schedule\n"
    if limits.PREEMPTION in judged.stated:
        return 1, f"will not schedule without preemption: {result.reason}"
    return 1, f"will not schedule: {result.reason}"


def test_explain_cli_says_what_the_in_process_judgement_says(oracle: OracleRun) -> None:
    """`explain -f` on the manifest, against the real API server before the pod existed, on
    a sample of the seeded mix and one scenario of each family: the exit status and verdict
    of the in-process judgement of the whole cluster listed from the API server (the other
    scenarios' nodes included, which the pinning excludes)."""
    assert len(oracle.cli_manifests) == CLI_SAMPLE + len(FAMILIES)
    for outcome, run, whole in oracle.cli_manifests:
        status, verdict = expected_verdict(whole)
        shown = run.stderr if status == 2 else run.stdout
        assert run.returncode == status, _describe(outcome) + run.stdout + run.stderr
        assert verdict in shown, _describe(outcome) + run.stdout + run.stderr
        assert status == 2 or not run.stderr, run.stderr


def test_explain_cli_said_fits_before_the_scheduler_bound(oracle: OracleRun) -> None:
    """On the seeded mix's sample: exit 0 for the pods the scheduler then bound without
    preempting, 1 for the others."""
    for outcome, run, whole in oracle.cli_manifests[:CLI_SAMPLE]:
        bound_as_is = bool(outcome.node) and outcome.before.reason is None
        assert run.returncode == (0 if bound_as_is else 1), _describe(outcome)
        assert whole.result.schedulable == bound_as_is, _describe(outcome)


def test_explain_f_without_the_right_to_create_pods_judges_the_manifest_as_written(
    oracle: OracleRun,
) -> None:
    """A user who may read the cluster but not create pods: no dry run, one line saying so,
    and the manifest judged as written (DefaultTolerationSeconds' tolerations added)."""
    plane, namespace = oracle.plane, PROBE_NAMESPACE
    reader = {"apiGroups": [""], "resources": ["nodes", "pods", "resourcequotas"]}
    plane.ok(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": "oracle-reader"}, "rules": [{**reader, "verbs": ["get", "list"]}]},
    )
    plane.ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "r"}})
    plane.ok(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "oracle-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "oracle-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "r", "namespace": namespace}],
        },
    )
    minted = plane.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/r/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": minted["status"]["token"]}
    kubeconfig = oracle.workdir / "reader.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    outcome = next(o for o in oracle.outcomes if o.scenario.family == "base" and o.node)
    path = oracle.workdir / f"{outcome.scenario.namespace}.yaml"
    run = _explain_cli(plane, "-f", str(path), kubeconfig=kubeconfig)
    assert run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(
        f"kube-gpu-exporter: note: may not create pods in namespace {outcome.scenario.namespace}"
    ), run.stderr
    assert run.stderr.endswith("judged as written, without the API server's admission\n")
    whole = State.read(plane)
    quotas = whole.quotas.get(outcome.scenario.namespace, ())
    view = ClusterView.build(whole.nodes.values(), whole.pods, quotas)
    result = classify(view, load_manifest(str(path), outcome.scenario.namespace), admitted=False)
    assert run.returncode == (0 if result.schedulable else 1), run.stdout
    said = f"will not schedule: {result.reason}" if result.reason else "would schedule"
    assert said in run.stdout, run.stdout


def test_explain_cli_on_pending_pods_reads_the_real_cluster(oracle: OracleRun) -> None:
    """`explain POD` reads the whole cluster: its verdict is the in-process classification
    of the same objects listed from the API server (exit 1, the same reason)."""
    assert oracle.cli_pending
    for outcome, status, out, whole in oracle.cli_pending:
        assert status == 1, _describe(outcome)
        assert f"will not schedule: {whole.reason}" in out, _describe(outcome)


def _rewrite(text: str, begin: str, end: str, written: str) -> str:
    start, stop = text.index(begin) + len(begin), text.index(end)
    return f"{text[:start]}\n{written}\n{text[stop:]}"


def test_agreement_table_is_the_documented_one(oracle: OracleRun) -> None:
    """The seeded mix per verdict, then every family (the mix among them) per family."""
    written = table([o for o in oracle.outcomes if o.scenario.family == "base"])
    families = family_table(oracle.outcomes)
    text = DOC.read_text()
    if os.environ.get("KGE_REWRITE_DOCS"):
        text = _rewrite(text, BEGIN, END, written)
        DOC.write_text(_rewrite(text, FAMILY_BEGIN, FAMILY_END, families))
        return
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    assert text[start:end].strip() == written, "run with KGE_REWRITE_DOCS=1 to rewrite it"
    start, end = text.index(FAMILY_BEGIN) + len(FAMILY_BEGIN), text.index(FAMILY_END)
    assert text[start:end].strip() == families, "run with KGE_REWRITE_DOCS=1 to rewrite it"


def test_runtime(oracle: OracleRun) -> None:
    print(json.dumps(oracle.seconds, indent=1))
