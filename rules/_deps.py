"""What rules/ uses from the exporter package, imported in one place.

The source folders map onto `kube_gpu_exporter.*` through setuptools' package-dir, which
mypy cannot follow: it checks `exporter/`, `rules/` and `grafana/` as the top-level packages
`exporter`, `rules` and `grafana` (pyproject's `[tool.mypy] files`). So the type checker
imports siblings by those names and the running code by their installed names.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter import catalog
    from exporter.input_messages import validation_problem, yaml_problem
    from exporter.units import parse_size
else:
    from kube_gpu_exporter.exporter import catalog
    from kube_gpu_exporter.exporter.input_messages import validation_problem, yaml_problem
    from kube_gpu_exporter.exporter.units import parse_size

__all__ = ["catalog", "parse_size", "validation_problem", "yaml_problem"]
