"""The chart under the real prometheus-operator (v0.85.0, built from its Go module) on the real
kube-apiserver, with the real Prometheus 3 and Alertmanager doing what the operator's pods
would have done.

`helm install` puts our ServiceMonitor, PrometheusRule and AlertmanagerConfig in the cluster,
labelled to match a Prometheus' selectors as kube-prometheus-stack's are. The operator turns
them into its output: the Prometheus configuration Secret (a scrape job for the ServiceMonitor,
the ServiceMonitor's status Accepted), the rule ConfigMaps, and the Alertmanager configuration
Secret with our inhibit rules merged in. No kubelet runs, so no pod of the operator's
StatefulSets ever does: Prometheus 3 and Alertmanager run as processes here on exactly that
output, rewritten only where a pod would have supplied something (prometheus_operator.pod_view).
The exporter is a process too (a simulated node whose GPU 0 reports Xid 79), reached through
the chart's Service and an EndpointSlice the test writes, where the EndpointSlice controller
would list the exporter's pod (the DaemonSet's pod object is made, bound to a node name, but
never runs). The real node (a kubelet running the image) is another test's.

Proven end to end: Prometheus discovers the exporter through the ServiceMonitor's job, scrapes
it (up, job="kube-gpu-exporter", which the rules select on, instance the pod's node, the
operator's namespace/pod/container target labels dropped), evaluates the recording rules and
GPUXidErrors, sends the alert to Alertmanager found through its Service as the operator wrote
it, and Alertmanager delivers it; a GPULost on the same GPU then inhibits it, by our
AlertmanagerConfig's rule. That rule holds only under `alertmanagerConfigMatcherStrategy:
None`: under the operator's default the same AlertmanagerConfig is confined to its own
namespace (the last test shows the matcher it gains)."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import ControlPlane, run_control_plane
from managed_prometheus import create, run_managed
from netns_host import netns_host
from prometheus_operator import (
    alertmanager_config,
    host_address,
    install_all_crds,
    rule_files,
    run_operator,
    write_rule_files,
)
from real_binaries import real_components, require

from kube_gpu_exporter.exporter.generate.helm_chart import CHART_DIR
from prometheus_server import BUILT, binaries_of, ready
from support import free_port, run_exporter, wait_until
from webhook_receiver import Webhook

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / CHART_DIR
MONITORING = "monitoring"  # the Prometheus' and the Alertmanager's
EXPORTER_NS = "kube-gpu-exporter"  # the chart's release namespace: every object of the chart
RELEASE_NAME = "kube-gpu-exporter"  # its objects' names, then, are the chart's name
RELEASE = "gpu-monitoring"  # the Prometheus' release, as kube-prometheus-stack labels select
NODE_NAME = "gpu-node-1"
PROMETHEUS = "k8s"
ALERTMANAGER = "main"
NODE = """
devices:
  - uuid: GPU-11111111-0000-4000-8000-000000000000
    timeline: [{at: 1, xid: [109]}]
  - uuid: GPU-22222222-0000-4000-8000-000000000000
"""
JOB = f"serviceMonitor/{EXPORTER_NS}/{RELEASE_NAME}/0"  # the operator's job name for it


def _monitoring(kind: str, namespace: str, name: str = "") -> str:
    plural = {"Prometheus": "prometheuses", "Alertmanager": "alertmanagers"}.get(kind)
    plural = plural or kind.lower() + "s"
    version = "v1alpha1" if kind == "AlertmanagerConfig" else "v1"
    path = f"/apis/monitoring.coreos.com/{version}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The control plane with the operator's CRDs, the operator, and the chart installed."""
    workdir = tmp_path_factory.mktemp("operator")
    with run_control_plane(workdir / "plane") as plane:
        install_all_crds(plane)
        plane.ok("POST", "/api/v1/namespaces", {"metadata": {"name": MONITORING}})
        with run_operator(plane, workdir, "--feature-gates=StatusForConfigurationResources=true"):
            helm_install(plane)
            yield plane


def helm_install(plane: ControlPlane) -> None:
    """The chart as a kube-prometheus-stack user installs it: its ServiceMonitors,
    PrometheusRule and AlertmanagerConfig labelled with the Prometheus' release."""
    result = subprocess.run(
        [
            str(require("helm")), "install", RELEASE_NAME, str(CHART),
            "--kubeconfig", str(plane.kubeconfig),
            "--namespace", EXPORTER_NS, "--create-namespace",
            "--set", f"serviceMonitor.additionalLabels.release={RELEASE}",
            "--set", f"prometheusRule.additionalLabels.release={RELEASE}",
            "--set", "alertmanagerConfig.enabled=true",
            "--set", f"alertmanagerConfig.additionalLabels.release={RELEASE}",
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def exporter_pod(plane: ControlPlane) -> dict[str, str]:
    """The chart DaemonSet's pod on NODE_NAME, as the DaemonSet controller would create it
    (none runs here, and no kubelet ever starts it): the object Kubernetes service discovery
    reads the node's name from. Its RuntimeClass is made first, as the GPU operator does."""
    plane.ok(
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
    )
    daemonset = plane.ok("GET", f"/apis/apps/v1/namespaces/{EXPORTER_NS}/daemonsets/{RELEASE_NAME}")
    template = daemonset["spec"]["template"]
    name = f"{RELEASE_NAME}-{NODE_NAME}"
    plane.ok(
        "POST",
        f"/api/v1/namespaces/{EXPORTER_NS}/pods",
        {
            "metadata": {**template["metadata"], "name": name},
            "spec": {**template["spec"], "nodeName": NODE_NAME},
        },
    )
    return {"kind": "Pod", "namespace": EXPORTER_NS, "name": name}


def endpoint_slice(
    plane: ControlPlane,
    namespace: str,
    service: str,
    port_name: str,
    port: int,
    pod: dict[str, str] | None = None,
) -> None:
    """An EndpointSlice of `service` holding this host's address and `port` (and `pod`, its
    target): what the EndpointSlice controller would write for a ready pod behind it (none
    runs here). Not 127.0.0.1: the API server refuses loopback endpoints."""
    endpoint: dict[str, Any] = {"addresses": [host_address()], "conditions": {"ready": True}}
    if pod:
        endpoint.update(targetRef=pod, nodeName=NODE_NAME)
    plane.ok(
        "POST",
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-{port}",
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": "kube-gpu-exporter-test",
                },
            },
            "addressType": "IPv4",
            "endpoints": [endpoint],
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        },
    )


def alertmanager_service(plane: ControlPlane, port: int) -> None:
    """Alertmanager's Service, selector-less, its EndpointSlice at the process on `port`."""
    plane.ok(
        "POST",
        f"/api/v1/namespaces/{MONITORING}/services",
        {
            "metadata": {"name": f"alertmanager-{ALERTMANAGER}"},
            "spec": {"ports": [{"name": "web", "port": 9093, "protocol": "TCP"}]},
        },
    )
    endpoint_slice(plane, MONITORING, f"alertmanager-{ALERTMANAGER}", "web", port)


def create_alertmanager(
    plane: ControlPlane, name: str, base: dict[str, Any], strategy: str | None
) -> None:
    """An Alertmanager selecting our AlertmanagerConfig by its release label, on the base
    configuration `base` (its `alertmanager-<name>` Secret, as kube-prometheus-stack writes
    it); `strategy` is its alertmanagerConfigMatcherStrategy (None: the operator's default)."""
    secret = base64.b64encode(yaml.safe_dump(base).encode()).decode()
    plane.ok(
        "POST",
        f"/api/v1/namespaces/{MONITORING}/secrets",
        {"metadata": {"name": f"alertmanager-{name}"}, "data": {"alertmanager.yaml": secret}},
    )
    spec: dict[str, Any] = {
        "version": real_components.ALERTMANAGER,
        "alertmanagerConfigSelector": {"matchLabels": {"release": RELEASE}},
        "alertmanagerConfigNamespaceSelector": {},
    }
    if strategy:
        spec["alertmanagerConfigMatcherStrategy"] = {"type": strategy}
    plane.ok(
        "POST",
        _monitoring("Alertmanager", MONITORING),
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Alertmanager",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def create_prometheus(plane: ControlPlane) -> None:
    """A Prometheus selecting ServiceMonitors and PrometheusRules of every namespace by the
    release label (kube-prometheus-stack's defaults), alerting its Alertmanager's Service."""
    selector = {"release": RELEASE}
    alertmanager = {"namespace": MONITORING, "name": f"alertmanager-{ALERTMANAGER}"}
    create(
        plane,
        MONITORING,
        PROMETHEUS,
        selector,
        evaluationInterval="2s",
        ruleSelector={"matchLabels": selector},
        ruleNamespaceSelector={},
        alerting={"alertmanagers": [{**alertmanager, "port": "web", "apiVersion": "v2"}]},
    )


def accepted(plane: ControlPlane) -> list[dict[str, Any]]:
    """The ServiceMonitor's binding to our Prometheus, once its Accepted condition is True."""
    status = plane.ok("GET", _monitoring("ServiceMonitor", EXPORTER_NS, RELEASE_NAME))
    bindings = (status.get("status") or {}).get("bindings") or []
    return [
        b
        for b in bindings
        if b.get("name") == PROMETHEUS
        and any(
            c["type"] == "Accepted" and c["status"] == "True" for c in b.get("conditions") or []
        )
    ]


def start_alertmanager(config: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The built Alertmanager on the configuration the operator generated."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yaml").write_text(config)
    port = free_port()
    log = (workdir / "alertmanager.log").open("wb")
    proc = subprocess.Popen(
        [
            *netns_host().prefix,
            binaries_of(BUILT).alertmanager,
            f"--config.file={workdir / 'alertmanager.yaml'}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={host_address()}:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    url = f"http://{host_address()}:{port}"
    wait_until(lambda: proc.poll() is not None or ready(url), 60, "Alertmanager ready")
    assert proc.poll() is None, (workdir / "alertmanager.log").read_text()
    return proc, url


def am_alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        found: list[dict[str, Any]] = json.load(response)
    return found


def post_alert(url: str, labels: dict[str, str]) -> None:
    request = urllib.request.Request(
        f"{url}/api/v2/alerts",
        data=json.dumps([{"labels": labels}]).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_our_objects_become_scrape_config_rules_and_delivered_alerts(
    plane: ControlPlane, tmp_path: Path
) -> None:
    hook = Webhook(netns_host().gateway)  # called by the Alertmanager in the test host
    base = {
        "route": {"receiver": "team", "group_wait": "1s", "group_interval": "1s"},
        "receivers": [
            {"name": "team", "webhook_configs": [{"url": hook.url, "send_resolved": True}]}
        ],
    }
    (tmp_path / "node.yaml").write_text(NODE)
    exporter_args = ["--simulate", str(tmp_path / "node.yaml"), "--collector.interval=1s"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with run_exporter(
            exporter_args, tmp_path, host=host_address(), prefix=netns_host().prefix
        ) as exporter:
            pod = exporter_pod(plane)
            endpoint_slice(plane, EXPORTER_NS, RELEASE_NAME, "metrics", exporter.port, pod)

            create_alertmanager(plane, ALERTMANAGER, base, "None")
            am_config = wait_until(
                lambda: alertmanager_config(plane, MONITORING, ALERTMANAGER),
                60,
                "the operator's Alertmanager configuration",
            )
            generated = yaml.safe_load(am_config)
            # our AlertmanagerConfig, accepted and merged in as written: no matcher added
            inhibit = generated.get("inhibit_rules") or []
            assert any('alertname="GPULost"' in r["source_matchers"] for r in inhibit), am_config
            assert not [
                m
                for r in inhibit
                for m in r["source_matchers"] + r["target_matchers"]
                if m.startswith("namespace")
            ], am_config
            am, am_url = start_alertmanager(am_config, tmp_path / "alertmanager")
            procs.append(am)
            alertmanager_service(plane, int(am_url.rsplit(":", 1)[1]))

            create_prometheus(plane)
            files = wait_until(
                lambda: (f := rule_files(plane, MONITORING, PROMETHEUS)) and any(f.values()) and f,
                60,
                "the operator's rule ConfigMaps",
            )
            assert wait_until(lambda: accepted(plane), 60, "ServiceMonitor Accepted")
            ours = plane.ok("GET", _monitoring("PrometheusRule", EXPORTER_NS, RELEASE_NAME))
            mounted = [yaml.safe_load(t) for d in files.values() for t in d.values()]
            assert [g for m in mounted for g in m["groups"]] == ours["spec"]["groups"]

            workdir = tmp_path / "prometheus"
            write_rule_files(files, workdir / "rules")
            with run_managed(plane, MONITORING, PROMETHEUS, JOB, workdir) as prom:
                # the ServiceMonitor's interval is 30s: the first scrape comes within one
                (up,) = prom.wait_for('up{job="kube-gpu-exporter"} == 1', timeout=90)
                # the ServiceMonitor's relabeling: the node's name, the rules' node label
                assert up["metric"]["instance"] == NODE_NAME, up
                assert not {"namespace", "pod", "container"} & up["metric"].keys(), up
                (gpus,) = prom.wait_for("cluster:nvidia_gpu_gpus:count", timeout=30)
                assert gpus["value"] == 2
                (firing,) = prom.wait_for(
                    'ALERTS{alertname="GPUXidErrors", alertstate="firing"}', timeout=30
                )
                assert firing["metric"]["xid"] == "109"

                def delivered() -> dict[str, Any] | None:
                    got = [a for n in hook.notifications for a in n["alerts"]]
                    return next(
                        (a for a in got if a["labels"]["alertname"] == "GPUXidErrors"), None
                    )

                alert = wait_until(delivered, 60, "GPUXidErrors delivered by Alertmanager")
                labels = alert["labels"]
                assert labels["uuid"] == "GPU-11111111-0000-4000-8000-000000000000"

                # GPULost on the same GPU inhibits it: our AlertmanagerConfig's rule, in force
                lost = {"alertname": "GPULost", "severity": "critical"}
                post_alert(am_url, {**lost, "instance": labels["instance"], "uuid": labels["uuid"]})

                def inhibited() -> bool:
                    return any(
                        a["labels"]["alertname"] == "GPUXidErrors" and a["status"]["inhibitedBy"]
                        for a in am_alerts(am_url)
                    )

                wait_until(inhibited, 30, "GPUXidErrors inhibited by GPULost")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        hook.close()


def test_the_default_matcher_strategy_confines_our_inhibit_rules(plane: ControlPlane) -> None:
    """Under the operator's default (OnNamespace) every inhibit rule of our AlertmanagerConfig
    gains the release's namespace on both sides; our GPU alerts carry no such label (a node's
    GPU belongs to no namespace), so none would inhibit: the install doc's
    `alertmanagerConfigMatcherStrategy: None` (kube-prometheus-stack:
    `alertmanager.alertmanagerSpec.alertmanagerConfigMatcherStrategy.type: None`)."""
    base = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    create_alertmanager(plane, "scoped", base, None)
    text = wait_until(
        lambda: alertmanager_config(plane, MONITORING, "scoped"),
        60,
        "the operator's configuration of the default-strategy Alertmanager",
    )
    rules = yaml.safe_load(text)["inhibit_rules"]
    assert rules and all(
        f'namespace="{EXPORTER_NS}"' in r["source_matchers"]
        and f'namespace="{EXPORTER_NS}"' in r["target_matchers"]
        for r in rules
    ), text


def test_the_built_operator_is_the_pinned_release() -> None:
    result = subprocess.run(
        [str(require("prometheus-operator")), "--version"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    pinned = real_components.PROMETHEUS_OPERATOR
    assert f"prometheus-operator, version {pinned[1:]} " in result.stdout + result.stderr
    crds = sorted(p.name for p in (require("prometheus-operator").parent / "crds").iterdir())
    assert crds == sorted(real_components.OPERATOR_CRDS)
