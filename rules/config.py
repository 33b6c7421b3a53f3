"""The thresholds file: one YAML document that every generated rule, test, runbook, dashboard
and manifest reads, validated once so that a typo fails `generate` instead of shipping a rule
that never fires.

Validation is pydantic (extra keys forbidden, models frozen): the validated `Config` *is* the
frozen config object `rules/` and `grafana/` read, in the kubernetes-mixin manner. Every key has
a default taken from the field (utilization under 10 % for 30 minutes is waste, framebuffer over
95 % is OOM risk, over 85 °C is throttling territory), so `generate` with no file at all produces
the committed `deploy/`. `rules/thresholds.example.yaml` documents every key; a test proves it
equals these defaults.

The sections live with their concern in rules/settings/; the `alerts:` section is assembled here
from the alert specs (rules/alerts/), one key per alert, with each alert's own settings model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, ValidationError

from kube_gpu_exporter.exporter.input_errors import InputError, quoted, validation_problem
from kube_gpu_exporter.exporter.input_yaml import load_yaml, parse_yaml
from kube_gpu_exporter.rules.alerts import SPECS
from kube_gpu_exporter.rules.settings.alert import AlertsBase, alerts_model
from kube_gpu_exporter.rules.settings.dashboards import Cost, Dashboards
from kube_gpu_exporter.rules.settings.deployment import Deployment, PrometheusRuleSettings
from kube_gpu_exporter.rules.settings.selectors import Labels, Selectors
from kube_gpu_exporter.rules.settings.values import AlertLabels, FrozenModel

if TYPE_CHECKING:  # the fields are the specs', made at run time; see AlertsBase
    Alerts = AlertsBase
else:
    Alerts = alerts_model({spec.name: spec.settings for spec in SPECS})


class ConfigError(InputError):
    """A thresholds file that cannot be used; the message is one line naming key and value."""


class Config(FrozenModel):
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
    alert_labels: AlertLabels = Field(default_factory=dict)  # routing labels on every alert
    alerts: Alerts = Alerts()


def load_config(path: str | Path | None) -> Config:
    """The config in `path`, or the defaults when no file is given; the file is read by the
    one input-file reader (size, UTF-8, depth and alias limits: input_yaml.py)."""
    if path is None:
        return Config()
    try:
        data = load_yaml(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    return _validated(data, str(path))


def parse_config(text: str, source: str = "<thresholds>") -> Config:
    try:
        data = parse_yaml(text, source)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    return _validated(data, source)


def _validated(data: Any, source: str) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level: must be a mapping (got {quoted(data)})")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {validation_problem(exc)}") from None
