"""What `generate` writes into the cluster manifests (read by exporter/generate/): the
DaemonSet's image, scheduling and resources, and the PrometheusRule's metadata."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kube_gpu_exporter.rules.settings.network_policy import NetworkPolicySettings
from kube_gpu_exporter.rules.settings.values import (
    QUALIFIED_NAME,
    FrozenModel,
    K8sName,
    LabelName,
    LabelValue,
    PositiveDuration,
    QualifiedName,
    Quantity,
    quantity_value,
)


class PrometheusRuleSettings(FrozenModel):
    name: K8sName = "kube-gpu-exporter"
    namespace: K8sName = "monitoring"
    # Field(): pydantic copies a mutable default for each instance, which ruff cannot see here.
    labels: dict[LabelName, LabelValue] = Field(default={"release": "kube-prometheus-stack"})


class Image(FrozenModel):
    repository: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?$")] = (
        "ghcr.io/kube-gpu-exporter/kube-gpu-exporter"
    )
    # "" = this release's version, so a generator and the image it deploys always match.
    tag: Annotated[str, Field(pattern=r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")] = ""


class NodeAffinity(FrozenModel):
    """The node label that marks GPU nodes; `values: []` accepts any value of the label."""

    key: QualifiedName = "nvidia.com/gpu.present"  # set by GPU feature discovery
    values: tuple[LabelValue, ...] = ("true",)


class Toleration(FrozenModel):
    """One extra toleration; the API server's consistency rules are checked here so that
    `generate` fails rather than `kubectl apply`."""

    key: Annotated[str, Field(pattern=rf"^({QUALIFIED_NAME})?$")] = ""  # "" with Exists: any
    operator: Literal["Exists", "Equal"] = Field(default="Equal", validate_default=True)
    value: LabelValue = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

    @field_validator("operator")
    @classmethod
    def _key_for_equal(cls, value: str, info: ValidationInfo) -> str:
        if value == "Equal" and not info.data.get("key"):
            raise ValueError("operator Equal needs a key")
        return value

    @field_validator("value")
    @classmethod
    def _no_value_for_exists(cls, value: str, info: ValidationInfo) -> str:
        if value and info.data.get("operator") == "Exists":
            raise ValueError("must be empty with operator Exists")
        return value


class ResourceAmounts(FrozenModel):
    cpu: Quantity
    memory: Quantity


class Resources(FrozenModel):
    """Defaults with headroom over the DaemonSet's measured RSS (`serve` with the kubelet's
    gRPC client and the pod watch: bench/README.md, "Lean at every scale")."""

    requests: ResourceAmounts = ResourceAmounts(cpu="50m", memory="128Mi")
    limits: ResourceAmounts = ResourceAmounts(cpu="500m", memory="256Mi")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for name in ("cpu", "memory"):
            request, limit = getattr(self.requests, name), getattr(self.limits, name)
            if quantity_value(request) > quantity_value(limit):
                # A check across keys: the message names the key it blames and its value.
                raise ValueError(
                    f"requests.{name}: must not exceed limits.{name} {limit} (got {request!r})"
                )
        return self


class Deployment(FrozenModel):
    """The cluster manifests (deploy/daemonset.yaml and its companions)."""

    namespace: K8sName = "kube-gpu-exporter"
    image: Image = Image()
    # hostPID, to tie processes on a shared GPU to their pods through /proc/<pid>/cgroup.
    per_process_attribution: Annotated[bool, Field(strict=True)] = True
    # "" leaves runtimeClassName out (the node's default runtime must then be NVIDIA's).
    runtime_class_name: Annotated[str, Field(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$")] = (
        "nvidia"
    )
    node_affinity: NodeAffinity = NodeAffinity()
    extra_tolerations: tuple[Toleration, ...] = ()
    resources: Resources = Resources()
    # The kubelet's pod-resources directory on the host (k0s, microk8s use other roots).
    pod_resources_dir: Annotated[str, Field(pattern=r"^/[^\s]*[^/\s]$")] = (
        "/var/lib/kubelet/pod-resources"
    )
    scrape_interval: PositiveDuration = "30s"
    network_policy: NetworkPolicySettings = NetworkPolicySettings()
