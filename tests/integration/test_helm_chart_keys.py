"""Each of the chart's own keys, set with `helm template`: the rendered object carries it. One
case per key of charts/kube-gpu-exporter/values.yaml's camelCase part (chart_keys.py), and a
test that no key lacks its case: a key that renders nothing would be a silent no-op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_helm_chart import OPERATOR_APIS, of_kind, rendered_objects

from kube_gpu_exporter.exporter.generate.chart_keys import keys

Objs = dict[tuple[str, str, str], dict[str, Any]]


def ds(objs: Objs) -> dict[str, Any]:
    (daemonset,) = of_kind(objs, "DaemonSet")
    return daemonset


def pod(objs: Objs) -> dict[str, Any]:
    spec: dict[str, Any] = ds(objs)["spec"]["template"]["spec"]
    return spec


def container(objs: Objs) -> dict[str, Any]:
    first: dict[str, Any] = pod(objs)["containers"][0]
    return first


def cluster_pod(objs: Objs) -> dict[str, Any]:
    (deployment,) = of_kind(objs, "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def monitor(objs: Objs) -> dict[str, Any]:
    return of_kind(objs, "ServiceMonitor")[0]


def endpoint(objs: Objs) -> dict[str, Any]:
    first: dict[str, Any] = monitor(objs)["spec"]["endpoints"][0]
    return first


def svc(objs: Objs) -> dict[str, Any]:
    return next(
        s for s in of_kind(objs, "Service") if s["metadata"]["name"] == "kge-kube-gpu-exporter"
    )


def node_health_rules(objs: Objs) -> set[tuple[str, str]]:
    """(resource, verb) of the opt-in node-health ClusterRole (templates/node-health.yaml)."""
    (role,) = [
        r for r in of_kind(objs, "ClusterRole") if r["metadata"]["name"].endswith("-node-health")
    ]
    return {
        (res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]
    }


TAINT = "nvidia.com/gpu-needs-reset"
OBJ = '{"a":"b"}'
LIST = '[{"name":"x","value":"y"}]'
# key → (--set-json value, what the rendered objects show). --set-json: a value as JSON.
CASES: dict[str, tuple[str, Callable[[Objs], bool]]] = {
    "nameOverride": ('"gpux"', lambda o: ds(o)["metadata"]["name"] == "kge-gpux"),
    "fullnameOverride": ('"gx"', lambda o: ds(o)["metadata"]["name"] == "gx"),
    "namespaceOverride": ('"gpu"', lambda o: {ns for (_, ns, _) in o} == {"", "gpu"}),
    "image.repository": (
        '"r.example/x"',
        lambda o: container(o)["image"].startswith("r.example/x:"),
    ),
    "image.tag": ('"9.9"', lambda o: container(o)["image"].endswith(":9.9")),
    "image.pullPolicy": ('"Always"', lambda o: container(o)["imagePullPolicy"] == "Always"),
    "imagePullSecrets": (
        '[{"name":"reg"}]',
        lambda o: pod(o)["imagePullSecrets"] == [{"name": "reg"}],
    ),
    "hostPID": (
        "false",
        lambda o: "hostPID" not in pod(o) and "--path.procfs=/proc" not in container(o)["args"],
    ),
    "hostNetwork": (
        "true",
        lambda o: pod(o)["hostNetwork"] and pod(o)["dnsPolicy"] == "ClusterFirstWithHostNet",
    ),
    "runtimeClassName": ('""', lambda o: "runtimeClassName" not in pod(o)),
    "priorityClassName": (
        '"high"',
        lambda o: (
            pod(o)["priorityClassName"] == "high"
            and of_kind(o, "ResourceQuota")[0]["spec"]["scopeSelector"]["matchExpressions"][0][
                "values"
            ]
            == ["high"]
        ),
    ),
    "priorityClassQuota.enabled": ("false", lambda o: not of_kind(o, "ResourceQuota")),
    "podResourcesDir": (
        '"/var/lib/k0s/kubelet/pod-resources"',
        lambda o: pod(o)["volumes"][0]["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources",
    ),
    "podLabelAllowlist": (
        '["team","app"]',
        lambda o: "--kubernetes.pod-labels=team,app" in container(o)["args"],
    ),
    "extraArgs": (
        '["--log.level=debug"]',
        lambda o: container(o)["args"][-1] == "--log.level=debug",
    ),
    "extraEnv": (LIST, lambda o: container(o)["env"][-1] == {"name": "x", "value": "y"}),
    "extraVolumes": (
        '[{"name":"v","emptyDir":{}}]',
        lambda o: pod(o)["volumes"][-1]["name"] == "v",
    ),
    "extraVolumeMounts": (
        '[{"name":"v","mountPath":"/v"}]',
        lambda o: container(o)["volumeMounts"][-1]["mountPath"] == "/v",
    ),
    "initContainers": (
        '[{"name":"i","image":"busybox"}]',
        lambda o: pod(o)["initContainers"][0]["name"] == "i",
    ),
    "nodeSelector": (OBJ, lambda o: pod(o)["nodeSelector"] == {"a": "b"}),
    "affinity": ('{"podAntiAffinity":{}}', lambda o: "podAntiAffinity" in pod(o)["affinity"]),
    "tolerations": (
        '[{"operator":"Exists"}]',
        lambda o: pod(o)["tolerations"] == [{"operator": "Exists"}],
    ),
    "podLabels": (OBJ, lambda o: ds(o)["spec"]["template"]["metadata"]["labels"]["a"] == "b"),
    "podAnnotations": (
        OBJ,
        lambda o: ds(o)["spec"]["template"]["metadata"]["annotations"] == {"a": "b"},
    ),
    "podSecurityContext": ('{"fsGroup":2}', lambda o: pod(o)["securityContext"]["fsGroup"] == 2),
    "securityContext": (
        '{"privileged":true}',
        lambda o: container(o)["securityContext"]["privileged"] is True,
    ),
    "resources": (
        '{"limits":{"memory":"1Gi"}}',
        lambda o: container(o)["resources"]["limits"]["memory"] == "1Gi",
    ),
    "livenessProbe": (
        '{"periodSeconds":7}',
        lambda o: container(o)["livenessProbe"]["periodSeconds"] == 7,
    ),
    "readinessProbe": (
        '{"periodSeconds":8}',
        lambda o: container(o)["readinessProbe"]["periodSeconds"] == 8,
    ),
    "updateStrategy": (
        '{"type":"OnDelete","rollingUpdate":null}',
        lambda o: ds(o)["spec"]["updateStrategy"] == {"type": "OnDelete"},
    ),
    "terminationGracePeriodSeconds": (
        "30",
        lambda o: pod(o)["terminationGracePeriodSeconds"] == 30,
    ),
    "serviceAccount.create": (
        "false",
        lambda o: not of_kind(o, "ServiceAccount") and pod(o)["serviceAccountName"] == "default",
    ),
    "serviceAccount.name": (
        '"sa"',
        lambda o: (
            pod(o)["serviceAccountName"] == "sa"
            and any(s["metadata"]["name"] == "sa" for s in of_kind(o, "ServiceAccount"))
        ),
    ),
    "serviceAccount.annotations": (
        OBJ,
        lambda o: all(
            s["metadata"]["annotations"] == {"a": "b"} for s in of_kind(o, "ServiceAccount")
        ),
    ),
    "rbac.create": (
        "false",
        lambda o: not of_kind(o, "ClusterRole") and not of_kind(o, "ClusterRoleBinding"),
    ),
    "nodeHealth.conditions": (
        "true",
        lambda o: (
            "--health.node-conditions" in container(o)["args"]
            and node_health_rules(o) == {("nodes", "get"), ("nodes/status", "patch")}
        ),
    ),
    "nodeHealth.taint": (
        "true",
        lambda o: (
            f"--health.node-taint={TAINT}" in container(o)["args"]
            and ("nodes", "patch") in node_health_rules(o)
        ),
    ),
    "nodeHealth.taintKey": (
        '"example.com/gpu-broken"',
        lambda o: "--health.node-taint=example.com/gpu-broken" in container(o)["args"],
    ),
    "nodeHealth.admissionPolicy": (
        "true",
        lambda o: (
            len(of_kind(o, "ValidatingAdmissionPolicy")) == 1
            and of_kind(o, "ValidatingAdmissionPolicyBinding")[0]["spec"]["validationActions"]
            == ["Deny"]
        ),
    ),
    "service.enabled": (
        "false",
        lambda o: (
            [s["metadata"]["name"] for s in of_kind(o, "Service")]
            == ["kge-kube-gpu-exporter-cluster"]
        ),
    ),
    "service.type": ('"NodePort"', lambda o: svc(o)["spec"]["type"] == "NodePort"),
    "service.clusterIP": ('""', lambda o: "clusterIP" not in svc(o)["spec"]),
    "service.port": ("9400", lambda o: svc(o)["spec"]["ports"][0]["port"] == 9400),
    "service.annotations": (OBJ, lambda o: svc(o)["metadata"]["annotations"] == {"a": "b"}),
    "service.internalTrafficPolicy": (
        '"Local"',
        lambda o: svc(o)["spec"]["internalTrafficPolicy"] == "Local",
    ),
    "serviceMonitor.enabled": ("true", lambda o: len(of_kind(o, "ServiceMonitor")) == 2),
    "serviceMonitor.interval": ('"15s"', lambda o: endpoint(o)["interval"] == "15s"),
    "serviceMonitor.scrapeTimeout": ('"10s"', lambda o: endpoint(o)["scrapeTimeout"] == "10s"),
    "serviceMonitor.honorLabels": ("true", lambda o: endpoint(o)["honorLabels"] is True),
    "serviceMonitor.additionalLabels": (
        '{"release":"prom"}',
        lambda o: monitor(o)["metadata"]["labels"]["release"] == "prom",
    ),
    "serviceMonitor.relabelings": (
        '[{"action":"labeldrop","regex":"x"}]',
        lambda o: endpoint(o)["relabelings"][-1]["regex"] == "x",
    ),
    "serviceMonitor.metricRelabelings": (
        '[{"action":"labeldrop","regex":"y"}]',
        lambda o: endpoint(o)["metricRelabelings"][0]["regex"] == "y",
    ),
    "serviceMonitor.tlsConfig": (
        '{"insecureSkipVerify":true}',
        lambda o: endpoint(o)["tlsConfig"] == {"insecureSkipVerify": True},
    ),
    "serviceMonitor.basicAuth": (
        '{"username":{"name":"s","key":"u"}}',
        lambda o: endpoint(o)["basicAuth"]["username"]["name"] == "s",
    ),
    "webConfig.existingSecret": (
        '"web"',
        lambda o: (
            "--web.config.file=/etc/kube-gpu-exporter/web/web-config.yml" in container(o)["args"]
            and pod(o)["volumes"][-1]["secret"]["secretName"] == "web"
            and cluster_pod(o)["volumes"][0]["secret"]["secretName"] == "web"
        ),
    ),
    "webConfig.key": (
        '"w.yml"',
        lambda o: "--web.config.file=/etc/kube-gpu-exporter/web/w.yml" in container(o)["args"],
    ),
    "webConfig.tls": (
        "true",
        lambda o: (
            endpoint(o)["scheme"] == "https"
            and container(o)["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        ),
    ),
    "networkPolicy.enabled": ("true", lambda o: len(of_kind(o, "NetworkPolicy")) == 2),
    "networkPolicy.prometheusNamespaceLabels": (
        OBJ,
        lambda o: (
            of_kind(o, "NetworkPolicy")[0]["spec"]["ingress"][0]["from"][0]["namespaceSelector"][
                "matchLabels"
            ]
            == {"a": "b"}
        ),
    ),
    "networkPolicy.prometheusPodLabels": (
        OBJ,
        lambda o: (
            of_kind(o, "NetworkPolicy")[0]["spec"]["ingress"][0]["from"][0]["podSelector"][
                "matchLabels"
            ]
            == {"a": "b"}
        ),
    ),
    "networkPolicy.nodeCIDRs": (
        '["10.0.0.0/8"]',
        lambda o: (
            of_kind(o, "NetworkPolicy")[0]["spec"]["ingress"][0]["from"][1]
            == {"ipBlock": {"cidr": "10.0.0.0/8"}}
        ),
    ),
    "cluster.enabled": (
        "false",
        lambda o: not of_kind(o, "Deployment") and len(of_kind(o, "ServiceMonitor")) == 1,
    ),
    "cluster.resources": (
        '{"limits":{"memory":"2Gi"}}',
        lambda o: cluster_pod(o)["containers"][0]["resources"]["limits"]["memory"] == "2Gi",
    ),
    "cluster.extraArgs": (
        '["--cluster.interval=30s"]',
        lambda o: cluster_pod(o)["containers"][0]["args"][-1] == "--cluster.interval=30s",
    ),
    "cluster.nodeSelector": (OBJ, lambda o: cluster_pod(o)["nodeSelector"] == {"a": "b"}),
    "cluster.affinity": (
        '{"podAntiAffinity":{}}',
        lambda o: "podAntiAffinity" in cluster_pod(o)["affinity"],
    ),
    "cluster.tolerations": (
        '[{"operator":"Exists"}]',
        lambda o: cluster_pod(o)["tolerations"] == [{"operator": "Exists"}],
    ),
    "cluster.priorityClassName": (
        '"high"',
        lambda o: cluster_pod(o)["priorityClassName"] == "high",
    ),
    "cluster.podLabels": (
        OBJ,
        lambda o: of_kind(o, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]["a"] == "b",
    ),
    "cluster.podAnnotations": (
        OBJ,
        lambda o: (
            of_kind(o, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}
        ),
    ),
    "cluster.podSecurityContext": (
        '{"fsGroup":2}',
        lambda o: cluster_pod(o)["securityContext"]["fsGroup"] == 2,
    ),
    "cluster.securityContext": (
        '{"runAsUser":1000}',
        lambda o: cluster_pod(o)["containers"][0]["securityContext"]["runAsUser"] == 1000,
    ),
    "prometheusRule.enabled": ("false", lambda o: not of_kind(o, "PrometheusRule")),
    "prometheusRule.namespace": (
        '"obs"',
        lambda o: of_kind(o, "PrometheusRule")[0]["metadata"]["namespace"] == "obs",
    ),
    "prometheusRule.additionalLabels": (
        '{"release":"prom"}',
        lambda o: of_kind(o, "PrometheusRule")[0]["metadata"]["labels"]["release"] == "prom",
    ),
    "grafanaDashboards.enabled": ("false", lambda o: not of_kind(o, "ConfigMap")),
    "grafanaDashboards.namespace": (
        '"grafana"',
        lambda o: {c["metadata"]["namespace"] for c in of_kind(o, "ConfigMap")} == {"grafana"},
    ),
    "grafanaDashboards.additionalLabels": (
        OBJ,
        lambda o: all(
            c["metadata"]["labels"]["a"] == "b"
            and c["metadata"]["labels"]["grafana_dashboard"] == "1"
            for c in of_kind(o, "ConfigMap")
        ),
    ),
    "alertmanagerConfig.enabled": ("true", lambda o: len(of_kind(o, "AlertmanagerConfig")) == 1),
    "alertmanagerConfig.namespace": (
        '"am"',
        lambda o: of_kind(o, "AlertmanagerConfig")[0]["metadata"]["namespace"] == "am",
    ),
    "alertmanagerConfig.additionalLabels": (
        '{"release":"prom"}',
        lambda o: of_kind(o, "AlertmanagerConfig")[0]["metadata"]["labels"]["release"] == "prom",
    ),
}
# Keys whose effect shows only with another key set.
NEEDS = {
    "nodeHealth.taintKey": ["--set", "nodeHealth.taint=true"],
    "nodeHealth.admissionPolicy": ["--set", "nodeHealth.conditions=true"],
    "networkPolicy.enabled": ["--set", "networkPolicy.prometheusPodLabels.app=prometheus"],
    "webConfig.key": ["--set", "webConfig.existingSecret=web"],
    "webConfig.tls": ["--set", "webConfig.existingSecret=web"],
    "networkPolicy.prometheusNamespaceLabels": ["--set", "networkPolicy.enabled=true"],
    "networkPolicy.prometheusPodLabels": ["--set", "networkPolicy.enabled=true"],
    "networkPolicy.nodeCIDRs": [
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.prometheusPodLabels.a=b",
    ],
    "alertmanagerConfig.namespace": ["--set", "alertmanagerConfig.enabled=true"],
    "alertmanagerConfig.additionalLabels": ["--set", "alertmanagerConfig.enabled=true"],
    "service.clusterIP": [],
}


def test_every_chart_key_has_a_case() -> None:
    assert sorted(CASES) == sorted(k.path for k in keys())


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_set_key_reaches_the_rendered_object(key: str) -> None:
    value, shows = CASES[key]
    apis = [] if key == "serviceMonitor.enabled" else list(OPERATOR_APIS)
    objs = rendered_objects(*apis, *NEEDS.get(key, []), "--set-json", f"{key}={value}")
    assert shows(objs), key
