"""deploy/node-health/: the opt-in Node writes of `serve --health.node-conditions` for
`kubectl apply -k` users, as a kustomize Component that their own kustomization adds beside
deploy/ (`components: [.../deploy/node-health]`); deploy/'s own kustomization never lists it.

The same objects as the chart's templates/node-health.yaml with `nodeHealth.conditions` and
`nodeHealth.admissionPolicy` on: a ClusterRole of its own (get nodes, patch nodes/status), its
binding, and the ValidatingAdmissionPolicy that confines the exporter's ServiceAccount to the
Node its pod-bound token names (docs/gpu-health.md says why RBAC alone cannot). A test renders
the chart and finds these objects, so the CEL below and the template's cannot drift apart.
The taint is left to the chart (`nodeHealth.taint`): it needs `patch nodes` as well.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kube_gpu_exporter.exporter.generate.daemonset import NAME, SELECTOR_LABELS, commented
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.render import HEADER, dump_yaml

FOLDER: Final = "node-health"
ROLE: Final = f"{NAME}-node-health"
CONDITION: Final = "GPUHealthy"
TAINT_KEY: Final = "nvidia.com/gpu-needs-reset"  # the chart's nodeHealth.taintKey default
NODE_CLAIM: Final = "authentication.kubernetes.io/node-name"


def role_dicts(cfg: Config) -> list[dict[str, Any]]:
    """The ClusterRole of the condition and its binding to the exporter's ServiceAccount."""
    metadata = {"name": ROLE, "labels": dict(SELECTOR_LABELS)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [
            {"kind": "ServiceAccount", "name": NAME, "namespace": cfg.deployment.namespace}
        ],
    }
    return [role, binding]


def _validations() -> list[dict[str, str]]:
    """What the exporter's account may change, in the chart template's CEL, word for word."""
    others = f"filter(c, c.type != '{CONDITION}')"
    taints = f"filter(t, t.key != '{TAINT_KEY}')"
    return [
        {
            "expression": "variables.tokenNode == [object.metadata.name]",
            "reason": "Forbidden",
            "messageExpression": "'the GPU exporter may write only the Node its pod runs on ('"
            " + object.metadata.name + ' is not ' + variables.tokenNode.join(', ') + ')'",
        },
        {
            "expression": "request.?subResource.orValue('') != 'status' || "
            f"object.status.?conditions.orValue([]).{others} == "
            f"oldObject.status.?conditions.orValue([]).{others} && "
            "object.status.?capacity == oldObject.status.?capacity && "
            "object.status.?allocatable == oldObject.status.?allocatable",
            "reason": "Forbidden",
            "message": f"the GPU exporter may change only the {CONDITION} condition of the "
            "Node's status",
        },
        {
            "expression": "request.?subResource.orValue('') != '' || "
            "object.metadata.?labels == oldObject.metadata.?labels && "
            "object.metadata.?annotations == oldObject.metadata.?annotations && "
            "object.spec.?unschedulable == oldObject.spec.?unschedulable && "
            f"object.spec.?taints.orValue([]).{taints} == "
            f"oldObject.spec.?taints.orValue([]).{taints}",
            "reason": "Forbidden",
            "message": f"the GPU exporter may change only its taint {TAINT_KEY} of the Node",
        },
    ]


def policy_dicts(cfg: Config) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Kubernetes 1.30+)."""
    account = f"system:serviceaccount:{cfg.deployment.namespace}:{NAME}"
    metadata = {"name": ROLE, "labels": dict(SELECTOR_LABELS)}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes", "nodes/status"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "the-exporters-service-account",
                    "expression": f'request.userInfo.username == "{account}"',
                }
            ],
            "variables": [
                {
                    "name": "tokenNode",
                    "expression": f"has(request.userInfo.extra) && '{NODE_CLAIM}' in "
                    f"request.userInfo.extra ? request.userInfo.extra['{NODE_CLAIM}'] : []",
                }
            ],
            "validations": _validations(),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata,
        "spec": {"policyName": ROLE, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def component() -> dict[str, Any]:
    """The kustomize Component: the two files, and the flag on the DaemonSet's container."""
    patch = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/args/-",
            "value": "--health.node-conditions",
        }
    ]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": ["rbac.yaml", "admission-policy.yaml"],
        "patches": [{"target": {"kind": "DaemonSet", "name": NAME}, "patch": dump_yaml(patch)}],
    }


_NOTES = {
    "kind: Component": (
        "Opt-in (docs/gpu-health.md): add `components: [<path>/deploy/node-health]` to a "
        "kustomization that lists deploy/ among its resources. The admission policy needs "
        "Kubernetes 1.30+ (pod-bound tokens that name their Node)."
    ),
}


def node_health_files(cfg: Config) -> dict[str, str]:
    """deploy/node-health/'s files by path under deploy/."""

    def file(documents: list[dict[str, Any]]) -> str:
        # a JSON round trip: the metadata shared by two documents would become a YAML alias
        return HEADER + "---\n".join(dump_yaml(json.loads(json.dumps(d))) for d in documents)

    return {
        f"{FOLDER}/kustomization.yaml": commented(file([component()]), _NOTES),
        f"{FOLDER}/rbac.yaml": file(role_dicts(cfg)),
        f"{FOLDER}/admission-policy.yaml": file(policy_dicts(cfg)),
    }
