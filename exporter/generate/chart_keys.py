"""The Helm chart's own keys (the workloads': image, scheduling, security, Service, ServiceMonitor,
switches), one row each: dotted path, default, JSON Schema, description.

One table, like kube-state-metrics' metric families: values.yaml, its comments, the schema and
the chart README's table (chart_docs.py) are all written from it, so a key cannot be
documented and untyped, or typed and missing from values.yaml. The names are the ones
dcgm-exporter's chart and kube-prometheus-stack taught Helm users; the defaults are deploy/'s
settings, taken from the modules that write deploy/, so the two agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kube_gpu_exporter.exporter.generate.cluster_deployment import RESOURCES as CLUSTER_RESOURCES
from kube_gpu_exporter.exporter.generate.cluster_deployment import (
    SECURITY_CONTEXT as CLUSTER_SECURITY_CONTEXT,
)
from kube_gpu_exporter.exporter.generate.daemonset import (
    POD_SECURITY_CONTEXT,
    PORT,
    PROBE_TIMING,
    SECURITY_CONTEXT,
    TERMINATION_GRACE_SECONDS,
    UPDATE_STRATEGY,
    node_affinity,
    tolerations,
)
from kube_gpu_exporter.exporter.generate.manifests import PRIORITY_CLASS
from kube_gpu_exporter.rules.config import Config

STRING: Final = {"type": "string"}
BOOL: Final = {"type": "boolean"}
OBJECT: Final = {"type": "object"}  # a Kubernetes structure passed through as given
STRINGS_MAP: Final = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECTS: Final = {"type": "array", "items": {"type": "object"}}
STRINGS: Final = {"type": "array", "items": {"type": "string"}}
# On, off, or "auto": rendered when the API server serves the prometheus-operator's kind.
SWITCH: Final = {"enum": [True, False, "auto"]}
DURATION: Final = {"type": "string", "pattern": r"^(([0-9]+(ms|s|m|h|d|w|y))+)?$"}
K8S_NAME: Final = {"type": "string", "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$"}


@dataclass(frozen=True)
class Key:
    path: str
    default: Any
    schema: dict[str, Any]
    doc: str


def keys() -> tuple[Key, ...]:
    """Every chart key, in values.yaml's order."""
    cfg = Config()
    image = cfg.deployment.image
    return (
        Key("nameOverride", "", STRING, "Replaces the chart's name in object names and labels."),
        Key("fullnameOverride", "", STRING, "The objects' full name, instead of release-chart."),
        Key("namespaceOverride", "", K8S_NAME, "Namespace of every object, instead of -n."),
        Key("image.repository", image.repository, STRING, "The exporter's image."),
        Key("image.tag", image.tag, STRING, "Image tag; empty: the chart's appVersion."),
        Key(
            "image.pullPolicy",
            "IfNotPresent",
            {"enum": ["Always", "IfNotPresent", "Never"]},
            "When the kubelet pulls the image.",
        ),
        Key("imagePullSecrets", [], OBJECTS, "Secrets to pull the image with ({name: ...})."),
        Key(
            "hostPID",
            cfg.deployment.per_process_attribution,
            BOOL,
            "Per-process attribution: the host PID namespace, to tie processes on a shared GPU "
            "to their pods (off: no per-pod usage of shared GPUs).",
        ),
        Key("hostNetwork", False, BOOL, "Run the node exporters in the node's network."),
        Key(
            "runtimeClassName",
            cfg.deployment.runtime_class_name,
            K8S_NAME,
            "RuntimeClass whose NVIDIA toolkit injects NVML; empty where it is the default.",
        ),
        Key(
            "priorityClassName",
            PRIORITY_CLASS,
            K8S_NAME,
            "Scheduled on full GPU nodes and evicted last.",
        ),
        Key(
            "priorityClassQuota.enabled",
            True,
            BOOL,
            "A ResourceQuota scoped to priorityClassName: some clusters (GKE) admit "
            "system-node-critical pods outside kube-system only with one.",
        ),
        Key(
            "podResourcesDir",
            cfg.deployment.pod_resources_dir,
            {"type": "string", "pattern": r"^/[^\s]*[^/\s]$"},
            "The kubelet's pod-resources directory on the host (dcgm-exporter: kubeletPath).",
        ),
        Key(
            "podLabelAllowlist",
            [],
            STRINGS,
            "Pod labels copied onto nvidia_gpu_allocation_info as label_<key>.",
        ),
        Key("extraArgs", [], STRINGS, "More flags for `kube-gpu-exporter serve`."),
        Key("extraEnv", [], OBJECTS, "More environment variables of the exporter container."),
        Key("extraVolumes", [], OBJECTS, "More volumes of the exporter pods."),
        Key("extraVolumeMounts", [], OBJECTS, "More volume mounts of the exporter container."),
        Key("initContainers", [], OBJECTS, "Init containers of the exporter pods."),
        Key("nodeSelector", {}, STRINGS_MAP, "Node labels the exporter pods require."),
        Key(
            "affinity",
            node_affinity(cfg),
            OBJECT,
            "The exporter pods' affinity; by default GPU nodes only (GPU feature discovery's "
            "label).",
        ),
        Key("tolerations", tolerations(cfg), OBJECTS, "The exporter pods' tolerations."),
        Key("podLabels", {}, STRINGS_MAP, "More labels of the exporter pods."),
        Key("podAnnotations", {}, STRINGS_MAP, "Annotations of the exporter pods."),
        Key("podSecurityContext", POD_SECURITY_CONTEXT, OBJECT, "The exporter pods' context."),
        Key(
            "securityContext",
            SECURITY_CONTEXT,
            OBJECT,
            "The exporter container's context: root for the kubelet's socket, no capability, "
            "a read-only root filesystem.",
        ),
        Key(
            "resources",
            {
                "requests": cfg.deployment.resources.requests.model_dump(),
                "limits": cfg.deployment.resources.limits.model_dump(),
            },
            OBJECT,
            "The exporter container's requests and limits.",
        ),
        Key("livenessProbe", PROBE_TIMING, OBJECT, "Timing of the /healthz probe."),
        Key("readinessProbe", PROBE_TIMING, OBJECT, "Timing of the /readyz probe."),
        Key("updateStrategy", UPDATE_STRATEGY, OBJECT, "The DaemonSet's update strategy."),
        Key(
            "terminationGracePeriodSeconds",
            TERMINATION_GRACE_SECONDS,
            {"type": "integer", "minimum": 0},
            "Seconds a stopping pod is given.",
        ),
        Key("serviceAccount.create", True, BOOL, "Create the ServiceAccounts."),
        Key(
            "serviceAccount.name",
            "",
            K8S_NAME,
            "The exporter's ServiceAccount; empty: the full name (or `default` when not created).",
        ),
        Key("serviceAccount.annotations", {}, STRINGS_MAP, "Annotations of the ServiceAccounts."),
        Key("rbac.create", True, BOOL, "Create the read-only ClusterRoles and their bindings."),
        Key(
            "nodeHealth.conditions",
            False,
            BOOL,
            "Write the GPUHealthy condition on each exporter's Node (`--health.node-conditions`), "
            "with a ClusterRole of its own: get nodes, patch nodes/status (docs/gpu-health.md).",
        ),
        Key(
            "nodeHealth.taint",
            False,
            BOOL,
            "Taint the Node NoSchedule while a GPU needs a reset or a reboot "
            "(`--health.node-taint`); its ClusterRole may also get and patch nodes.",
        ),
        Key("nodeHealth.taintKey", "nvidia.com/gpu-needs-reset", STRING, "The taint's key."),
        Key(
            "nodeHealth.admissionPolicy",
            False,
            BOOL,
            "A ValidatingAdmissionPolicy (Kubernetes 1.30+) that lets the exporters' "
            "ServiceAccount write only the Node its pod runs on, and there only the condition "
            "and the taint.",
        ),
        Key("service.enabled", True, BOOL, "The exporters' Service (and so their scraping)."),
        Key(
            "service.type",
            "ClusterIP",
            {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
            "The Service's type.",
        ),
        Key(
            "service.clusterIP",
            "None",
            STRING,
            "None: headless, every pod scraped; empty for a virtual IP (NodePort needs one).",
        ),
        Key("service.port", PORT, {"type": "integer", "minimum": 1, "maximum": 65535}, "Port."),
        Key("service.annotations", {}, STRINGS_MAP, "Annotations of the Services."),
        Key(
            "service.internalTrafficPolicy",
            "",
            {"enum": ["", "Cluster", "Local"]},
            "The Service's internalTrafficPolicy; empty: the server's default.",
        ),
        Key(
            "serviceMonitor.enabled",
            "auto",
            SWITCH,
            "The ServiceMonitors; auto: when the API server serves monitoring.coreos.com/v1 "
            "(`helm template` needs --api-versions monitoring.coreos.com/v1/ServiceMonitor).",
        ),
        Key(
            "serviceMonitor.interval",
            cfg.deployment.scrape_interval,
            DURATION,
            "Scrape interval.",
        ),
        Key("serviceMonitor.scrapeTimeout", "", DURATION, "Scrape timeout; empty: Prometheus'."),
        Key("serviceMonitor.honorLabels", False, BOOL, "Keep scraped labels over target labels."),
        Key(
            "serviceMonitor.additionalLabels",
            {},
            STRINGS_MAP,
            "Labels your Prometheus selects ServiceMonitors by (kube-prometheus-stack: "
            "release: <its release name>).",
        ),
        Key("serviceMonitor.relabelings", [], OBJECTS, "More target relabelings."),
        Key("serviceMonitor.metricRelabelings", [], OBJECTS, "Metric relabelings."),
        Key("serviceMonitor.tlsConfig", {}, OBJECT, "The endpoints' tlsConfig (webConfig.tls)."),
        Key("serviceMonitor.basicAuth", {}, OBJECT, "The endpoints' basicAuth (Secret refs)."),
        Key(
            "webConfig.existingSecret",
            "",
            K8S_NAME,
            "A Secret holding a Prometheus web config file (TLS, basic auth) and the files it "
            "names, mounted at /etc/kube-gpu-exporter/web; empty: plain HTTP.",
        ),
        Key("webConfig.key", "web-config.yml", STRING, "The web config file's key there."),
        Key("webConfig.tls", False, BOOL, "The web config serves TLS: HTTPS probes and scrapes."),
        Key(
            "networkPolicy.enabled",
            False,
            BOOL,
            "NetworkPolicies: only the Prometheus selected below reaches the ports.",
        ),
        Key("networkPolicy.prometheusNamespaceLabels", {}, STRINGS_MAP, "Its namespace labels."),
        Key("networkPolicy.prometheusPodLabels", {}, STRINGS_MAP, "Its pod labels."),
        Key("networkPolicy.nodeCIDRs", [], STRINGS, "Node ranges admitted for the probes."),
        Key("cluster.enabled", True, BOOL, "The cluster view (why GPU pods wait): a Deployment."),
        Key("cluster.resources", CLUSTER_RESOURCES, OBJECT, "The cluster view's resources."),
        Key("cluster.extraArgs", [], STRINGS, "More flags for `kube-gpu-exporter cluster`."),
        Key("cluster.nodeSelector", {}, STRINGS_MAP, "The cluster view's nodeSelector."),
        Key("cluster.affinity", {}, OBJECT, "The cluster view's affinity."),
        Key("cluster.tolerations", [], OBJECTS, "The cluster view's tolerations."),
        Key("cluster.priorityClassName", "", K8S_NAME, "The cluster view's priority class."),
        Key("cluster.podLabels", {}, STRINGS_MAP, "More labels of the cluster view's pod."),
        Key("cluster.podAnnotations", {}, STRINGS_MAP, "Annotations of its pod."),
        Key("cluster.podSecurityContext", POD_SECURITY_CONTEXT, OBJECT, "Its pod's context."),
        Key("cluster.securityContext", CLUSTER_SECURITY_CONTEXT, OBJECT, "Its container's."),
        Key(
            "prometheusRule.enabled",
            "auto",
            SWITCH,
            "The alerts and recording rules; auto: when monitoring.coreos.com/v1 is served.",
        ),
        Key("prometheusRule.namespace", "", K8S_NAME, "Its namespace; empty: the release's."),
        Key(
            "prometheusRule.additionalLabels",
            {},
            STRINGS_MAP,
            "Labels your Prometheus selects rules by (kube-prometheus-stack: release).",
        ),
        Key("grafanaDashboards.enabled", True, BOOL, "The dashboards, as sidecar ConfigMaps."),
        Key("grafanaDashboards.namespace", "", K8S_NAME, "Their namespace; empty: the release's."),
        Key("grafanaDashboards.additionalLabels", {}, STRINGS_MAP, "More labels of theirs."),
        Key(
            "alertmanagerConfig.enabled",
            False,
            BOOL,
            "The inhibit rules as an AlertmanagerConfig (monitoring.coreos.com/v1alpha1).",
        ),
        Key("alertmanagerConfig.namespace", "", K8S_NAME, "Its namespace; empty: the release's."),
        Key("alertmanagerConfig.additionalLabels", {}, STRINGS_MAP, "Labels it is selected by."),
    )


def chart_defaults() -> dict[str, Any]:
    """The keys' defaults as nested values."""
    values: dict[str, Any] = {}
    for key in keys():
        *parents, leaf = key.path.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = key.default
    return values


def chart_schema() -> dict[str, Any]:
    """The keys' JSON Schema properties; each section of ours closed to other keys, so a typo
    in it is refused by name."""
    properties: dict[str, Any] = {}
    for key in keys():
        *parents, leaf = key.path.split(".")
        node = properties
        for part in parents:
            section = node.setdefault(
                part, {"type": "object", "additionalProperties": False, "properties": {}}
            )
            node = section["properties"]
        node[leaf] = {**key.schema, "description": key.doc}
    return properties
