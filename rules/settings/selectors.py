"""What every query selects by: the job matchers inserted between {} and the labels that name
a node and a cluster, read by `Query` for rules, runbooks and dashboards alike."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from kube_gpu_exporter.rules.settings.values import (
    FrozenModel,
    LabelName,
    Matchers,
    selector_labels,
)

# Labels the exporter's series carry for themselves (attribution): the ServiceMonitor cannot
# set them on the target, so a selector on them would select nothing.
EXPORTER_OWN_LABELS = ("namespace", "pod", "container")


class Selectors(FrozenModel):
    """Label matchers inserted between {} of every query, as the mixins do."""

    exporter: Matchers = 'job="kube-gpu-exporter"'
    # `kube-gpu-exporter cluster`, the one-per-cluster scheduling view (its Service's name).
    cluster_view: Matchers = 'job="kube-gpu-exporter-cluster"'
    kube_state_metrics: Matchers = 'job="kube-state-metrics"'

    @field_validator("exporter", "cluster_view")
    @classmethod
    def _settable_by_the_servicemonitor(cls, value: str) -> str:
        own = sorted(set(selector_labels(value)) & set(EXPORTER_OWN_LABELS))
        if own:
            raise ValueError(
                f"must not match on {', '.join(own)}: the exporter's series carry their own "
                "(the pods holding or waiting for GPUs), so the ServiceMonitor cannot set it"
            )
        return value


# Labels that the node label must not be: the job, and the attribution labels that the exporter
# sets itself (the ServiceMonitor drops the target's own namespace/pod/container for them).
RESERVED_NODE_LABELS = ("job", "namespace", "pod", "container")


class Labels(FrozenModel):
    node: LabelName = "instance"  # the target label that names a node
    cluster: Annotated[str, Field(pattern=r"^([a-zA-Z_][a-zA-Z0-9_]*)?$")] = ""  # "" = one cluster

    @field_validator("node")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NODE_LABELS:
            raise ValueError(f"must not be one of {', '.join(RESERVED_NODE_LABELS)}")
        return value
