"""The dashboards, one module each; `build_all` is what `generate` renders."""

from __future__ import annotations

from .._deps import Config
from ..model import Dashboard
from . import cluster, node, workload

BUILDERS = (cluster.build, node.build, workload.build)


def build_all(cfg: Config) -> tuple[Dashboard, ...]:
    return tuple(build(cfg) for build in BUILDERS)
