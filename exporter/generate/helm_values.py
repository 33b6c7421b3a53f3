"""What `generate` gives the Helm chart as values: the thresholds that shape the rules and
dashboards, what it computed from them (`rendered:`), and the chart's workload keys that a
thresholds file's `deployment:` and `prometheus_rule:` sections say in the chart's terms.

Helm's templates cannot compute alerts, recording rules or dashboards from thresholds: that is
Python (rules/, grafana/). So the chart takes the PrometheusRule, the dashboard ConfigMaps, the
AlertmanagerConfig and the labels the ServiceMonitors must set as data, `rendered:`, beside the
thresholds they were computed from, and refuses to render when the two disagree
(helm_templates.py). The workloads are Helm templates of their own (chart_keys.py); the
chart's default `rendered` is this module's output for the default thresholds, and
`generate --config FILE --helm-values OUT` writes the same for FILE.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.generate.chart_keys import chart_defaults
from kube_gpu_exporter.exporter.generate.daemonset import (
    SELECTOR_LABELS,
    node_affinity,
    tolerations,
)
from kube_gpu_exporter.exporter.generate.outputs import (
    DASHBOARDS_DIR,
    PROMETHEUS_RULE,
    render_outputs,
)
from kube_gpu_exporter.rules.config import Config, ConfigError
from kube_gpu_exporter.rules.inhibitions import inhibit_rules
from kube_gpu_exporter.rules.render import HEADER, dump_yaml
from kube_gpu_exporter.rules.settings.values import selector_labels

RENDERED: Final = "rendered"
ALERTMANAGER_CONFIG_FILE: Final = "alertmanager-config.yaml"
# The thresholds that shape what `rendered` holds: compared with those it was computed from.
# `deployment:` and `prometheus_rule:` say where and how deploy/ runs; in the chart their
# settings are its own keys (deployment_values), and the rendered objects' labels are the
# chart's (a label is not a threshold), so the PrometheusRule is rendered without them.
THRESHOLD_KEYS: Final = (
    "selectors",
    "labels",
    "runbook_url",
    "cost",
    "dashboards",
    "alert_labels",
    "alerts",
)
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)(".*")')


def thresholds_values(cfg: Config) -> dict[str, Any]:
    """The config as Helm values: every key, by its file name (`for`), nulls left out (Helm
    drops a null value, so it would compare unequal); refused if that loses anything."""
    values: dict[str, Any] = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
    if Config.model_validate(values) != cfg:
        raise ConfigError("these thresholds cannot be written as Helm values (a null is not)")
    return values


def chart_thresholds(cfg: Config) -> dict[str, Any]:
    """The thresholds the chart's values hold (THRESHOLD_KEYS)."""
    values = thresholds_values(cfg)
    return {key: values[key] for key in THRESHOLD_KEYS if key in values}


def scrape_labels(selector: str, own: tuple[str, ...]) -> list[dict[str, str]]:
    """The labels a ServiceMonitor sets so that `selector` (the rules' selector of its series)
    matches them, less those the target brings itself (`own`); the chart's template leaves
    out a job equal to its Service's name, the operator's default job."""
    return [
        {"label": label, "value": value}
        for label, value in selector_labels(selector).items()
        if label not in own
    ]


def rendered(cfg: Config) -> dict[str, Any]:
    """The chart's `rendered:` value for `cfg`: this version, the thresholds, the text of the
    PrometheusRule, the dashboard ConfigMaps and the AlertmanagerConfig, and the labels each
    ServiceMonitor sets."""
    bare = cfg.model_copy(
        update={"prometheus_rule": cfg.prometheus_rule.model_copy(update={"labels": {}})}
    )
    outputs = render_outputs(bare)
    files = {PROMETHEUS_RULE: outputs[PROMETHEUS_RULE]}
    for name, text in outputs.items():
        if name.startswith(f"{DASHBOARDS_DIR}/") and name.endswith("-configmap.yaml"):
            files[name] = text
    files[ALERTMANAGER_CONFIG_FILE] = HEADER + dump_yaml(alertmanager_config(bare))
    scrape = {
        "exporter": scrape_labels(cfg.selectors.exporter, ("instance", cfg.labels.node)),
        "cluster": scrape_labels(cfg.selectors.cluster_view, ("instance",)),
    }
    return {
        "version": __version__,
        "thresholds": chart_thresholds(cfg),
        "files": files,
        "scrape": scrape,
    }


def deployment_values(cfg: Config) -> dict[str, Any]:
    """The thresholds file's `deployment:` and `prometheus_rule:` as the chart's keys, so that
    one thresholds file drives a Helm install as it drives deploy/. Not mapped: the namespace
    (Helm's -n) and the PrometheusRule's name (the release's full name)."""
    settings, rule = cfg.deployment, cfg.prometheus_rule
    labels = dict(sorted(rule.labels.items()))
    policy = settings.network_policy
    return {
        "image": {"repository": settings.image.repository, "tag": settings.image.tag},
        "hostPID": settings.per_process_attribution,
        "runtimeClassName": settings.runtime_class_name,
        "podResourcesDir": settings.pod_resources_dir,
        "affinity": node_affinity(cfg),
        "tolerations": tolerations(cfg),
        "resources": {
            "requests": settings.resources.requests.model_dump(),
            "limits": settings.resources.limits.model_dump(),
        },
        "serviceMonitor": {"interval": settings.scrape_interval, "additionalLabels": labels},
        "networkPolicy": {
            "enabled": policy.enabled,
            "prometheusNamespaceLabels": dict(sorted(policy.prometheus_namespace_labels.items())),
            "prometheusPodLabels": dict(sorted(policy.prometheus_pod_labels.items())),
            "nodeCIDRs": list(policy.node_cidrs),
        },
        "prometheusRule": {"namespace": rule.namespace, "additionalLabels": labels},
        "grafanaDashboards": {"namespace": cfg.dashboards.namespace},
        "alertmanagerConfig": {"namespace": rule.namespace, "additionalLabels": labels},
    }


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
    """`generate --helm-values FILE`: the thresholds, their deploy/ settings as chart keys and
    `rendered:`, for `helm -f FILE`. A threshold map key that the defaults have and `cfg` does
    not is written as null, which is how a values file deletes a default in Helm."""
    notes = (
        f"# Values for the kube-gpu-exporter chart {__version__}: `helm upgrade --install "
        "RELEASE charts/kube-gpu-exporter -f THIS_FILE`.\n"
        "# The thresholds are the snake_case keys; `rendered` holds what generate computed from "
        "them.\n# Change the thresholds file and generate again; the chart refuses thresholds "
        "that differ from those\n# `rendered` was computed from. The camelCase keys are the "
        "thresholds file's deployment:\n# section in the chart's terms; more --set or -f "
        "files may change them.\n"
    )
    values = _with_deletions(chart_thresholds(cfg), chart_thresholds(Config()))
    chart = deployment_values(cfg)
    unknown = set(chart) - set(chart_defaults())
    if unknown:  # a key the chart does not have: our bug
        raise AssertionError(f"deployment_values: no chart key {sorted(unknown)}")
    return HEADER + notes + dump_yaml({**values, **chart, RENDERED: rendered(cfg)})


def _with_deletions(value: Any, default: Any) -> Any:
    if not isinstance(value, dict) or not isinstance(default, dict):
        return value
    kept = {k: _with_deletions(v, default.get(k)) for k, v in value.items()}
    return kept | {k: None for k in default if k not in value}
