"""What the Helm chart renders, as values: the thresholds and everything `generate` computes from
them (the Kubernetes objects of deploy/, and an AlertmanagerConfig of the inhibit rules).

Helm's templates cannot compute alerts, recording rules or dashboards from thresholds: that is
Python (rules/, grafana/). So the chart takes the computed objects as data, `rendered:`, beside
the thresholds they were computed from, and refuses to render when the two disagree
(helm_templates.py). The chart's own default `rendered` is this module's output for the default
thresholds, and `generate --config FILE --helm-values OUT` writes the same for FILE: the
thresholds at the top level (the chart's values *are* the thresholds file) and `rendered:`
below them, so `helm upgrade -f OUT` changes the alerts and the schema checks the thresholds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.generate.daemonset import SELECTOR_LABELS
from kube_gpu_exporter.exporter.generate.manifests import KUSTOMIZATION
from kube_gpu_exporter.exporter.generate.network_policy import (
    CLUSTER_NETWORK_POLICY,
    NETWORK_POLICY,
)
from kube_gpu_exporter.exporter.generate.outputs import render_outputs
from kube_gpu_exporter.rules.config import Config, ConfigError
from kube_gpu_exporter.rules.inhibitions import inhibit_rules
from kube_gpu_exporter.rules.render import HEADER, dump_yaml

# The chart's own keys beside the thresholds: not thresholds, so not compared with them.
RENDERED: Final = "rendered"
ALERTMANAGER_CONFIG: Final = "alertmanagerConfig"
CHART_KEYS: Final = (RENDERED, ALERTMANAGER_CONFIG, "global")
ALERTMANAGER_CONFIG_FILE: Final = "alertmanager-config.yaml"
# Files that some thresholds produce and the defaults do not: the chart has a template for
# each, so that values rendered for any thresholds find one (helm_chart.py).
OPTIONAL_FILES: Final = (NETWORK_POLICY, CLUSTER_NETWORK_POLICY)
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)(".*")')


def thresholds_values(cfg: Config) -> dict[str, Any]:
    """The config as Helm values: every key, by its file name (`for`), nulls left out (Helm
    drops a null value, so it would compare unequal); refused if that loses anything."""
    values: dict[str, Any] = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
    if Config.model_validate(values) != cfg:
        raise ConfigError("these thresholds cannot be written as Helm values (a null is not)")
    return values


def kubernetes_files(outputs: Mapping[str, str]) -> list[str]:
    """The files of `outputs` that are Kubernetes objects: what kustomization.yaml applies."""
    resources: list[str] = yaml.safe_load(outputs[KUSTOMIZATION])["resources"]
    return resources


def rendered(cfg: Config) -> dict[str, Any]:
    """The chart's `rendered:` value for `cfg`: this version, the thresholds, and per file of
    deploy/ that holds Kubernetes objects its text (comments kept), plus the AlertmanagerConfig."""
    outputs = render_outputs(cfg)
    files = {name: outputs[name] for name in kubernetes_files(outputs)}
    files[ALERTMANAGER_CONFIG_FILE] = HEADER + dump_yaml(alertmanager_config(cfg))
    return {"version": __version__, "thresholds": thresholds_values(cfg), "files": files}


def alertmanager_config(cfg: Config) -> dict[str, Any]:
    """The inhibit rules as a prometheus-operator AlertmanagerConfig, beside the PrometheusRule
    and selected by the same labels. The operator confines an AlertmanagerConfig's rules to
    alerts of its own namespace unless the Alertmanager's `alertmanagerConfigMatcherStrategy`
    is `None`; GPU alerts carry their holder's namespace or none, so the chart's README says to
    set it."""
    rules = [
        {
            "sourceMatch": [_matcher(m) for m in rule["source_matchers"]],
            "targetMatch": [_matcher(m) for m in rule["target_matchers"]],
            "equal": list(rule["equal"]),
        }
        for rule in inhibit_rules(cfg)
    ]
    settings = cfg.prometheus_rule
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {
            "name": settings.name,
            "namespace": settings.namespace,
            "labels": {**SELECTOR_LABELS, **dict(sorted(settings.labels.items()))},
        },
        "spec": {"inhibitRules": rules},
    }


def _matcher(text: str) -> dict[str, str]:
    """`alertname=~"A|B"` (Alertmanager's matcher syntax, as inhibitions.py writes it) → the
    operator's {name, matchType, value}; the value is a Go-quoted string, which JSON reads."""
    found = _MATCHER.fullmatch(text)
    if found is None:  # inhibitions.py writes only this form; anything else is our bug
        raise ValueError(f"not a matcher: {text!r}")
    name, match_type, quoted_value = found.groups()
    value: str = json.loads(quoted_value)
    return {"name": name, "matchType": match_type, "value": value}


def values_file(cfg: Config) -> str:
    """`generate --helm-values FILE`: the thresholds and `rendered:` for `helm -f FILE`. A map
    key that the defaults have and `cfg` does not (prometheus_rule.labels.release) is written
    as null, which is how a values file deletes a default in Helm."""
    defaults = thresholds_values(Config())
    notes = (
        f"# Values for the kube-gpu-exporter chart {__version__}: `helm upgrade --install "
        "RELEASE charts/kube-gpu-exporter -f THIS_FILE`.\n"
        "# The thresholds are the top-level keys; `rendered` holds what generate computed from "
        "them.\n# Change the thresholds file and generate again; the chart refuses thresholds "
        "that differ from those\n# `rendered` was computed from.\n"
    )
    values = _with_deletions(thresholds_values(cfg), defaults)
    return HEADER + notes + dump_yaml({**values, RENDERED: rendered(cfg)})


def _with_deletions(value: Any, default: Any) -> Any:
    if not isinstance(value, dict) or not isinstance(default, dict):
        return value
    kept = {k: _with_deletions(v, default.get(k)) for k, v in value.items()}
    return kept | {k: None for k in default if k not in value}
