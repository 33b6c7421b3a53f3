"""What grafana/ uses from the exporter and rules packages, imported in one place.

mypy checks the source folders as top-level packages (`exporter`, `rules`; see
rules/_deps.py for why); the running code imports them by their installed names.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter import catalog
    from rules.config import Config
    from rules.promql import (
        KSM_CONTAINER_RESOURCE_REQUESTS,
        KSM_POD_STATUS_PHASE,
        KSM_RESOURCEQUOTA,
        Query,
        agg,
        fmt_number,
        fmt_percent,
    )
    from rules.recording import names
    from rules.render import HEADER, dump_yaml
else:
    from kube_gpu_exporter.exporter import catalog
    from kube_gpu_exporter.rules.config import Config
    from kube_gpu_exporter.rules.promql import (
        KSM_CONTAINER_RESOURCE_REQUESTS,
        KSM_POD_STATUS_PHASE,
        KSM_RESOURCEQUOTA,
        Query,
        agg,
        fmt_number,
        fmt_percent,
    )
    from kube_gpu_exporter.rules.recording import names
    from kube_gpu_exporter.rules.render import HEADER, dump_yaml

__all__ = [
    "HEADER",
    "KSM_CONTAINER_RESOURCE_REQUESTS",
    "KSM_POD_STATUS_PHASE",
    "KSM_RESOURCEQUOTA",
    "Config",
    "Query",
    "agg",
    "catalog",
    "dump_yaml",
    "fmt_number",
    "fmt_percent",
    "names",
]
