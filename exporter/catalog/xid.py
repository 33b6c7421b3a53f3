"""Xid codes: the one table of what each code is called, what it means, and whose fault it is.

Three readers used to keep their own copy: the dcgm-exporter compatibility layer (`err_msg`, and
which code counts as "last" when several arrive at once), the alert settings (the default code
lists of GPUXidErrors and GPUXidApplicationErrors) and the runbooks (a table of meanings). A code
added or reclassified here reaches all three.

`kind` sorts a code by the action it calls for: `hardware` Xids need a reset, a drain or an RMA
(GPUXidErrors, critical); `application` Xids are the fault of the program on the GPU
(GPUXidApplicationErrors, info); the rest are named for dcgm-exporter but watched by no alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

XidKind = Literal["hardware", "application"]
HARDWARE: XidKind = "hardware"
APPLICATION: XidKind = "application"


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    kind: XidKind | None  # None: named for dcgm-exporter, watched by no alert by default
    name: str  # NVIDIA's Xid catalog name: dcgm-exporter's `err_msg`
    meaning: str  # the runbooks' explanation; "" for a code no alert watches by default


# One row a code, two lines a row (code, kind, name / meaning).
# fmt: off
XIDS: tuple[Xid, ...] = (
    Xid(13, APPLICATION, "Graphics Engine Exception",
        "graphics engine exception: the program faulted (bad kernel, out-of-bounds access)"),
    Xid(31, APPLICATION, "GPU memory page fault",
        "GPU memory page fault: the program touched memory it does not own (MMU fault)"),
    Xid(32, None, "Invalid or corrupted push buffer stream",
        ""),
    Xid(43, APPLICATION, "GPU stopped processing",
        "GPU stopped processing: the program's context was stopped after a fault"),
    Xid(45, APPLICATION, "Preemptive cleanup, due to previous errors",
        "preemptive cleanup: the driver tore down a context after a previous error or a kill"),
    Xid(48, HARDWARE, "Double Bit ECC Error",
        "double-bit ECC error: uncorrectable memory error"),
    Xid(61, None, "Internal micro-controller breakpoint/warning",
        ""),
    Xid(62, HARDWARE, "Internal micro-controller halt",
        "internal micro-controller halt"),
    Xid(63, None, "ECC page retirement or row remapping recording event",
        ""),
    Xid(64, HARDWARE, "ECC page retirement or row remapper recording failure",
        "ECC page retirement or row-remapping failure"),
    Xid(68, APPLICATION, "NVDEC0 Exception",
        "video decoder (NVDEC) exception"),
    Xid(69, None, "Graphics Engine class error",
        ""),
    Xid(74, HARDWARE, "NVLINK Error",
        "NVLink error"),
    Xid(79, HARDWARE, "GPU has fallen off the bus",
        "GPU has fallen off the bus"),
    Xid(92, HARDWARE, "High single-bit ECC error rate",
        "high single-bit ECC error rate"),
    Xid(94, HARDWARE, "Contained ECC error",
        "contained ECC error: the affected application was killed, the GPU goes on"),
    Xid(95, HARDWARE, "Uncontained ECC error",
        "uncontained ECC error: every application on the GPU is affected, reset needed"),
    Xid(109, APPLICATION, "Context Switch Timeout Error",
        "context switch timeout"),
    Xid(119, HARDWARE, "GSP RPC Timeout",
        "GSP RPC timeout: the GPU System Processor stopped answering"),
    Xid(120, HARDWARE, "GSP Error",
        "GSP error"),
)
# fmt: on


def codes(kind: XidKind) -> tuple[int, ...]:
    """The codes of one kind, in ascending order (as the thresholds file lists them)."""
    return tuple(x.code for x in XIDS if x.kind == kind)


HARDWARE_XIDS: tuple[int, ...] = codes(HARDWARE)
APPLICATION_XIDS: tuple[int, ...] = codes(APPLICATION)
XID_NAMES: Mapping[int, str] = {x.code: x.name for x in XIDS}
XID_MEANINGS: Mapping[int, str] = {x.code: x.meaning for x in XIDS if x.meaning}
