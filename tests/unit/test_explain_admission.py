"""`explain -f`'s reading of the API server's dry-run answers, and what it names as not
judged (the real API server's answers are held to these in test_scheduler_oracle.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster_objects import make_gpu_pod, make_node
from kube_gpu_exporter.exporter.cluster import ClusterView, classify, parse_node, parse_pod
from kube_gpu_exporter.exporter.cluster.explain import limits
from kube_gpu_exporter.exporter.cluster.explain.admission import Admission, admit
from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.exporter.kubernetes.client import ApiError

RBAC = (
    'pods is forbidden: User "system:serviceaccount:ml:r" cannot create resource "pods" in '
    'API group "" in the namespace "ml"'
)
QUOTA = (
    'pods "train" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
)
LIMIT = 'pods "train" is forbidden: maximum nvidia.com/gpu usage per Container is 2, but limit is 4'


class Reader:
    """Answers dry runs as an API server would: with `answers` in turn."""

    host = "https://api.test"

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def dry_run_pod(self, namespace: str, body: dict[str, Any]) -> Any:
        self.bodies.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer


def refusal(status: int, message: str) -> ApiError:
    return ApiError(status, "Forbidden", json.dumps({"kind": "Status", "message": message}))


def manifest() -> dict[str, Any]:
    pod = make_gpu_pod("train", 1)
    del pod["status"]
    return pod


def test_the_admitted_pod_is_what_is_judged() -> None:
    admitted = {"metadata": {"name": "train"}, "spec": {"priority": 7}}
    assert admit(Reader(admitted), manifest(), "m") == Admission(pod=admitted)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (403, QUOTA, Admission(refusal=QUOTA, quota=True)),
        (403, LIMIT, Admission(refusal=LIMIT)),
        (403, RBAC, Admission(unasked=f"may not create pods in namespace ml ({RBAC})")),
        (
            501,
            "",
            Admission(
                unasked="the API server at https://api.test takes no dry-run create "
                "(HTTP 501 Forbidden)"
            ),
        ),
    ],
    ids=["quota", "limitrange", "rbac", "no post"],
)
def test_refusals_are_told_apart(status: int, message: str, expected: Admission) -> None:
    reader = Reader(refusal(status, message))
    assert admit(reader, manifest(), "m") == expected  # type: ignore[arg-type]


def test_an_invalid_manifest_is_bad_input_with_the_api_servers_message() -> None:
    message = 'Pod "train" is invalid: spec.containers[0].resources.requests[nvidia.com/gpu]: '
    message += 'Invalid value: "500m": must be an integer'
    with pytest.raises(InputError, match=r"^m: the API server refuses it: Pod .*500m"):
        admit(Reader(refusal(422, message)), manifest(), "m")  # type: ignore[arg-type]


def test_a_pod_of_that_name_existing_is_asked_again_under_a_generated_name() -> None:
    reader = Reader(refusal(409, 'pods "train" already exists'), {"metadata": {}})
    assert admit(reader, manifest(), "m").pod == {"metadata": {}}  # type: ignore[arg-type]
    assert reader.bodies[1]["metadata"]["generateName"] == "train-"
    assert "name" not in reader.bodies[1]["metadata"]


def test_what_the_scheduler_weighs_and_explain_does_not_is_named() -> None:
    pod = manifest()
    spec = pod["spec"]
    term = {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}
    spec["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]},
    }
    spec["topologySpreadConstraints"] = [{"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    parsed = parse_pod(pod)
    assert parsed is not None
    # a preferred term and a soft spread constraint filter nothing
    assert limits.unchecked(pod, parsed) == ("pod anti-affinity", "host ports")


def test_preemption_is_named_where_lower_priority_pods_hold_the_room() -> None:
    nodes = [parse_node(make_node("gpu-a", gpus=4)), parse_node(make_node("gpu-b", gpus=4))]
    held = []
    for node, priority in (("gpu-a", 0), ("gpu-b", 100)):
        holder = make_gpu_pod(f"held-{node}", 3, "batch", node=node)
        holder["spec"]["priority"] = priority
        held.append(parse_pod(holder))
    view = ClusterView.build([n for n in nodes if n], [p for p in held if p])
    pod = manifest()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    pod["spec"]["priority"] = 50
    parsed = parse_pod(pod)
    assert parsed is not None
    result = classify(view, parsed)
    assert limits.preemptible(view, pod, parsed, result) == ("gpu-a",)
    pod["spec"]["preemptionPolicy"] = "Never"
    assert limits.preemptible(view, pod, parsed, result) == ()
