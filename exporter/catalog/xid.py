"""Xid codes: NVIDIA's Xid catalog, loaded from the versioned table beside this module.

The table (xid_catalog.csv; docs/xid-catalog.md says where it comes from and how to refresh it)
gives each code the catalog's immediate action. The alerts are one per action class, so that
what pages, and whom, follows NVIDIA's answer rather than a hand-kept list; the dcgm-exporter
compatibility layer reads the names, the runbooks the descriptions. A code added or
reclassified in the table reaches all of them.

An empty cell is a fact the table does not record yet: it stays empty (unknown), never a
default.
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

# The catalog's immediate actions → their class. WORKFLOW stands for any of the catalog's
# WORKFLOW_* actions where the table does not record which; RECOVERY_ACTION is Xid 154's (the
# action is the one NVML reports). An action not here fails the table's load: a person decides
# its class.
# WORKFLOW_XID_45 is the one workflow that asks nothing of the platform team: its workflow is
# "not solo: IGNORE (follow other Xid)", and the catalog logs a 45 for any application abort
# (Ctrl-C, SIGKILL, a GPU reset) and beside 94 and 95. As `workflow` it raised a warning for
# every killed CUDA process; the Xid it follows raises its own alert.
IMMEDIATE_CLASS: Final[Mapping[str, ActionClass]] = MappingProxyType(
    {
        "RESTART_APP": "restart_app",
        "RESET_GPU": "reset_gpu",
        "RESTART_BM": "reboot",
        "RESTART_VM": "reboot",
        "WORKFLOW": "workflow",
        "WORKFLOW_XID_45": "ignore",
        "RECOVERY_ACTION": "workflow",
        "IGNORE": "ignore",
    }
)


def action_class(immediate: str) -> ActionClass | None:
    """The class of a catalog's immediate action; every WORKFLOW_* named nowhere above is one
    class (the runbook says to follow the code's entry). None for "" and for an action no class
    knows."""
    if immediate in IMMEDIATE_CLASS:
        return IMMEDIATE_CLASS[immediate]
    return IMMEDIATE_CLASS.get("WORKFLOW" if immediate.startswith("WORKFLOW_") else immediate)


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    mnemonic: str  # the catalog's, "" where not recorded
    immediate_action: str  # the catalog's (IMMEDIATE_CLASS's keys), "" where not recorded
    investigatory_action: str  # the catalog's (e.g. CONTACT_SUPPORT), "" where none recorded
    architectures: str  # the catalog's, "" where not recorded
    name: str  # NVIDIA's short name: dcgm-exporter's `err_msg`; "" where not recorded
    meaning: str  # the runbooks' explanation, in our words; "" where not written

    @property
    def action(self) -> ActionClass | None:
        """The class of what the catalog asks for: an ignored code that the catalog asks to
        investigate with NVIDIA's support is `investigate`; None where nothing is recorded."""
        if self.investigatory_action == "CONTACT_SUPPORT" and self.immediate_action in (
            "",
            "IGNORE",
        ):
            return "investigate"
        return action_class(self.immediate_action)


def load(text: str) -> tuple[Xid, ...]:
    """The rows of a catalog table (comment lines start with `#`), checked: one row per code,
    in ascending order, and only immediate actions the classes know."""
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
    unknown = {x.immediate_action for x in rows if x.immediate_action} - {
        x.immediate_action for x in rows if action_class(x.immediate_action)
    }
    if unknown:
        raise ValueError(f"{TABLE}: unknown immediate actions {sorted(unknown)}")
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
