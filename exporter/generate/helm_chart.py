"""charts/kube-gpu-exporter/: the Helm chart's generated files, written by `generate` beside
deploy/, and `generate --helm-values FILE`, the chart's values for another thresholds file.

The chart's templates are its own files (charts/kube-gpu-exporter/templates/, written by
hand, Helm's conventions); `generate` writes what comes from Python: Chart.yaml (the version),
values.yaml, values.schema.json and README.md from the key table (chart_keys.py), the
`rendered` helper (helm_templates.py) and files/rendered.yaml, the rules, dashboards and
scrape labels computed from the default thresholds (helm_values.py). deploy/ and the chart's
defaults agree: a test renders the chart with the values `--helm-values` writes for the
defaults and finds deploy/ object for object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kube_gpu_exporter.exporter import __version__
from kube_gpu_exporter.exporter.generate.chart_docs import readme, values_yaml
from kube_gpu_exporter.exporter.generate.helm_schema import schema_text
from kube_gpu_exporter.exporter.generate.helm_templates import (
    RENDER_COMMAND,
    RENDERED_FILE,
    rendered_helper,
)
from kube_gpu_exporter.exporter.generate.helm_values import (
    chart_thresholds,
    rendered,
    values_file,
)
from kube_gpu_exporter.exporter.output_paths import check_output_file, file_errors
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.render import HEADER, dump_yaml

CHART_DIR: Final = Path("charts/kube-gpu-exporter")
HOME: Final = "https://github.com/kube-gpu-exporter/kube-gpu-exporter"
DESCRIPTION: Final = (
    "Per-node NVIDIA GPU exporter for Kubernetes with pod attribution, a cluster view of why "
    "GPU pods wait, alerts and Grafana dashboards"
)
# The hand-written templates (not generated): a test holds the folder to this list.
TEMPLATES: Final = (
    "templates/NOTES.txt",
    "templates/_helpers.tpl",
    "templates/alertmanager-config.yaml",
    "templates/cluster.yaml",
    "templates/daemonset.yaml",
    "templates/dashboards.yaml",
    "templates/network-policy.yaml",
    "templates/node-health.yaml",
    "templates/prometheus-rule.yaml",
    "templates/rbac.yaml",
    "templates/resourcequota.yaml",
    "templates/service.yaml",
    "templates/serviceaccount.yaml",
    "templates/servicemonitor.yaml",
)


def chart_files(cfg: Config) -> dict[str, str]:
    """The chart's generated files by path inside it."""
    data = rendered(cfg)
    files = {
        "Chart.yaml": _chart_yaml(),
        "README.md": readme(DESCRIPTION),
        "values.yaml": values_yaml(chart_thresholds(cfg)),
        "values.schema.json": schema_text(),
        "templates/_rendered.tpl": rendered_helper(sorted(data["files"])),
        RENDERED_FILE: HEADER + dump_yaml(data),
    }
    return dict(sorted(files.items()))


def planned_chart(cfg: Config, root: Path) -> dict[Path, str]:
    """The chart's files where this repository keeps them, under `root`."""
    return {root / CHART_DIR / name: text for name, text in chart_files(cfg).items()}


def _chart_yaml() -> str:
    image = f"{Config().deployment.image.repository}:{__version__}"
    chart = {
        "apiVersion": "v2",
        "name": "kube-gpu-exporter",
        "description": DESCRIPTION,
        "type": "application",
        "version": __version__,
        "appVersion": __version__,
        "home": HOME,
        "sources": [HOME],
        "keywords": ["gpu", "nvidia", "nvml", "prometheus", "exporter", "monitoring"],
        "annotations": {
            "artifacthub.io/category": "monitoring-logging",
            "artifacthub.io/license": "Apache-2.0",
            "artifacthub.io/images": dump_yaml([{"name": "kube-gpu-exporter", "image": image}]),
            "artifacthub.io/links": dump_yaml(
                [
                    {"name": "Documentation", "url": f"{HOME}#readme"},
                    {"name": "Runbooks", "url": f"{HOME}/blob/main/docs/runbooks.md"},
                ]
            ),
        },
    }
    return HEADER + dump_yaml(chart)


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
