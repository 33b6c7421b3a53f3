"""Xid codes: NVIDIA's Xid catalog, loaded from the versioned table beside this module.

The table (xid_catalog.csv; docs/xid-catalog.md says where it comes from and how to refresh it)
gives each code the catalog's immediate action. The alerts are one per action class, so that
what pages, and whom, follows NVIDIA's answer rather than a hand-kept list; the dcgm-exporter
compatibility layer reads the names, the runbooks the descriptions. A code added or
reclassified in the table reaches all of them.

Every code the catalog publishes is a row, and every action it uses has a class: an action no
class knows fails the load, so it is decided by a person, never defaulted. An empty cell is
one the catalog leaves empty.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Final, Literal

TABLE = "xid_catalog.csv"

# What an alert asks someone to do. `restart_app`: the workload's owners; the rest: the
# platform team. `ignore` and None (no action recorded) raise no alert.
ActionClass = Literal["restart_app", "reset_gpu", "reboot", "workflow", "investigate", "ignore"]
ACTION_CLASSES: Final[tuple[ActionClass, ...]] = (
    "restart_app",
    "reset_gpu",
    "reboot",
    "workflow",
    "investigate",
    "ignore",
)

# Every immediate action the catalog uses → its class; an action not here fails the table's
# load (and so `generate` and the refresh step): a person decides its class, here, and says why
# in docs/xid-catalog.md. No prefix rule: a new WORKFLOW_* must be read before it pages.
# - WORKFLOW_XID_45 asks nothing of the platform team: "not solo: IGNORE (follow other Xid)",
#   and the catalog logs a 45 for any application abort; the Xid it follows alerts itself.
# - CHECK_MECHANICALS (54), UPDATE_SWFW (78) and CHECK_UVM (159, "reset if UVM/vGPU is used,
#   else ignore") ask the platform team for a step no counter can take for it: a workflow.
# - CONTACT_SUPPORT as the immediate action (the unused codes, 142): nothing automatable, ask
#   NVIDIA. NOTE and NONE are the refresh step's own words (tools/xid_catalog.py) where the
#   catalog writes a sentence instead of a bucket (163-166, 168, 170) or nothing (162, 167,
#   169, 171, 172): a person reads the entry.
IMMEDIATE_CLASS: Final[Mapping[str, ActionClass]] = MappingProxyType(
    {
        "RESTART_APP": "restart_app",
        "RESET_GPU": "reset_gpu",
        "RESTART_BM": "reboot",
        "RESTART_VM": "reboot",
        "WORKFLOW_XID_48": "workflow",
        "WORKFLOW_NVLINK_ERR": "workflow",
        "WORKFLOW_NVLINK5_ERR": "workflow",
        "XID_154": "workflow",
        "CHECK_MECHANICALS": "workflow",
        "UPDATE_SWFW": "workflow",
        "CHECK_UVM": "workflow",
        "WORKFLOW_XID_45": "ignore",
        "IGNORE": "ignore",
        "CONTACT_SUPPORT": "investigate",
        "NOTE": "investigate",
        "NONE": "investigate",
    }
)

# Who looks into a code that recurs or was not expected: the catalog's investigatory action is
# for then ("if the issue reoccurs"), never for now, so it pages nobody and moves no code
# between alerts; the runbooks' table says whose it is. `workload`: the application's owners;
# `platform`: the platform team; `support`: a case with NVIDIA; `none`: follow the other Xid.
Investigator = Literal["workload", "platform", "support", "none"]
INVESTIGATORY_CLASS: Final[Mapping[str, Investigator]] = MappingProxyType(
    {
        "CHECK_APP/CUDA": "workload",
        "WORKFLOW_XID_13": "workload",
        "WORKFLOW_XID_31": "workload",
        "XID_137_FLOW": "workload",
        "INVESTIGATE_SW": "workload",
        "INVESTIGATE_SW_USER": "workload",
        "WORKFLOW_XID_48": "platform",
        "WORKFLOW_NVLINK5_ERR": "platform",
        "INVESTIGATE_LINK_SI": "platform",
        "UPDATE_SWFW": "platform",
        "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)": "platform",
        "CONTACT_SUPPORT": "support",
        "N/A; Unused": "support",
        "IGNORE": "none",
        "IGNORE (sympathetic)": "none",
        "SYMPATHETIC_REPORT_SOLO": "none",
        "N/A Informational only regarding another Xid": "none",
        "": "none",
    }
)


def action_class(immediate: str) -> ActionClass | None:
    """The class of a catalog's immediate action; None for one no class knows."""
    return IMMEDIATE_CLASS.get(immediate)


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    mnemonic: str  # the catalog's, "" where not recorded
    immediate_action: str  # the catalog's bucket (IMMEDIATE_CLASS's keys)
    investigatory_action: str  # the catalog's (INVESTIGATORY_CLASS's keys), "" where none
    architectures: str  # the catalog's, "" where not recorded
    name: str  # NVIDIA's short name: dcgm-exporter's `err_msg`; "" where not recorded
    meaning: str  # the runbooks' explanation, in our words; "" where not written

    @property
    def action(self) -> ActionClass | None:
        """The class of the catalog's immediate action alone (an IGNORE asking CONTACT_SUPPORT
        if it recurs is still ignored: see INVESTIGATORY_CLASS)."""
        return action_class(self.immediate_action)

    @property
    def investigator(self) -> Investigator | None:
        """Who looks into the code if it recurs; None for an action no class knows."""
        return INVESTIGATORY_CLASS.get(self.investigatory_action)


def load(text: str) -> tuple[Xid, ...]:
    """The rows of a catalog table (comment lines start with `#`), checked: one row per code,
    in ascending order, and only actions (immediate and investigatory) the classes know."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    rows = tuple(
        Xid(
            code=int(r["xid"]),
            mnemonic=r["mnemonic"],
            immediate_action=r["immediate_action"],
            investigatory_action=r["investigatory_action"],
            architectures=r["architectures"],
            name=r["name"],
            meaning=r["description"],
        )
        for r in csv.DictReader(lines)
    )
    codes = [x.code for x in rows]
    if codes != sorted(set(codes)):
        raise ValueError(f"{TABLE}: codes must be unique and ascending")
    unknown = {x.immediate_action for x in rows if x.action is None}
    if unknown:
        raise ValueError(f"{TABLE}: unknown immediate actions {sorted(unknown)}")
    unknown = {x.investigatory_action for x in rows if x.investigator is None}
    if unknown:
        raise ValueError(f"{TABLE}: unknown investigatory actions {sorted(unknown)}")
    return rows


def header_fact(text: str, key: str) -> str:
    """A `# Key: value.` fact of the table's comment header (its date, its version)."""
    for line in text.splitlines():
        if line.startswith("#") and f"{key}:" in line:
            return line.split(f"{key}:", 1)[1].strip().split(" ", 1)[0].rstrip(".")
    raise ValueError(f"{TABLE}: no {key!r} in its header")


_TEXT = resources.files(__package__).joinpath(TABLE).read_text(encoding="utf-8")
XIDS: tuple[Xid, ...] = load(_TEXT)
CATALOG_CHECKED: Final = header_fact(_TEXT, "Catalog checked")
CATALOG_VERSION: Final = header_fact(_TEXT, "Table version")
BY_CODE: Mapping[int, Xid] = MappingProxyType({x.code: x for x in XIDS})


def codes(action: ActionClass) -> tuple[int, ...]:
    """The codes of one action class, in ascending order (as the thresholds file lists them)."""
    return tuple(x.code for x in XIDS if x.action == action)


APPLICATION_XIDS: tuple[int, ...] = codes("restart_app")
RESET_XIDS: tuple[int, ...] = codes("reset_gpu")
REBOOT_XIDS: tuple[int, ...] = codes("reboot")
WORKFLOW_XIDS: tuple[int, ...] = codes("workflow")
INVESTIGATE_XIDS: tuple[int, ...] = codes("investigate")
# The codes that need the platform team (a reset, a reboot, a workflow): dcgm-exporter's
# "last" Xid prefers them.
HARDWARE_XIDS: tuple[int, ...] = tuple(sorted((*RESET_XIDS, *REBOOT_XIDS, *WORKFLOW_XIDS)))
XID_NAMES: Mapping[int, str] = {x.code: x.name for x in XIDS if x.name}
XID_MEANINGS: Mapping[int, str] = {x.code: x.meaning for x in XIDS if x.meaning}
