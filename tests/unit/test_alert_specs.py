"""Keeps "how to add an alert" true: one spec in rules/alerts/ (and `generate`) is all it
takes, and everything that must exist for an alert is checked to exist.

Every spec has promtool cases that fire and that do not, a runbook section in the generated
docs/runbooks.md, an entry with its defaults in rules/thresholds.example.yaml, a key in the
thresholds file's `alerts:` section, and its name in the README's alert list.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.exporter.catalog import xid
from kube_gpu_exporter.rules import alerts
from kube_gpu_exporter.rules.alerts import BY_NAME, GROUPS, SPECS, all_alerts
from kube_gpu_exporter.rules.alerts.device_xids import SPECS as DEVICE_XID_SPECS
from kube_gpu_exporter.rules.alerts.workload_xids import GPU_XID_APPLICATION_ERRORS
from kube_gpu_exporter.rules.config import Config
from kube_gpu_exporter.rules.promql import Query
from kube_gpu_exporter.rules.promtool_cases import World
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.spec import AlertSpec

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS_MD = REPO / "docs" / "runbooks.md"
EXAMPLE = REPO / "rules" / "thresholds.example.yaml"
README = REPO / "README.md"
IDS = [spec.name for spec in SPECS]


def test_names_are_unique_and_every_alert_comes_from_a_spec() -> None:
    assert len(BY_NAME) == len(SPECS)
    assert [a.name for a in all_alerts(Config())] == IDS


def test_every_spec_of_every_area_file_is_listed() -> None:
    """A spec defined in an area file but left out of its SPECS, or an area file left out of
    the face's groups, would silently never be deployed."""
    listed = {id(spec) for spec in SPECS}
    for info in pkgutil.iter_modules(alerts.__path__):
        module = importlib.import_module(f"{alerts.__name__}.{info.name}")
        defined = [v for v in vars(module).values() if isinstance(v, AlertSpec)]
        assert set(map(id, defined)) == set(map(id, getattr(module, "SPECS", ()))), info.name
        assert all(id(spec) in listed for spec in defined), info.name


def test_every_group_has_alerts() -> None:
    names = [name for name, _ in GROUPS]
    assert len(names) == len(set(names))
    assert all(specs for _, specs in GROUPS)


def test_the_alerts_section_is_assembled_from_the_specs() -> None:
    cfg = Config()
    assert list(type(cfg.alerts).model_fields) == IDS
    for spec in SPECS:
        assert issubclass(spec.settings, AlertSettings)
        assert spec.of(cfg) == spec.defaults


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_alert_has_promtool_cases_firing_and_not(spec: AlertSpec[Any]) -> None:
    case = spec.case(World(Config()))
    assert case.series, spec.name
    assert any(check.firing for check in case.checks), f"{spec.name}: no check fires"
    assert any(not check.firing for check in case.checks), f"{spec.name}: every check fires"


def test_every_alert_has_a_runbook_and_a_promtool_case() -> None:
    """Moved from test_rules_lint (the tables it compared are the specs now)."""
    names = {a.name for a in all_alerts(Config())}
    assert names == set(BY_NAME)
    for name in names:
        assert f"\n## {name}\n" in RUNBOOKS_MD.read_text()


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_alert_has_its_runbook_section(spec: AlertSpec[Any]) -> None:
    book = spec.runbook_of(Query(Config()))
    text = RUNBOOKS_MD.read_text()
    section = text.split(f"\n## {spec.name}\n", 1)[1].split("\n## ", 1)[0]
    for part in (book.meaning, book.impact, book.diagnosis, book.mitigation):
        assert part and part in section, spec.name


def _example_alerts() -> tuple[dict[str, Any], str]:
    text = EXAMPLE.read_text()
    return yaml.safe_load(text)["alerts"], text


def test_the_example_file_lists_every_alert_in_order() -> None:
    entries, _ = _example_alerts()
    assert list(entries) == IDS


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_the_example_file_gives_every_alert_with_all_its_defaults(spec: AlertSpec[Any]) -> None:
    entries, text = _example_alerts()
    entry = entries[spec.name]
    keys = [info.alias or name for name, info in spec.settings.model_fields.items()]
    assert sorted(entry) == sorted(keys), f"{spec.name}: the example must name every key"
    assert spec.settings.model_validate(entry) == spec.defaults
    # Each entry is explained by the comment above it.
    assert re.search(rf"\n  #[^\n]*\n  {spec.name}:", text), f"{spec.name}: no comment"


def test_the_readme_lists_every_alert() -> None:
    text = README.read_text()
    item = text.split("- `deploy/prometheus-rule.yaml`", 1)[1].split("\n- ", 1)[0]
    missing = [name for name in IDS if not re.search(rf"\b{name}\b", item)]
    assert not missing, f"not in the README's alert list: {missing}"


def test_xid_defaults_are_the_catalogs() -> None:
    """One Xid alert per action of the catalog, its default codes the catalog's, no code in
    two (tests/unit/test_xid_catalog.py holds the actions to the catalog)."""
    reset, reboot, workflow, investigate = DEVICE_XID_SPECS
    assert GPU_XID_APPLICATION_ERRORS.defaults.xids == xid.APPLICATION_XIDS
    assert reset.defaults.xids == xid.RESET_XIDS
    assert reboot.defaults.xids == xid.REBOOT_XIDS
    assert workflow.defaults.xids == xid.WORKFLOW_XIDS
    assert investigate.defaults.xids == xid.INVESTIGATE_XIDS
    lists = [s.defaults.xids for s in (GPU_XID_APPLICATION_ERRORS, *DEVICE_XID_SPECS)]
    assert len({c for codes in lists for c in codes}) == sum(map(len, lists))


# Per-device alerts join the single holder themselves (memory) or through `holders=True`;
# GPULost joins every holding workload (`per_workload=True`).
HOLDER_JOIN = "group_left (namespace, pod, owner_kind, owner_name, workload)"
WORKLOADS_JOIN = "group_right (gpu)"


@pytest.mark.parametrize("group", ["kube-gpu-exporter.devices", "kube-gpu-exporter.workloads"])
def test_device_alerts_name_their_sole_holder(group: str) -> None:
    """A device alert must reach the team whose pod holds the device: every alert about one
    device joins the holder's labels (GPULost each holding workload's); the workload-level idle
    alert and the leak alert (no holder by definition) are the only ones without the join."""
    without = {"GPUAllocatedIdle", "GPUMemoryLeaked"}
    specs = dict(GROUPS)[group]
    rules = {a.name: a for a in all_alerts(Config())}
    for spec in specs:
        join = WORKLOADS_JOIN if spec.per_workload else HOLDER_JOIN
        joined = join in rules[spec.name].expr
        assert joined == (spec.name not in without), spec.name
