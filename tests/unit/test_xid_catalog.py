"""The Xid alerts follow NVIDIA's Xid catalog (exporter/catalog/xid_catalog.csv), one
alert per action, and a thresholds file that contradicts the catalog is warned about.

The defaults once paged critical on 92 (the catalog: ignore, investigate) and 94 (restart the
application), called 109 the program's fault (the catalog: reset the GPU), and watched 46, 136,
140, 143, 155 and 156 (reset the GPU) in no alert. Xid 45 then warned the platform team for
every killed CUDA process: the catalog's WORKFLOW_XID_45 is "not solo: IGNORE (follow other
Xid)", and it is logged for any application abort. Version 2 held 47 of the catalog's codes
(110, a reset, among those missing) and let an investigatory CONTACT_SUPPORT turn an IGNORE into
an alert; the catalog's investigatory action is for a code that recurs, never for now.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.catalog import xid
from kube_gpu_exporter.rules.config import Config, parse_config

ROOT = Path(__file__).resolve().parents[2]
# The catalog's immediate actions, as read from NVIDIA's page on 2026-11-28 (codes 1-172).
UNUSED = (1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29)
UNUSED += (30, 33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 61, 65, 73, 81, 87)
UNUSED += (90, 91, 111, 112, 113, 114, 115, 116, 117, 118, 122, 123, 124, 125, 138)
CATALOG = {
    "RESTART_APP": (
        *(8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80),
        *(82, 83, 84, 85, 86, 88, 89, 94, *range(96, 106), *range(126, 136), 139),
    ),
    "IGNORE": (
        *(14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152),
        *(153, 157, 160, 161),
    ),
    "RESET_GPU": (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158),
    "RESTART_BM": (79,),
    "RESTART_VM": (151,),
    "WORKFLOW_XID_45": (45,),
    "WORKFLOW_XID_48": (48,),
    "WORKFLOW_NVLINK_ERR": (74,),
    "WORKFLOW_NVLINK5_ERR": tuple(range(144, 151)),
    "CHECK_MECHANICALS": (54,),
    "UPDATE_SWFW": (78,),
    "XID_154": (154,),
    "CHECK_UVM": (159,),
    "CONTACT_SUPPORT": (*UNUSED, 142),
    "NOTE": (163, 164, 165, 166, 168, 170),  # the page writes a sentence
    "NONE": (162, 167, 169, 171, 172),  # the page writes nothing
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


@pytest.mark.parametrize("code", [109, 110, 46, 136, 140, 143, 155, 156])
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
    assert xid.BY_CODE[110].mnemonic == "SEC_FAULT_ERROR"
    assert xid.BY_CODE[110].architectures == "H100,B100,GB200"
    assert (xid.BY_CODE[92].mnemonic, xid.BY_CODE[94].mnemonic) == (
        "EXCESSIVE_SBE_INTERRUPTS",
        "ROBUST_CHANNEL_CONTAINED_ERROR",
    )
    assert xid.BY_CODE[109].mnemonic == "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR"
    assert xid.CATALOG_CHECKED == "2026-11-28"


def test_the_table_holds_every_code_of_the_catalog() -> None:
    codes = sorted(c for cs in CATALOG.values() for c in cs)
    assert codes == list(range(1, 173))
    assert [x.code for x in xid.XIDS] == codes


def test_every_action_the_catalog_uses_has_a_class() -> None:
    """Total both ways: each action of the table has a class, and each class entry is used
    (docs/xid-catalog.md's table lists exactly these)."""
    assert {x.immediate_action for x in xid.XIDS} == set(xid.IMMEDIATE_CLASS)
    assert {x.investigatory_action for x in xid.XIDS} == set(xid.INVESTIGATORY_CLASS)
    assert all(x.action is not None and x.investigator is not None for x in xid.XIDS)


def test_an_investigatory_action_pages_nobody() -> None:
    """IGNORE is ignored whatever the catalog says to look into if the code recurs."""
    cfg = Config()
    for code in (14, 43, 92, 121, 157):
        assert xid.BY_CODE[code].action == "ignore"
        assert _severity(cfg, code) == set(), code


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
        "NVIDIA's Xid catalog says RESET_GPU, CONTACT_SUPPORT (GPUXidErrors by default)",
        "alerts.GPUXidErrors.xids: Xid 46: also listed by GPUXidApplicationErrors",
        "alerts.GPUXidErrors.xids: Xid 79: "
        "NVIDIA's Xid catalog says RESTART_BM, CONTACT_SUPPORT (GPUXidRebootRequired by default)",
        "alerts.GPUXidErrors.xids: Xid 92: "
        "NVIDIA's Xid catalog says IGNORE, CONTACT_SUPPORT (no alert by default)",
        "alerts.GPUXidErrors.xids: Xid 999: not in NVIDIA's Xid catalog as this version records it",
        "alerts.GPUXidRebootRequired.xids: Xid 79: also listed by GPUXidErrors",
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
        "RESET_GPU, CONTACT_SUPPORT (GPUXidErrors by default)"
    ) in done.stderr
    assert 'xid=~"109"' in (out / "rules.yaml").read_text()


def test_the_table_refuses_an_action_it_cannot_class() -> None:
    header = "xid,mnemonic,immediate_action,investigatory_action,architectures,name,description\n"
    with pytest.raises(ValueError, match="unknown immediate actions"):
        xid.load(header + "1,,REPLACE_BOARD,,,,\n")
    with pytest.raises(ValueError, match="unknown investigatory actions"):
        xid.load(header + "1,,IGNORE,ASK_A_FRIEND,,,\n")
    with pytest.raises(ValueError, match="unknown immediate actions"):
        xid.load(header + "1,,WORKFLOW_NEW,,,,\n")  # no prefix rule: a person reads it first
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


def test_the_refresh_step_records_a_sentence_or_nothing_as_one_word() -> None:
    """The page writes advice instead of a bucket for some codes (163), nothing for others."""
    saved = (
        "Code,Resolution Bucket (Immediate Action)\n"
        "163,No GPU reset required. If power smoothing is desired ...\n162,\n79,RESTART_BM\n"
        "11,CHECK_APP/CUDA\n"
    )
    rows = _tool().published(saved)
    assert [rows[c]["immediate_action"] for c in (163, 162, 79, 11)] == [
        "NOTE",
        "NONE",
        "RESTART_BM",
        "CHECK_APP/CUDA",
    ]


def test_the_gpu_holds_what_the_catalog_asks() -> None:
    """nvidia_gpu_action_required and the node condition read the same classes: a reset- or
    reboot-class Xid holds its action on the GPU (110 since version 3), no other class does."""
    from kube_gpu_exporter.exporter.exposition.health_action import xid_action

    assert (xid_action(110), xid_action(79), xid_action(151)) == ("reset_gpu", "reboot", "reboot")
    for code in (13, 45, 54, 78, 92, 142, 154, 159, 167):
        assert xid_action(code) is None, code
    for x in xid.XIDS:
        held = x.action if x.action in ("reset_gpu", "reboot") else None
        assert xid_action(x.code) == held, x.code


def test_the_refresh_step_names_a_missing_file_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as done:
        _tool().main([str(tmp_path / "none.csv"), "--checked", "2027-01-02"])
    assert done.value.code == 2
