"""The Xid alerts follow NVIDIA's Xid catalog (exporter/catalog/xid_catalog.csv), one
alert per action, and a thresholds file that contradicts the catalog is warned about.

The defaults once paged critical on 92 (the catalog: ignore, investigate) and 94 (restart the
application), called 109 the program's fault (the catalog: reset the GPU), and watched 46, 136,
140, 143, 155 and 156 (reset the GPU) in no alert. Xid 45 then warned the platform team for
every killed CUDA process: the catalog's WORKFLOW_XID_45 is "not solo: IGNORE (follow other
Xid)", and it is logged for any application abort.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.catalog import xid
from kube_gpu_exporter.rules.config import Config, parse_config

ROOT = Path(__file__).resolve().parents[2]
# The catalog's immediate actions, as read from NVIDIA's page on 2026-11-28.
CATALOG = {
    "RESTART_APP": (8, 11, 13, 25, 31, 32, 39, 40, 41, 68, 69, 94),
    "IGNORE": (14, 37, 38, 43, 44, 63, 92, 121),
    "RESET_GPU": (46, 62, 64, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158),
    "RESTART_BM": (79,),
    "RESTART_VM": (151,),
    "WORKFLOW": (48, 74, 144, 145, 146, 147, 148, 149, 150),
    "WORKFLOW_XID_45": (45,),
}
XID_ALERTS = (
    "GPUXidApplicationErrors",
    "GPUXidErrors",
    "GPUXidRebootRequired",
    "GPUXidWorkflow",
    "GPUXidInvestigate",
)


def _lists(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Each Xid alert's codes, where the alert exists."""
    return {n: getattr(cfg.alerts, n).xids for n in XID_ALERTS if hasattr(cfg.alerts, n)}


def _severity(cfg: Config, code: int) -> set[str]:
    return {getattr(cfg.alerts, n).severity for n, codes in _lists(cfg).items() if code in codes}


def test_92_pages_nobody_at_critical() -> None:
    assert "critical" not in _severity(Config(), 92)


def test_45_alerts_nobody() -> None:
    """A 45 follows another Xid (which raises its own alert) or an application abort."""
    assert xid.BY_CODE[45].action == "ignore"
    assert _severity(Config(), 45) == set()


def test_94_goes_to_the_workloads_owners() -> None:
    cfg = Config()
    assert 94 in cfg.alerts.GPUXidApplicationErrors.xids
    assert "critical" not in _severity(cfg, 94)


@pytest.mark.parametrize("code", [109, 46, 136, 140, 143, 155, 156])
def test_these_codes_ask_for_a_reset(code: int) -> None:
    cfg = Config()
    assert code in cfg.alerts.GPUXidErrors.xids
    assert code not in cfg.alerts.GPUXidApplicationErrors.xids


def test_the_table_holds_the_catalogs_actions() -> None:
    for action, codes in CATALOG.items():
        for code in codes:
            assert xid.BY_CODE[code].immediate_action == action, code
    assert xid.BY_CODE[92].investigatory_action == "CONTACT_SUPPORT"
    assert xid.BY_CODE[121].investigatory_action == "CONTACT_SUPPORT"
    assert xid.BY_CODE[154].immediate_action == "RECOVERY_ACTION"
    assert (xid.BY_CODE[92].mnemonic, xid.BY_CODE[94].mnemonic) == (
        "EXCESSIVE_SBE_INTERRUPTS",
        "ROBUST_CHANNEL_CONTAINED_ERROR",
    )
    assert xid.BY_CODE[109].mnemonic == "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR"
    assert xid.CATALOG_CHECKED == "2026-11-28"


def test_every_catalog_xid_maps_to_one_alert_or_is_ignored() -> None:
    """Every code with an action is in exactly one default Xid alert, the one of its action;
    ignored codes are in none."""
    lists = _lists(Config())
    for x in xid.XIDS:
        holders = [n for n, codes in lists.items() if x.code in codes]
        if x.action in (None, "ignore"):
            assert holders == [], x.code
        else:
            assert len(holders) == 1, (x.code, holders)


def test_no_default_alert_contradicts_the_catalog() -> None:
    from kube_gpu_exporter.rules.xid_actions import xid_warnings

    assert xid_warnings(Config()) == []


def test_an_override_is_allowed_and_warned_about() -> None:
    from kube_gpu_exporter.rules.xid_actions import xid_warnings

    cfg = parse_config(
        "alerts:\n"
        "  GPUXidErrors: {xids: [46, 79, 92, 999]}\n"
        "  GPUXidApplicationErrors: {xids: [13, 46]}\n"
    )
    assert xid_warnings(cfg) == [
        "alerts.GPUXidApplicationErrors.xids: Xid 46: "
        "NVIDIA's Xid catalog says RESET_GPU (GPUXidErrors by default)",
        "alerts.GPUXidErrors.xids: Xid 46: also listed by GPUXidApplicationErrors",
        "alerts.GPUXidErrors.xids: Xid 79: "
        "NVIDIA's Xid catalog says RESTART_BM (GPUXidRebootRequired by default)",
        "alerts.GPUXidErrors.xids: Xid 92: "
        "NVIDIA's Xid catalog says IGNORE, CONTACT_SUPPORT (GPUXidInvestigate by default)",
        "alerts.GPUXidErrors.xids: Xid 999: not in NVIDIA's Xid catalog as this version records it",
        "alerts.GPUXidRebootRequired.xids: Xid 79: also listed by GPUXidErrors",
        "alerts.GPUXidInvestigate.xids: Xid 92: also listed by GPUXidErrors",
    ]


def test_generate_prints_the_warning_and_goes_on(tmp_path: Path) -> None:
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text("alerts:\n  GPUXidApplicationErrors: {xids: [109]}\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "kube_gpu_exporter.exporter.generate.command"),
            *("--config", str(thresholds), "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "warning: alerts.GPUXidApplicationErrors.xids: Xid 109: NVIDIA's Xid catalog says "
        "RESET_GPU (GPUXidErrors by default)"
    ) in done.stderr
    assert 'xid=~"109"' in (out / "rules.yaml").read_text()


def test_the_table_refuses_an_action_it_cannot_class() -> None:
    header = "xid,mnemonic,immediate_action,investigatory_action,architectures,name,description\n"
    with pytest.raises(ValueError, match="unknown immediate actions"):
        xid.load(header + "1,,REPLACE_BOARD,,,,\n")
    with pytest.raises(ValueError, match="unique and ascending"):
        xid.load(header + "2,,IGNORE,,,,\n1,,IGNORE,,,,\n")


def _tool():  # tools/ is not a package: load the refresh script by path
    import importlib.util

    spec = importlib.util.spec_from_file_location("xid_catalog_tool", ROOT / "tools/xid_catalog.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_refresh_step_merges_a_saved_catalog(tmp_path: Path) -> None:
    """The documented refresh (docs/xid-catalog.md): the catalog's columns from the saved
    table, our names and descriptions kept, a code the saved table lacks kept and reported,
    the date set and the version raised; an action no class knows fails and writes nothing."""
    table = tmp_path / "xid_catalog.csv"
    table.write_text((ROOT / "exporter/catalog/xid_catalog.csv").read_text())
    saved = tmp_path / "saved.csv"
    rows = [f"{x.code},,{x.immediate_action},," for x in xid.XIDS if x.code not in (61, 48)]
    saved.write_text(
        "XID,Mnemonic,Immediate Action,Investigatory Action,Architectures\n"
        + "\n".join(rows)
        + "\n48,DBE,WORKFLOW_XID_48,,Ampere\n200,,RESET_GPU,,\n"
    )
    tool = _tool()
    assert tool.main([str(saved), "--checked", "2027-01-02", "--table", str(table)]) == 0
    text = table.read_text()
    new = {x.code: x for x in xid.load(text)}
    assert new[48].immediate_action == "WORKFLOW_XID_48" and new[48].action == "workflow"
    assert (new[48].mnemonic, new[48].architectures) == ("DBE", "Ampere")
    assert new[48].name == "Double Bit ECC Error"  # ours, kept
    assert new[200].action == "reset_gpu" and 61 in new
    assert xid.header_fact(text, "Catalog checked") == "2027-01-02"
    assert xid.header_fact(text, "Table version") == str(int(xid.CATALOG_VERSION) + 1)
    saved.write_text("Xid,Immediate Action\n8,REPLACE_BOARD\n")
    assert tool.main([str(saved), "--checked", "2027-01-03", "--table", str(table)]) == 1
    assert table.read_text() == text


def test_the_refresh_step_reads_the_pages_own_headers() -> None:
    """A table saved from NVIDIA's page as it is: `Code`, the "Resolution Bucket (…)" columns,
    architectures as "Applies to …" YES/NO columns; its "Type (XID)" column holds no code."""
    saved = (
        "Type (XID),Code,Mnemonic,Description,Applies to A100,Applies to H100,"
        "Applies to B100,Applies to GB200,Resolution Bucket (Immediate Action),"
        "Resolution Bucket (Investigatory Action),Xid 154 linkage,Trigger Conditions\n"
        "XID,45,ROBUST_CHANNEL_PREEMPTIVE_REMOVAL,Preemptive cleanup,YES,YES,YES,YES,"
        "WORKFLOW_XID_45,Solo: RESTART_FM Not Solo: IGNORE (follow other Xid),,\n"
        "XID,136,ALI_TRAINING_FAIL,Link Training Failed,NO,YES,NO,NO,RESET_GPU,"
        "INVESTIGATE_LINK_SI,CUDA 12.7; GPU driver R565,\n"
    )
    rows = _tool().published(saved)
    assert rows[45] == {
        "mnemonic": "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "immediate_action": "WORKFLOW_XID_45",
        "investigatory_action": "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)",
        "architectures": "A100,H100,B100,GB200",
    }
    assert (rows[136]["immediate_action"], rows[136]["architectures"]) == ("RESET_GPU", "H100")
