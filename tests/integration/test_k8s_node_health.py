"""`serve --health.node-conditions --health.node-taint` on the real kube-apiserver, over the fake
libnvidia-ml, with a ServiceAccount token bound to the chart's opt-in ClusterRole and under its
ValidatingAdmissionPolicy (the chart rendered with `nodeHealth.*` on, applied server-side):

- a GPU whose recovery action asks for a reset turns GPUHealthy False, reason ResetGPU, its
  uuid and the reading in the message, and taints the Node; the GPU lost (NVML cannot say) turns
  the condition Unknown and keeps the taint; the GPU's recovery turns the condition True and
  removes the taint; nothing else of the Node changes (the whole object is compared, less the
  condition, the taint, resourceVersion and managedFields), and an unchanged condition is not
  written again; a restart keeps lastTransitionTime, and the heartbeat moves only
  lastHeartbeatTime;
- the pod-bound token names its Node in userInfo.extra, and the policy refuses the same
  credential a write to another Node or to its own Node's labels;
- without the role, the denied write is counted (node_health_forbidden), logged once, and the
  exporter goes on serving; so is an API server that cannot be reached (node_health_connection,
  one line for the condition and one for the taint);
- a taint written while another writer changes the Node's taints is refused on its stale
  resourceVersion (409), read again and written with the other writer's taint kept.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from service_account_token import mint_token, token_kubeconfig
from test_helm_chart import rendered_objects
from test_k8s_least_privilege import apply

from fakenvml import write_state
from kube_gpu_exporter.exporter.kubernetes.client import ApiClient, api_client
from kube_gpu_exporter.exporter.kubernetes.node_status import NodeStatus
from kube_gpu_exporter.exporter.simulated.scenario import Scenario
from support import free_port, run_exporter, values, wait_until

pytestmark = pytest.mark.k8s

NODE, OTHER = "gpu-node-1", "gpu-node-2"
NAMESPACE = "monitoring"  # test_helm_chart's release namespace
SICK, FINE = (f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-4000-8000-000000000000" for n in (1, 2))
TAINT = "nvidia.com/gpu-needs-reset"
NODE_EXTRA = "authentication.kubernetes.io/node-name"
CHART_SETTINGS = (
    *("--set", "nodeHealth.conditions=true"),
    *("--set", "nodeHealth.taint=true"),
    *("--set", "nodeHealth.admissionPolicy=true"),
)
NODE_HEALTH_KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def scenario(sick_action: int | None) -> Any:
    """SICK's recovery action (None: SICK lost, NVML cannot say anything of it), FINE's none."""
    lost = "[{at: 0, lost: true}]" if sick_action is None else "[]"
    return Scenario.parse(
        f"""
devices:
  - uuid: {SICK}
    readings: {{recovery_action: {1 if sick_action is None else sick_action}}}
    timeline: {lost}
  - uuid: {FINE}
    readings: {{recovery_action: 0}}
"""
    ).state_at(0)


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
        "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with run_control_plane(tmp_path_factory.mktemp("control-plane")) as running:
        running.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        chart = rendered_objects(*CHART_SETTINGS)
        objects = [o for (kind, _, _), o in chart.items() if kind in NODE_HEALTH_KINDS]
        objects += [o for (kind, _, _), o in chart.items() if kind == "ServiceAccount"]
        assert {o["kind"] for o in objects} == NODE_HEALTH_KINDS | {"ServiceAccount"}
        apply(running, objects)
        for name in (NODE, OTHER):
            running.ok("POST", "/api/v1/nodes", node(name))
            # the kubelet's own condition, which ours must leave as it is
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
            running.ok(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                {"status": {"conditions": [ready], "capacity": {"nvidia.com/gpu": "2"}}},
                content_type="application/strategic-merge-patch+json",
            )
        yield running


def _exporter_account(plane: ControlPlane) -> str:
    accounts = plane.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts")["items"]
    (account,) = [a["metadata"]["name"] for a in accounts if "cluster" not in a["metadata"]["name"]]
    return str(account)


def _pod_bound_token(plane: ControlPlane, account: str) -> str:
    """The token the kubelet would mount in the exporter's pod on NODE: bound to that pod."""
    pod = {
        "metadata": {"name": "exporter-x", "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": account,
            "containers": [{"name": "exporter", "image": "kube-gpu-exporter"}],
        },
    }
    created = plane.ok("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    bound = {"kind": "Pod", "apiVersion": "v1", "name": "exporter-x"}
    bound["uid"] = created["metadata"]["uid"]
    return mint_token(plane, NAMESPACE, account, bound)


def _condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    found = [c for c in obj["status"].get("conditions", []) if c["type"] == "GPUHealthy"]
    return found[0] if found else None


def _rest(obj: dict[str, Any]) -> dict[str, Any]:
    """The Node less what the exporter may change and what every write changes."""
    rest = copy.deepcopy(obj)
    for key in ("resourceVersion", "managedFields"):
        rest["metadata"].pop(key, None)
    rest["status"]["conditions"] = [
        c for c in rest["status"].get("conditions", []) if c["type"] != "GPUHealthy"
    ]
    rest["spec"]["taints"] = [t for t in rest["spec"].get("taints", []) if t["key"] != TAINT]
    return rest


def _taints(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((t["key"], t.get("value", "")) for t in obj["spec"].get("taints", []))


def _write_other(plane: ControlPlane, token: str) -> tuple[int, Any]:
    return plane.request(
        "PATCH",
        f"/api/v1/nodes/{OTHER}/status",
        {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}},
        token=token,
        content_type="application/strategic-merge-patch+json",
    )


def test_condition_and_taint_follow_the_gpus_and_touch_nothing_else(
    plane: ControlPlane, nvml_env: dict[str, str], tmp_path: Path
) -> None:
    token = _pod_bound_token(plane, _exporter_account(plane))
    review = plane.ok(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    assert review["status"]["userInfo"]["extra"][NODE_EXTRA] == [NODE], review
    # the policy is in force once the API server has loaded it (seconds after it was applied)
    wait_until(lambda: _write_other(plane, token)[0] == 403, what="the admission policy")
    kubeconfig = token_kubeconfig(plane, tmp_path / "exporter.kubeconfig", token)
    before = plane.ok("GET", f"/api/v1/nodes/{NODE}")
    state = Path(nvml_env["FAKE_NVML_STATE"])
    write_state(state, scenario(1))  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
    args = [
        "--collector.interval=300ms", "--kubelet.pod-resources-socket=", "--path.sysfs=",
        "--health.node-conditions", "--health.node-taint",
        f"--kubernetes.kubeconfig={kubeconfig}", f"--kubernetes.node-name={NODE}",
    ]  # fmt: skip
    with run_exporter(args, tmp_path, env=nvml_env) as exporter:

        def node_when(status: str) -> dict[str, Any] | None:
            obj: dict[str, Any] = plane.ok("GET", f"/api/v1/nodes/{NODE}")
            condition = _condition(obj)
            return obj if condition and condition["status"] == status else None

        def node_with_taints(count: int) -> dict[str, Any] | None:
            obj: dict[str, Any] = plane.ok("GET", f"/api/v1/nodes/{NODE}")
            return obj if len(_taints(obj)) == count else None

        sick = wait_until(lambda: node_when("False"), what="GPUHealthy False")
        condition = _condition(sick)
        assert condition is not None
        assert condition["reason"] == "ResetGPU"
        assert condition["message"] == f"{SICK}: reset_gpu (recovery_action)"
        sick = wait_until(lambda: node_with_taints(2), what="the taint")
        assert _taints(sick) == [("dedicated", "gpu"), (TAINT, "ResetGPU")]
        assert _rest(sick) == _rest(before)

        # unchanged, not written again: the same resourceVersion over several cycles
        def cycles() -> float:
            return sum(values(exporter.metrics(), "kube_gpu_exporter_collections_total"))

        start = cycles()
        wait_until(lambda: cycles() >= start + 5, what="five more cycles")
        assert (
            plane.ok("GET", f"/api/v1/nodes/{NODE}")["metadata"]["resourceVersion"]
            == (sick["metadata"]["resourceVersion"])
        )

        # the GPU lost: NVML cannot say what it needs; Unknown, and the taint stays
        write_state(state, scenario(None))
        unknown = wait_until(lambda: node_when("Unknown"), what="GPUHealthy Unknown")
        condition = _condition(unknown)
        assert condition is not None and condition["reason"] == "ActionUnknown"
        assert SICK in condition["message"]
        assert _taints(unknown) == [("dedicated", "gpu"), (TAINT, "ResetGPU")]

        write_state(state, scenario(0))  # the GPU was reset
        healthy = wait_until(lambda: node_when("True"), what="GPUHealthy True")
        condition = _condition(healthy)
        assert condition is not None and condition["reason"] == "NoActionNeeded"
        healthy = wait_until(lambda: node_with_taints(1), what="the taint removed")
        assert _taints(healthy) == [("dedicated", "gpu")]
        assert _rest(healthy) == _rest(before)
        m = exporter.metrics()
        assert (
            sum(
                values(m, "kube_gpu_exporter_collection_errors_total", kind="node_health_forbidden")
            )
            == 0
        )
        log = exporter.log()
    assert "cannot write" not in log, log

    # A restart keeps lastTransitionTime; the heartbeat alone moves lastHeartbeatTime.
    settled = _condition(plane.ok("GET", f"/api/v1/nodes/{NODE}"))
    assert settled is not None and settled["status"] == "True"
    with run_exporter([*args, "--health.heartbeat-interval=1s"], tmp_path, env=nvml_env):

        def beat_after(previous: str) -> dict[str, Any] | None:
            now = _condition(plane.ok("GET", f"/api/v1/nodes/{NODE}"))
            return now if now and now["lastHeartbeatTime"] > previous else None

        first = wait_until(lambda: beat_after(settled["lastHeartbeatTime"]), what="a heartbeat")
        second = wait_until(lambda: beat_after(first["lastHeartbeatTime"]), what="another")
    assert {c["lastTransitionTime"] for c in (first, second)} == {settled["lastTransitionTime"]}
    assert {(c["status"], c["reason"]) for c in (first, second)} == {("True", "NoActionNeeded")}

    # The admission policy: the same credential, on another Node or another field, is refused.
    refused = {
        "another node's status": _write_other(plane, token),
        "its node's labels": plane.request(
            "PATCH",
            f"/api/v1/nodes/{NODE}",
            {"metadata": {"labels": {"x": "y"}}},
            token=token,
            content_type="application/merge-patch+json",
        ),
        "its node's Ready condition": plane.request(
            "PATCH",
            f"/api/v1/nodes/{NODE}/status",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            token=token,
            content_type="application/strategic-merge-patch+json",
        ),
    }
    assert {what: status for what, (status, _) in refused.items()} == dict.fromkeys(refused, 403), (
        refused
    )
    assert "ValidatingAdmissionPolicy" in str(refused["another node's status"][1])


def test_a_denied_write_is_counted_and_logged_once(
    plane: ControlPlane, nvml_env: dict[str, str], tmp_path: Path
) -> None:
    account, target = "no-node-role", "gpu-node-3"
    plane.ok("POST", "/api/v1/nodes", node(target))
    plane.ok(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": account}}
    )
    token = mint_token(plane, NAMESPACE, account)
    kubeconfig = token_kubeconfig(plane, tmp_path / "denied.kubeconfig", token)
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), scenario(1))
    args = [
        "--collector.interval=200ms", "--kubelet.pod-resources-socket=", "--path.sysfs=",
        "--health.node-conditions",
        f"--kubernetes.kubeconfig={kubeconfig}", f"--kubernetes.node-name={target}",
    ]  # fmt: skip
    with run_exporter(args, tmp_path, env=nvml_env) as exporter:
        m = exporter.metrics_when(
            lambda m: (
                sum(
                    values(
                        m, "kube_gpu_exporter_collection_errors_total", kind="node_health_forbidden"
                    )
                )
                >= 3
            ),
            "three denied attempts counted",
        )
        assert values(m, "nvidia_gpu_up") == [1, 1]  # the GPUs are served as ever
        assert (
            sum(values(m, "kube_gpu_exporter_collection_errors_total", kind="node_health_other"))
            == 0
        )
        log = exporter.log()
    assert log.count("cannot write the node's GPU condition") == 1, log
    assert "forbidden" in log
    assert _condition(plane.ok("GET", f"/api/v1/nodes/{target}")) is None


def test_an_unreachable_api_server_is_counted_and_logged_once(
    plane: ControlPlane, nvml_env: dict[str, str], tmp_path: Path
) -> None:
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"  # no one
    kubeconfig = tmp_path / "away.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    kubeconfig.chmod(0o600)
    write_state(Path(nvml_env["FAKE_NVML_STATE"]), scenario(1))
    args = [
        "--collector.interval=200ms", "--kubelet.pod-resources-socket=", "--path.sysfs=",
        "--health.node-conditions", "--health.node-taint",
        f"--kubernetes.kubeconfig={kubeconfig}", f"--kubernetes.node-name={NODE}",
    ]  # fmt: skip
    kind = "node_health_connection"
    with run_exporter(args, tmp_path, env=nvml_env) as exporter:
        m = exporter.metrics_when(
            lambda m: sum(values(m, "kube_gpu_exporter_collection_errors_total", kind=kind)) >= 4,
            "refused connections counted",
        )
        assert values(m, "nvidia_gpu_up") == [1, 1]
        log = exporter.log()
    # one line for each part that cannot be written (the condition, the taint), not per attempt
    assert log.count("cannot write the node's GPU condition (connection)") == 1, log
    assert log.count("cannot write the node's GPU taint (connection)") == 1, log


def test_a_taint_raced_by_another_writer_is_read_and_written_again(plane: ControlPlane) -> None:
    """Another writer changes the Node's taints between our read and our write: the API server
    refuses the write on the stale resourceVersion (409), and the taints are read again and
    written with the other writer's taint kept."""
    raced = "gpu-node-raced"
    plane.ok("POST", "/api/v1/nodes", node(raced))
    reads: list[str] = []

    class RacedClient(ApiClient):
        def get(self, path: str, params: Any = None, **options: Any) -> Any:
            response = super().get(path, params, **options)
            reads.append(path)
            if len(reads) == 1:  # between our read and our write
                taint = {"key": "team/maintenance", "value": "yes", "effect": "NoSchedule"}
                taints = [*node(raced)["spec"]["taints"], taint]
                plane.ok(
                    "PATCH",
                    f"/api/v1/nodes/{raced}",
                    {"spec": {"taints": taints}},
                    content_type="application/merge-patch+json",
                )
            return response

    admin = api_client(str(plane.kubeconfig))
    client = RacedClient(admin.connection)
    admin.close()
    try:
        assert NodeStatus(client, raced).set_taint(TAINT, "xid-79") is True
    finally:
        client.close()
    assert len(reads) == 2  # read, refused, read again
    stored = plane.ok("GET", f"/api/v1/nodes/{raced}")
    assert _taints(stored) == [("dedicated", "gpu"), (TAINT, "xid-79"), ("team/maintenance", "yes")]
