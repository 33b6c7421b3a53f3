"""charts/kube-gpu-exporter/: the Helm chart, written by `generate` beside deploy/ from the same
render, and `generate --helm-values FILE`, the chart's values for another thresholds file.

The chart's values are the thresholds file (values.yaml holds the defaults, values.schema.json
its pydantic models as JSON Schema) plus `rendered:`, what `generate` computed from them; its
default, files/rendered.yaml, is deploy/ itself, so `helm template` with default values is
deploy/ object for object (a test holds it). Why the chart does not compute rules in Go
templates, and how the values and the rendered objects are kept together: helm_templates.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.generate.helm_schema import schema_text
from kube_gpu_exporter.exporter.generate.helm_templates import (
    NOTES,
    RENDER_COMMAND,
    RENDERED_FILE,
    alertmanager_config_template,
    file_template,
    helpers,
)
from kube_gpu_exporter.exporter.generate.helm_values import (
    ALERTMANAGER_CONFIG,
    ALERTMANAGER_CONFIG_FILE,
    OPTIONAL_FILES,
    RENDERED,
    kubernetes_files,
    rendered,
    thresholds_values,
    values_file,
)
from kube_gpu_exporter.exporter.generate.outputs import render_outputs
from kube_gpu_exporter.exporter.output_paths import check_output_file, file_errors
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.render import HEADER, dump_yaml

CHART_DIR: Final = Path("charts/kube-gpu-exporter")
HOME: Final = "https://github.com/kube-gpu-exporter/kube-gpu-exporter"


def chart_file_names() -> list[str]:
    """Every deploy/ file a chart template prints: the defaults' and those only some thresholds
    make. The same for every config, so no thresholds file leaves a template stale."""
    names = kubernetes_files(render_outputs(Config()))
    return [*names, *(n for n in OPTIONAL_FILES if n not in names)]


def chart_files(cfg: Config) -> dict[str, str]:
    """The chart's files by path inside it."""
    names = chart_file_names()
    files = {
        "Chart.yaml": _chart_yaml(),
        "values.yaml": _values_yaml(cfg),
        "values.schema.json": schema_text(),
        "templates/_helpers.tpl": helpers([*names, ALERTMANAGER_CONFIG_FILE]),
        "templates/NOTES.txt": NOTES,
        f"templates/{ALERTMANAGER_CONFIG_FILE}": alertmanager_config_template(),
        RENDERED_FILE: HEADER + dump_yaml(rendered(cfg)),
    }
    files.update({f"templates/{name}": file_template(name) for name in names})
    return dict(sorted(files.items()))


def planned_chart(cfg: Config, root: Path) -> dict[Path, str]:
    """The chart's files where this repository keeps them, under `root`."""
    return {root / CHART_DIR / name: text for name, text in chart_files(cfg).items()}


def _chart_yaml() -> str:
    chart = {
        "apiVersion": "v2",
        "name": "kube-gpu-exporter",
        "description": "Per-node NVIDIA GPU exporter for Kubernetes with pod attribution, a "
        "cluster view of why GPU pods wait, alerts and Grafana dashboards",
        "type": "application",
        "version": __version__,
        "appVersion": __version__,
        "home": HOME,
        "sources": [HOME],
        "keywords": ["gpu", "nvidia", "nvml", "prometheus", "exporter", "monitoring"],
    }
    return HEADER + dump_yaml(chart)


def _values_yaml(cfg: Config) -> str:
    intro = f"""\
# The thresholds file (rules/thresholds.example.yaml documents every key) is this chart's
# values, checked by values.schema.json. Helm cannot compute alerts, recording rules and
# dashboards from thresholds, so changing one here alone is refused: render your thresholds
# file into values with `{RENDER_COMMAND}`
# and install or upgrade with `-f FILE`.
"""
    chart_keys = f"""\
# The Alertmanager inhibit rules as a prometheus-operator AlertmanagerConfig (off: deploy/ has
# them as alertmanager-inhibit-rules.yaml for an Alertmanager configuration file instead).
{ALERTMANAGER_CONFIG}:
  enabled: false
# What `generate --helm-values` computed from the thresholds above; {{}} is the chart's own,
# computed from the defaults ({RENDERED_FILE}). Not to be written by hand.
{RENDERED}: {{}}
"""
    return HEADER + intro + dump_yaml(thresholds_values(cfg)) + chart_keys


def write_values(cfg: Config, path: str, check: bool) -> list[str]:
    """`generate --helm-values FILE` (`--check`: compare instead); only that file is touched.
    What is stale, one line each; a bad path raises InputError, as the other outputs' do."""
    target = check_output_file(path, "--helm-values")
    text = values_file(cfg)
    if not check:
        with file_errors("write"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return []
    with file_errors("read"):
        found = target.read_bytes() if target.is_file() else None
    if found == text.encode():
        return []
    again = RENDER_COMMAND.replace("FILE", path)
    return [f"{'differs' if found is not None else 'missing'}: {target}", f"stale; run `{again}`"]
