"""`generate`'s NetworkPolicy: written when the thresholds file names the Prometheus that
scrapes, admitting it (and the node ranges given for the kubelet's probes) to each exporter
workload's port only; absent otherwise. Strictly validated against Kubernetes' schemas."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kube_gpu_exporter.exporter.generate.outputs import render_outputs
from kube_gpu_exporter.rules.config import Config, parse_config
from support import exporter_command

K8S_VERSIONS = ("1.30.0", "1.34.0")
POLICY = "network-policy.yaml"
CLUSTER_POLICY = "cluster-network-policy.yaml"
SCRAPER = """
deployment:
  network_policy:
    prometheus_namespace_labels: {kubernetes.io/metadata.name: monitoring}
    prometheus_pod_labels: {app.kubernetes.io/name: prometheus}
    node_cidrs: [10.0.0.0/16, "fd00::/64"]
"""


def documents(outputs: dict[str, str], name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(outputs[name]) if doc]


def test_no_policy_without_a_prometheus_selector() -> None:
    outputs = render_outputs(Config())
    assert POLICY not in outputs and CLUSTER_POLICY not in outputs
    (kustomization,) = documents(outputs, "kustomization.yaml")
    assert not {POLICY, CLUSTER_POLICY} & set(kustomization["resources"])


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_policies_admit_the_scraper_to_each_workload_s_port(version: str) -> None:
    outputs = render_outputs(parse_config(SCRAPER))
    policies = documents(outputs, POLICY) + documents(outputs, CLUSTER_POLICY)
    (kustomization,) = documents(outputs, "kustomization.yaml")
    assert {POLICY, CLUSTER_POLICY} <= set(kustomization["resources"])
    workloads = [
        (documents(outputs, "daemonset.yaml")[0], "DaemonSet"),
        *(
            (doc, doc["kind"])
            for doc in documents(outputs, "cluster.yaml")
            if doc["kind"] == "Deployment"
        ),
    ]
    assert len(policies) == len(workloads) == 2
    for policy, (workload, kind) in zip(policies, workloads, strict=True):
        kubernetes_validate.validate(policy, version, strict=True)
        assert policy["kind"] == "NetworkPolicy", kind
        assert policy["metadata"]["namespace"] == workload["metadata"]["namespace"]
        template = workload["spec"]["template"]
        selected = policy["spec"]["podSelector"]["matchLabels"]
        assert selected.items() <= template["metadata"]["labels"].items(), kind
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        (rule,) = policy["spec"]["ingress"]
        (container,) = template["spec"]["containers"]
        assert rule["ports"] == [
            {"protocol": "TCP", "port": container["ports"][0]["containerPort"]}
        ]
        assert rule["from"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            },
            {"ipBlock": {"cidr": "10.0.0.0/16"}},
            {"ipBlock": {"cidr": "fd00::/64"}},
        ]
    assert "hostNetwork" in outputs[POLICY]  # the comment says where it does not apply


def test_a_namespace_alone_admits_every_pod_of_it() -> None:
    cfg = parse_config(
        "deployment:\n  network_policy:\n"
        "    prometheus_namespace_labels: {kubernetes.io/metadata.name: monitoring}\n"
    )
    outputs = render_outputs(cfg)
    for policy in documents(outputs, POLICY) + documents(outputs, CLUSTER_POLICY):
        (rule,) = policy["spec"]["ingress"]
        assert rule["from"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ]


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("node_cidrs: [10.0.0.0/33]", "not an address range (CIDR): '10.0.0.0/33'"),
        ("prometheus_pod_labels: {'bad key!': x}", "prometheus_pod_labels"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, setting: str, said: str) -> None:
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text(f"deployment:\n  network_policy:\n    {setting}\n")
    result = subprocess.run(
        exporter_command("generate", f"--config={thresholds}", f"--out={tmp_path / 'out'}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr
