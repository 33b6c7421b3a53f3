"""The thresholds file: one YAML document that every generated rule, test, runbook and dashboard
reads, validated once so that a typo fails `generate` instead of shipping a rule that never fires.

Validation is pydantic (extra keys forbidden, models frozen): the validated `Config` *is* the
frozen config object `rules/` and `grafana/` read, in the kubernetes-mixin manner. Every key has
a default taken from the field (utilization under 10 % for 30 minutes is waste, framebuffer over
95 % is OOM risk, over 85 °C is throttling territory), so `generate` with no file at all produces
the committed `deploy/`. `rules/thresholds.example.yaml` documents every key; a test proves it
equals these defaults.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kube_gpu_exporter.exporter.input_errors import validation_problem, yaml_problem
from kube_gpu_exporter.exporter.units import parse_size


class ConfigError(ValueError):
    """A thresholds file that cannot be used; the message is one line naming key and value."""


# --- value types --------------------------------------------------------------------------------

_DURATION = re.compile(r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
_DURATION_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def _check_duration(value: str) -> str:
    if not value or not _DURATION.fullmatch(value):
        raise ValueError("must be a non-negative Prometheus duration such as 30m or 1h30m")
    return value


def duration_seconds(value: str) -> float:
    """`1h30m` → 5400.0 (the value is already validated)."""
    seconds = 0.0
    for number, unit in re.findall(r"(\d+)(ms|[ywdhms])", value):
        seconds += int(number) * (0.001 if unit == "ms" else _DURATION_SECONDS[unit])
    return seconds


def _check_matchers(value: str) -> str:
    if not parse_matchers(value):
        raise ValueError('must be label matchers such as job="kube-gpu-exporter"')
    selector_labels(value)
    return value


def selector_labels(matchers: str) -> dict[str, str]:
    """Labels that a series needs to be selected by `matchers`: the value of each `=`, the
    first alternative of each `=~` (which must be a plain word that the regex matches).
    The generated promtool tests build their input series with these."""
    labels: dict[str, str] = {}
    for name, op, value in parse_matchers(matchers):
        if op == "=":
            labels[name] = value
            continue
        first = value.split("|")[0]
        if not re.fullmatch(r"[A-Za-z0-9_.:/-]+", first) or not re.fullmatch(value, first):
            raise ValueError(f"the regex of {name}=~ must start with a plain alternative")
        labels[name] = first
    return labels


def _size(value: Any) -> Any:
    return parse_size(value) if isinstance(value, str) else value


_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')

Duration = Annotated[str, AfterValidator(_check_duration)]
Ratio = Annotated[float, Field(strict=True, gt=0, lt=1)]
LabelName = Annotated[str, Field(pattern=_LABEL_NAME)]
Matchers = Annotated[str, AfterValidator(_check_matchers)]
Severity = Literal["critical", "warning", "info"]
Bytes = Annotated[int, BeforeValidator(_size), Field(ge=0)]
Xid = Annotated[int, Field(strict=True, gt=0)]
K8sName = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
# A label key or taint key: an optional DNS-subdomain prefix and a name of up to 63 characters.
_QUALIFIED_NAME = (
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
QualifiedName = Annotated[str, Field(pattern=rf"^{_QUALIFIED_NAME}$")]
LabelValue = Annotated[
    str, Field(max_length=63, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
]


# A Kubernetes resource quantity in the forms people write: 50m, 0.5, 96Mi, 1G (no exponents).
_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_QUANTITY_FACTORS = {
    None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}  # fmt: skip


def _check_quantity(value: str) -> str:
    if not _QUANTITY.fullmatch(value) or quantity_value(value) <= 0:
        raise ValueError("must be a positive Kubernetes quantity such as 50m, 0.5, 96Mi or 1Gi")
    return value


def quantity_value(value: str) -> float:
    """`96Mi` → 100663296.0, `50m` → 0.05 (the value is already validated)."""
    match = _QUANTITY.fullmatch(value)
    assert match, value
    return float(match["number"]) * _QUANTITY_FACTORS[match["suffix"]]


def _number_to_str(value: Any) -> Any:
    """`cpu: 1` and `cpu: 0.5` in YAML are numbers; Kubernetes takes them as quantities."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Quantity = Annotated[str, BeforeValidator(_number_to_str), AfterValidator(_check_quantity)]


def parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """`job="a", env=~"p.*"` → [("job", "=", "a"), ("env", "=~", "p.*")]; [] if not matchers.

    Only `=` and `=~` are accepted: the generated promtool tests must be able to build input
    series that the selector selects, which needs a value for every matched label.
    """
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        match = _MATCHER.match(text, pos)
        if not match:
            return []
        out.append((match.group(1), match.group(2), match.group(3)))
        pos = match.end()
    return out


# --- the schema ---------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertSettings(_Model):
    """What every alert has: an enable switch, how long the condition must hold, a severity."""

    enabled: Annotated[bool, Field(strict=True)] = True
    for_: Duration = Field(default="5m", alias="for")
    severity: Severity = "warning"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class IdleAlert(AlertSettings):
    for_: Duration = Field(default="30m", alias="for")
    threshold: Ratio = 0.1  # 5-minute average utilization below which an allocation is idle


class MemoryAlert(AlertSettings):
    threshold: Ratio = 0.95  # framebuffer used / total


class TemperatureAlert(AlertSettings):
    threshold: Annotated[float, Field(strict=True, gt=0, le=150)] = 85.0  # °C


class XidAlert(AlertSettings):
    for_: Duration = Field(default="0m", alias="for")
    window: Duration = "10m"
    xids: Annotated[tuple[Xid, ...], Field(min_length=1)]


class HardwareXidAlert(XidAlert):
    severity: Severity = "critical"
    xids: Annotated[tuple[Xid, ...], Field(min_length=1)] = (
        48, 62, 64, 74, 79, 92, 94, 95, 119, 120,
    )  # fmt: skip


class ApplicationXidAlert(XidAlert):
    severity: Severity = "info"
    xids: Annotated[tuple[Xid, ...], Field(min_length=1)] = (13, 31, 43, 45, 68, 109)


class EccAlert(AlertSettings):
    for_: Duration = Field(default="0m", alias="for")
    severity: Severity = "critical"
    window: Duration = "10m"


class PowerBrakeAlert(AlertSettings):
    for_: Duration = Field(default="1m", alias="for")


class LostAlert(AlertSettings):
    for_: Duration = Field(default="1m", alias="for")
    severity: Severity = "critical"


class NotAdvertisedAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")


class PartiallyAdvertisedAlert(AlertSettings):
    for_: Duration = Field(default="30m", alias="for")


class LeakAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")
    threshold: Bytes = 1 << 30  # framebuffer held with no pod and no process


class DriverMismatchAlert(AlertSettings):
    for_: Duration = Field(default="1h", alias="for")
    severity: Severity = "info"


class AbsentAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")


class StaleAlert(AlertSettings):
    threshold: Duration = "2m"  # age of the last successful collection


class PodResourcesAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")


class Alerts(_Model):
    """One entry per alert, by alert name. A class per alert whose defaults differ, so that
    overriding one key (say `severity`) keeps that alert's other defaults; an unknown name is
    an error (a typo would otherwise silently leave the real alert on its defaults)."""

    GPUAllocatedIdle: IdleAlert = IdleAlert()
    GPUMemoryNearFull: MemoryAlert = MemoryAlert()
    GPUMemoryLeaked: LeakAlert = LeakAlert()
    GPUXidApplicationErrors: ApplicationXidAlert = ApplicationXidAlert()
    GPUTemperatureHigh: TemperatureAlert = TemperatureAlert()
    GPUThermalThrottling: AlertSettings = AlertSettings()
    GPUHardwareSlowdown: AlertSettings = AlertSettings()
    GPUPowerBrake: PowerBrakeAlert = PowerBrakeAlert()
    GPUXidErrors: HardwareXidAlert = HardwareXidAlert()
    GPUEccUncorrectable: EccAlert = EccAlert()
    GPULost: LostAlert = LostAlert()
    GPUNotAdvertised: NotAdvertisedAlert = NotAdvertisedAlert()
    GPUPartiallyAdvertised: PartiallyAdvertisedAlert = PartiallyAdvertisedAlert()
    GPUDriverVersionMismatch: DriverMismatchAlert = DriverMismatchAlert()
    KubeGpuExporterDown: AlertSettings = AlertSettings()
    KubeGpuExporterAbsent: AbsentAlert = AbsentAlert()
    KubeGpuExporterStale: StaleAlert = StaleAlert()
    KubeGpuExporterNvmlDown: AlertSettings = AlertSettings()
    KubeGpuExporterPodResourcesDown: PodResourcesAlert = PodResourcesAlert()


class Selectors(_Model):
    """Label matchers inserted between {} of every query, as the mixins do."""

    exporter: Matchers = 'job="kube-gpu-exporter"'
    kube_state_metrics: Matchers = 'job="kube-state-metrics"'


# Labels that the node label must not be: the job, and the attribution labels that the exporter
# sets itself (the ServiceMonitor drops the target's own namespace/pod/container for them).
RESERVED_NODE_LABELS = ("job", "namespace", "pod", "container")


class Labels(_Model):
    node: LabelName = "instance"  # the target label that names a node
    cluster: Annotated[str, Field(pattern=r"^([a-zA-Z_][a-zA-Z0-9_]*)?$")] = ""  # "" = one cluster

    @field_validator("node")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NODE_LABELS:
            raise ValueError(f"must not be one of {', '.join(RESERVED_NODE_LABELS)}")
        return value


class PrometheusRuleSettings(_Model):
    name: K8sName = "kube-gpu-exporter"
    namespace: K8sName = "monitoring"
    labels: dict[LabelName, LabelValue] = {"release": "kube-prometheus-stack"}


class Cost(_Model):
    gpu_hour: Annotated[float, Field(strict=True, ge=0)] = 2.5  # price of one GPU for one hour
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"


class Dashboards(_Model):
    namespace: K8sName = "monitoring"
    folder: Annotated[str, Field(min_length=1, max_length=100)] = "GPU"
    folder_annotation: Annotated[str, Field(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9_.-]+$")] = (
        "grafana_folder"
    )
    tags: tuple[Annotated[str, Field(min_length=1)], ...] = ("gpu", "kube-gpu-exporter")
    refresh: Duration = "30s"
    efficiency_target: Ratio = 0.7  # the line drawn on utilization panels


class Image(_Model):
    repository: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?$")] = (
        "ghcr.io/kube-gpu-exporter/kube-gpu-exporter"
    )
    # "" = this release's version, so a generator and the image it deploys always match.
    tag: Annotated[str, Field(pattern=r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")] = ""


class NodeAffinity(_Model):
    """The node label that marks GPU nodes; `values: []` accepts any value of the label."""

    key: QualifiedName = "nvidia.com/gpu.present"  # set by GPU feature discovery
    values: tuple[LabelValue, ...] = ("true",)


class Toleration(_Model):
    """One extra toleration; the API server's consistency rules are checked here so that
    `generate` fails rather than `kubectl apply`."""

    key: Annotated[str, Field(pattern=rf"^({_QUALIFIED_NAME})?$")] = ""  # "" with Exists: any
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


class ResourceAmounts(_Model):
    cpu: Quantity
    memory: Quantity


class Resources(_Model):
    """Defaults from measured RSS: 45 MiB bare, 60 MiB with the kubelet's gRPC client, 110 MiB
    with the Kubernetes client too (what the DaemonSet runs)."""

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


def _check_positive_duration(value: str) -> str:
    if duration_seconds(value) <= 0:
        raise ValueError("must be a positive Prometheus duration such as 30s")
    return value


class Deployment(_Model):
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
    scrape_interval: Annotated[Duration, AfterValidator(_check_positive_duration)] = "30s"


class Config(_Model):
    """The validated thresholds file: the frozen config read by rules/ and grafana/."""

    selectors: Selectors = Selectors()
    labels: Labels = Labels()
    runbook_url: Annotated[str, Field(pattern=r"^https?://\S+$")] = (
        "https://github.com/kube-gpu-exporter/kube-gpu-exporter/blob/main/docs/runbooks.md"
    )
    prometheus_rule: PrometheusRuleSettings = PrometheusRuleSettings()
    cost: Cost = Cost()
    dashboards: Dashboards = Dashboards()
    deployment: Deployment = Deployment()
    alerts: Alerts = Alerts()

    def alert(self, name: str) -> AlertSettings:
        settings = getattr(self.alerts, name)
        assert isinstance(settings, AlertSettings), name
        return settings


# --- loading ------------------------------------------------------------------------------------


def load_config(path: str | Path | None) -> Config:
    """The config in `path`, or the defaults when no file is given."""
    if path is None:
        return Config()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_config(text, str(path))


def parse_config(text: str, source: str = "<thresholds>") -> Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: {yaml_problem(exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level: must be a mapping (got {data!r})")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {validation_problem(exc)}") from None
