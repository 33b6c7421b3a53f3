"""The thresholds file of the demo's rules, loaded with the generator's own validation."""

from __future__ import annotations

from kube_gpu_exporter.exporter.input_errors import InputError
from kube_gpu_exporter.rules.config import Config, ConfigError, load_config


def load_thresholds(path: str | None) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
