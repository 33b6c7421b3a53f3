"""The dashboards' options and the price of a GPU-hour: what grafana/ reads of the thresholds
file (the price also reaches the idle-cost recording rules and the idle alert's runbook)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kube_gpu_exporter.rules.settings.values import Duration, FrozenModel, K8sName, Ratio


class Cost(FrozenModel):
    gpu_hour: Annotated[float, Field(strict=True, ge=0)] = 2.5  # price of one GPU for one hour
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"


class Dashboards(FrozenModel):
    namespace: K8sName = "monitoring"
    folder: Annotated[str, Field(min_length=1, max_length=100)] = "GPU"
    folder_annotation: Annotated[str, Field(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9_.-]+$")] = (
        "grafana_folder"
    )
    tags: tuple[Annotated[str, Field(min_length=1)], ...] = ("gpu", "kube-gpu-exporter")
    refresh: Duration = "30s"
    efficiency_target: Ratio = 0.7  # the line drawn on utilization panels
