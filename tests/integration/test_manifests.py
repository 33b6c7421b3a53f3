"""The cluster manifests in deploy/, validated offline: the built-in kinds against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict: an unknown field fails), the custom
resources and the kustomization by our own checks, and the objects against each other and
against the exporter's real CLI parser."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.cli import build_parser
from kube_gpu_exporter.exporter.generate.daemonset import PORT, container_args
from kube_gpu_exporter.exporter.generate.outputs import render_outputs
from kube_gpu_exporter.exporter.kubelet import DEFAULT_SOCKET
from kube_gpu_exporter.exporter.serve_command import DEFAULT_PORT
from kube_gpu_exporter.rules.config import Config, ConfigError, parse_config
from kube_gpu_exporter.rules.settings.values import parse_matchers

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
# A recent release and the oldest one still commonly run; both ship with kubernetes-validate.
K8S_VERSIONS = ("1.30.0", "1.34.0")
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "Kustomization"}
BUILTIN_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ResourceQuota",
    "DaemonSet",
    "Deployment",  # the cluster view (cluster.yaml)
    "Service",
    "ConfigMap",
}
# A config that changes every deployment key that changes the manifests' shape.
VARIANT = """
selectors:
  exporter: 'job=~"gpu-metrics|gpu", env="prod", tier=~"gpu|accel"'
  cluster_view: 'job="gpu-scheduling", env="prod"'
labels: {node: node}
deployment:
  namespace: gpu-monitoring
  image: {repository: registry.example.com/gpu/exporter, tag: v9.9.9}
  per_process_attribution: false
  runtime_class_name: ""
  node_affinity: {key: cloud.google.com/gke-accelerator, values: []}
  extra_tolerations:
    - {key: dedicated, operator: Equal, value: gpu, effect: NoExecute}
    - {operator: Exists}
  resources: {requests: {cpu: 0.1, memory: 128Mi}, limits: {cpu: 1, memory: 512Mi}}
  pod_resources_dir: /var/lib/k0s/kubelet/pod-resources
  scrape_interval: 15s
"""


CLUSTER_FILE = "cluster.yaml"


class Deploy:
    """One config's generated files, parsed, with its objects by kind."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.texts = render_outputs(cfg)
        self.files: dict[str, list[dict[str, Any]]] = {
            name: [doc for doc in yaml.safe_load_all(text) if doc is not None]
            for name, text in self.texts.items()
            if name.endswith(".yaml")
        }

    def objects(self, cluster: bool | None = None) -> list[dict[str, Any]]:
        """Every object; `cluster` True: only cluster.yaml's (the cluster view), False: only
        the node exporter's."""
        return [
            doc
            for name, docs in self.files.items()
            if cluster is None or (name == CLUSTER_FILE) is cluster
            for doc in docs
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc
        ]

    def one(self, kind: str, cluster: bool = False) -> dict[str, Any]:
        found = [o for o in self.objects(cluster) if o["kind"] == kind]
        assert len(found) == 1, (kind, len(found))
        return found[0]

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("DaemonSet")["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.pod["containers"]
        return dict(container)


DEFAULT = Deploy(Config())
OTHER = Deploy(parse_config(VARIANT))
BOTH = pytest.mark.parametrize("deploy", [DEFAULT, OTHER], ids=["defaults", "variant"])


# --- schemas ------------------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_kinds_pass_strict_schema_validation(deploy: Deploy, version: str) -> None:
    validated = set()
    for obj in deploy.objects():
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        validated.add(obj["kind"])
    assert validated == BUILTIN_KINDS


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The validation above is not vacuous: a misspelt field fails it."""
    daemonset = DEFAULT.one("DaemonSet")
    broken = {**daemonset, "spec": {**daemonset["spec"], "updateStrateg": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_files_are_plain_yaml_without_aliases() -> None:
    for name, text in DEFAULT.texts.items():
        if name.endswith(".yaml"):
            assert not re.search(r"[&*]id\d+", text), name


# --- custom resources and the kustomization ----------------------------------------------------

ENDPOINT_KEYS = {"port", "path", "scheme", "interval", "relabelings"}
RELABEL_KEYS = {"sourceLabels", "separator", "targetLabel", "regex", "replacement", "action"}
RELABEL_ACTIONS = {"replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"}


@BOTH
def test_servicemonitor_selects_the_service(deploy: Deploy) -> None:
    monitor, service = deploy.one("ServiceMonitor"), deploy.one("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["metadata"]["namespace"] == deploy.cfg.deployment.namespace
    # kube-prometheus-stack's serviceMonitorSelector matches the release label.
    assert deploy.cfg.prometheus_rule.labels.items() <= monitor["metadata"]["labels"].items()
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= ENDPOINT_KEYS
        assert endpoint["port"] in port_names
        assert endpoint["interval"] == deploy.cfg.deployment.scrape_interval
        for relabeling in endpoint["relabelings"]:
            assert set(relabeling) <= RELABEL_KEYS and relabeling["action"] in RELABEL_ACTIONS
            re.compile(relabeling.get("regex", "(.*)"))


@BOTH
def test_prometheus_rule_is_well_formed(deploy: Deploy) -> None:
    rule = deploy.one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    settings = deploy.cfg.prometheus_rule
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (
        settings.name,
        settings.namespace,
    )
    assert settings.labels.items() <= rule["metadata"]["labels"].items()
    groups = rule["spec"]["groups"]
    assert groups and len({g["name"] for g in groups}) == len(groups)
    for group in groups:
        assert set(group) == {"name", "rules"} and group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r) and r["expr"].strip()
            # keep_firing_for: Prometheus 2.42+, prometheus-operator's Rule since v0.66
            fields = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert set(r) <= fields


def test_kustomization_lists_exactly_the_generated_objects() -> None:
    (kustomization,) = DEFAULT.files["kustomization.yaml"]
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    # The rule and the dashboards live in the monitoring namespace: no namespace override.
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources))
    objects = {
        name
        for name, docs in DEFAULT.files.items()
        if name != "kustomization.yaml" and any(isinstance(d, dict) and "kind" in d for d in docs)
    }
    assert set(resources) == objects
    assert {"prometheus-rule.yaml", "daemonset.yaml"} <= objects
    assert sum(name.startswith("dashboards/") for name in resources) == 3
    for name in resources:
        assert (DEPLOY / name).is_file(), name
    assert not {"rules.yaml", "rules-test.yaml"} & set(resources), "promtool files, not objects"


def test_namespaces() -> None:
    for obj in DEFAULT.objects():
        kind, namespace = obj["kind"], obj.get("metadata", {}).get("namespace")
        if kind in {"PrometheusRule", "ConfigMap"}:
            assert namespace == "monitoring"
        elif kind in {"Namespace", "ClusterRole", "ClusterRoleBinding", "Kustomization"}:
            assert namespace is None
        else:
            assert namespace == "kube-gpu-exporter", kind
    ns = DEFAULT.one("Namespace")
    assert ns["metadata"]["name"] == "kube-gpu-exporter"
    # hostPath and hostPID are beyond Pod Security "baseline".
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- objects against each other ---------------------------------------------------------------


@BOTH
def test_selectors_match_the_pods(deploy: Deploy) -> None:
    daemonset = deploy.one("DaemonSet")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    selector = deploy.one("Service")["spec"]["selector"]
    assert selector and selector.items() <= pod_labels.items()


@BOTH
def test_service_account_and_rbac(deploy: Deploy) -> None:
    account, binding = deploy.one("ServiceAccount"), deploy.one("ClusterRoleBinding")
    namespace = deploy.cfg.deployment.namespace
    assert deploy.pod["serviceAccountName"] == account["metadata"]["name"]
    assert account["metadata"]["namespace"] == deploy.one("DaemonSet")["metadata"]["namespace"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
    role = deploy.one("ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "watch"),
    }
    assert "RBAC cannot narrow a grant by field" in deploy.texts["rbac.yaml"]


@BOTH
def test_container_args_parse_with_the_exporter_cli(deploy: Deploy) -> None:
    container = deploy.container
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve" and args.kubernetes is True
    (port,) = container["ports"]
    assert port == {"name": "metrics", "containerPort": PORT, "protocol": "TCP"}
    assert args.listen == ("", port["containerPort"])
    assert PORT == DEFAULT_PORT
    # The socket lies in the mounted directory.
    (mount,) = container["volumeMounts"]
    assert args.pod_resources_socket == DEFAULT_SOCKET
    assert Path(args.pod_resources_socket).parent == Path(mount["mountPath"])
    attribution = deploy.cfg.deployment.per_process_attribution
    assert ("--path.procfs=/proc" in container["args"]) is attribution
    assert args.procfs == "/proc"


@BOTH
def test_probes_name_a_container_port(deploy: Deploy) -> None:
    container = deploy.container
    names = {p["name"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
        assert container[probe]["httpGet"]["port"] in names


@BOTH
def test_pod_resources_directory_is_a_read_only_host_path(deploy: Deploy) -> None:
    (volume,) = deploy.pod["volumes"]
    assert volume["hostPath"] == {
        "path": deploy.cfg.deployment.pod_resources_dir,
        "type": "Directory",
    }
    assert not volume["hostPath"]["path"].endswith(".sock")
    (mount,) = deploy.container["volumeMounts"]
    assert mount == {
        "name": volume["name"],
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }


def test_host_pid_follows_the_config() -> None:
    on = Deploy(parse_config("deployment: {per_process_attribution: true}"))
    off = Deploy(parse_config("deployment: {per_process_attribution: false}"))
    assert on.pod["hostPID"] is True
    assert "hostPID" not in off.pod
    assert "reads /proc/<pid>/cgroup" in on.texts["daemonset.yaml"]
    assert "hostPID" not in off.texts["daemonset.yaml"]
    assert on.texts["daemonset.yaml"] == DEFAULT.texts["daemonset.yaml"], "on by default"


@BOTH
def test_pod_security_and_scheduling(deploy: Deploy) -> None:
    pod, container, settings = deploy.pod, deploy.container, deploy.cfg.deployment
    assert container["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod.get("runtimeClassName", "") == settings.runtime_class_name
    assert 0 < pod["terminationGracePeriodSeconds"] <= 30
    assert pod["tolerations"][0] == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert len(pod["tolerations"]) == 1 + len(settings.extra_tolerations)
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expression,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expression["key"] == settings.node_affinity.key
    assert expression.get("values", []) == list(settings.node_affinity.values)
    assert expression["operator"] == ("In" if settings.node_affinity.values else "Exists")
    assert container["resources"] == settings.resources.model_dump()
    assert "emptyDir" not in deploy.texts["daemonset.yaml"], "the root filesystem suffices"
    quota = deploy.one("ResourceQuota")["spec"]["scopeSelector"]["matchExpressions"]
    assert quota == [
        {"scopeName": "PriorityClass", "operator": "In", "values": [pod["priorityClassName"]]}
    ]


@BOTH
def test_environment(deploy: Deploy) -> None:
    env = {e["name"]: e for e in deploy.container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["MALLOC_ARENA_MAX"]["value"] == "2"  # two glibc arenas, not one per thread


def test_image() -> None:
    assert DEFAULT.container["image"] == (
        f"ghcr.io/kube-gpu-exporter/kube-gpu-exporter:{__version__}"
    )
    assert OTHER.container["image"] == "registry.example.com/gpu/exporter:v9.9.9"


def test_variant_tolerations_and_resources() -> None:
    assert OTHER.pod["tolerations"][1:] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
        {"operator": "Exists"},
    ]
    assert OTHER.container["resources"] == {
        "requests": {"cpu": "0.1", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }


# --- what Prometheus makes of the ServiceMonitor ----------------------------------------------


def _relabel(labels: dict[str, str], relabelings: list[dict[str, Any]]) -> dict[str, str]:
    """Prometheus' relabeling, for the actions the ServiceMonitor uses."""
    out = dict(labels)
    for step in relabelings:
        regex = re.compile(step.get("regex", "(.*)"))
        if step["action"] == "labeldrop":
            out = {k: v for k, v in out.items() if not regex.fullmatch(k)}
            continue
        assert step["action"] == "replace", step
        source = step.get("separator", ";").join(
            out.get(s, "") for s in step.get("sourceLabels", [])
        )
        match = regex.fullmatch(source)
        if match:
            out[step["targetLabel"]] = match.expand(
                step.get("replacement", "$1").replace("$1", r"\1")
            )
    return out


def _target_labels(deploy: Deploy, cluster: bool = False) -> dict[str, str]:
    """A scraped target's labels: the operator's own (job = the Service's name, the pod's
    namespace/pod/container), then the ServiceMonitor's relabelings; `cluster`: the cluster
    view's target."""
    service, monitor = deploy.one("Service", cluster), deploy.one("ServiceMonitor", cluster)
    (selected,) = [
        s
        for s in deploy.objects(cluster)
        if s["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert selected is service
    (endpoint,) = monitor["spec"]["endpoints"]
    operator = {
        "__meta_kubernetes_pod_node_name": "gpu-node-7",
        "instance": "10.0.0.7:19400",
        "job": service["metadata"]["name"],
        "namespace": service["metadata"]["namespace"],
        "service": service["metadata"]["name"],
        "pod": "kube-gpu-exporter-x7k2p",
        "container": "exporter",
        "endpoint": endpoint["port"],
    }
    labels = _relabel(operator, endpoint["relabelings"])
    return {k: v for k, v in labels.items() if not k.startswith("__")}


@BOTH
def test_the_rules_select_what_the_servicemonitor_scrapes(deploy: Deploy) -> None:
    labels = _target_labels(deploy)
    for name, op, value in parse_matchers(deploy.cfg.selectors.exporter):
        assert name in labels, name
        assert labels[name] == value if op == "=" else re.fullmatch(value, labels[name])
    assert labels[deploy.cfg.labels.node] == "gpu-node-7"
    # The exporter's attribution labels are not pushed aside as exported_*.
    assert not {"namespace", "pod", "container"} & labels.keys()


@BOTH
def test_the_scheduling_rules_select_what_the_cluster_servicemonitor_scrapes(
    deploy: Deploy,
) -> None:
    labels = _target_labels(deploy, cluster=True)
    for name, op, value in parse_matchers(deploy.cfg.selectors.cluster_view):
        assert labels[name] == value if op == "=" else re.fullmatch(value, labels[name])
    # The cluster view's series carry the namespace of the pods they count.
    assert not {"namespace", "pod", "container"} & labels.keys()
    assert deploy.cfg.selectors.cluster_view in deploy.texts["rules.yaml"]


def test_no_xid_counter_is_served_at_zero_whatever_codes_the_alerts_watch() -> None:
    """The Xid alerts need no zeros (they read the Xid watch's start), so neither the default
    lists nor changed ones put --collector.xid-codes on the exporter: 16 codes × 8 GPUs were
    128 constant series on every 8-GPU node."""
    cfg = parse_config(
        "alerts: {GPUXidErrors: {xids: [79, 48]}, GPUXidApplicationErrors: {xids: [13]}}"
    )
    for config in (Config(), cfg):
        assert not any("--collector.xid-codes" in a for a in container_args(config))


def test_the_default_job_is_the_service_name() -> None:
    assert _target_labels(DEFAULT)["job"] == "kube-gpu-exporter"
    assert "targetLabel: job" not in DEFAULT.texts["servicemonitor.yaml"]
    assert _target_labels(OTHER)["job"] == "gpu-metrics"


# --- the deployment section of the thresholds file ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deployment: {namespace: GPU}", "deployment.namespace: String should match"),
        ("deployment: {per_process_attribution: 'yes'}", "per_process_attribution: Input"),
        (
            "deployment: {extra_tolerations: [{operator: Exists, value: x}]}",
            "deployment.extra_tolerations[0].value: must be empty with operator Exists (got 'x')",
        ),
        (
            "deployment: {extra_tolerations: [{effect: NoSchedule}]}",
            "deployment.extra_tolerations[0].operator: operator Equal needs a key",
        ),
        (
            "deployment: {resources: {requests: {cpu: 2, memory: 96Mi}}}",
            "deployment.resources.requests.cpu: must not exceed limits.cpu 500m (got '2')",
        ),
        (
            "deployment: {resources: {limits: {cpu: lots, memory: 1Gi}}}",
            "deployment.resources.limits.cpu: must be a positive Kubernetes quantity",
        ),
        ("deployment: {scrape_interval: 0s}", "deployment.scrape_interval: must be a positive"),
        ("deployment: {pod_resources_dir: kubelet/}", "deployment.pod_resources_dir: String"),
        ("deployment: {hostPID: true}", "deployment.hostPID: unknown key (got True)"),
        ("labels: {node: pod}", "labels.node: must not be one of job, namespace, pod, container"),
        (
            "alerts: {GPULost: {labels: {severity: page}}}",
            "alerts.GPULost.labels.severity: is the alert's own label (got 'page')",
        ),
        ("alert_labels: {1team: x}", "alert_labels"),
        (
            """selectors: {exporter: 'job="x", namespace="gpu"'}""",
            "selectors.exporter: must not match on namespace: the exporter's series carry",
        ),
    ],
)
def test_bad_deployment_settings_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    error = str(caught.value)
    assert "\n" not in error and error.startswith("t.yaml: ")
    assert message in error, error
    assert re.search(r"\(got .+\)$", error), error


@BOTH
def test_cluster_view_deployment(deploy: Deploy) -> None:
    """`cluster`'s Deployment: one replica, args the CLI parses, its own port, read-only RBAC
    on what the view watches, a Service that selects it and not the node exporter."""
    from kube_gpu_exporter.exporter import cluster_app

    deployment = deploy.one("Deployment", cluster=True)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "cluster"
    (port,) = container["ports"]
    assert args.listen == ("", port["containerPort"]) == ("", cluster_app.DEFAULT_PORT)
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": port["name"]}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert "volumeMounts" not in container and "hostPID" not in pod["spec"]

    account = deploy.one("ServiceAccount", cluster=True)
    assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    role = deploy.one("ClusterRole", cluster=True)
    binding = deploy.one("ClusterRoleBinding", cluster=True)
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": deploy.cfg.deployment.namespace,
        }
    ]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["nodes", "resourcequotas", "events"],
            "verbs": ["list", "watch"],
        },
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": [
                "workloads",
                "localqueues",
                "clusterqueues",
                "resourceflavors",
                "cohorts",
            ],
            "verbs": ["list", "watch"],
        },
    ]
    service = deploy.one("Service", cluster=True)
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["port"] == cluster_app.DEFAULT_PORT
    node_pods = deploy.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= node_pods.items()
    monitor = deploy.one("ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert not monitor.items() <= labels.items(), "the node ServiceMonitor must not scrape it"
