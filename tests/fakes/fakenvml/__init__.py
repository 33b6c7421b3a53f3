"""Build the fake libnvidia-ml.so.1 and write the state file it serves.

The fake (fake_nvml.c, next to this file) lets the real pynvml bindings, and so the
exporter's NVML code, run against GPUs described by a scenario: tests compile it once, point
`FAKE_NVML_STATE` at a state file, and move the node forward by rewriting that file with
`write_state(path, scenario.state_at(t))`. The fake re-reads the file when it changes.

State file lines (the C file's header is the reference):

    driver_version <text>
    delay_ms <n>
    hang 1                                  (only when given: every call blocks until a
                                           rewrite drops it)
    init_error <code>                       (only when given)
    error <NVML function name> <code>      (node-wide functions, before any device: only
                                           when given)
    device <index>                          then, for that GPU:
    uuid <text>
    name <text to end of line>
    pci_bus_id <text>
    minor <n|none>                         (N of /dev/nvidiaN, the scenario's; `none`:
                                           NOT_SUPPORTED; absent: the index with its
                                           lowest bit flipped, unlike the index)
    lost <0|1>
    memory <total bytes> <reserved bytes> <used bytes>
    utilization <gpu %> <memory %>
    temperature <celsius>
    power <mW>
    power_limit <mW>
    energy <mJ>
    clocks <sm MHz> <memory MHz>
    clock_events <mask, hex>
    ecc <corrected> <uncorrected>
    codec <encoder %> <decoder %>
    field <field id> <scope id> <32|64> <value>
                                           (one per field value NVML answers; scope id: the
                                           NVLink of a per-link field, else 0; the NVLink
                                           error counters have one field id per link)
    gpm_supported <0|1>
    gpm <metric id> <value>                (a double in NVML's unit: percent, MiB/s)
    error <NVML function name> <code>      (one per faulted function)
    mig <gi> <ci> <slices> <total bytes> <used bytes> <uuid> <name to end of line>
    mig_gpm <gi> <metric id> <value>       (a MIG instance's GPM metrics)
    process <pid> <used bytes> <gi> <ci> <sm %> <memory %>
    xid <code>                             (every Xid so far, oldest first)

The value lines, memory to codec, the field and GPM lines, and the functions an `unsupported`
key faults come from the readings table (exporter/readings_table.py): a new reading gets its
line there. Rows read by their own calls (Source.CALL) have a line each and make their
functions answer NOT_SUPPORTED when declared unsupported. Field-value and GPM rows (FIELDS,
GPM) answer per value: a value declared unsupported, by its own key or its row's, just has no
`field` or `gpm` line, and NVML answers NOT_SUPPORTED for that value alone (`unsupported: [gpm]`
writes `gpm_supported 0`). A field value is written in NVML's unit modulo 2**bits, so a 32-bit
counter wraps as the driver's does.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.catalog import CLOCK_EVENT_REASONS
from kube_gpu_exporter.exporter.reading import NVML_UNIT
from kube_gpu_exporter.exporter.readings_batched import NVLINK_LINK_COUNT_FIELD
from kube_gpu_exporter.exporter.readings_table import (
    GPM,
    MEMORY,
    READINGS,
    Encoding,
    Source,
    Value,
    faulted_functions,
    unsupported_values,
)
from kube_gpu_exporter.exporter.simulated.scenario import DeviceState, MigState, NodeState

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"

NVML_ERROR_NOT_SUPPORTED = 3
NO_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId/computeInstanceId outside MIG

# A reading key declared `unsupported` in a scenario → the NVML functions it makes answer
# NOT_SUPPORTED. Only rows read by their own calls fault functions; field-value and GPM keys
# drop their values' lines instead (see render_state).
UNSUPPORTED_FUNCTIONS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {key: row.functions for row in READINGS if row.source is Source.CALL for key in row.unsupported}
)

_NO_ERRORS: Mapping[tuple[int, str], int] = MappingProxyType({})
_last_mtime_ns = 0


class FakeNvmlBuildError(RuntimeError):
    """The C compiler could not build the fake; the message carries its stderr."""


def build(out_dir: Path, *, old_driver: bool = False) -> Path:
    """Compile the fake into `out_dir/libnvidia-ml.so.1` and return `out_dir`.

    The soname file name lets a subprocess load it with `LD_LIBRARY_PATH=out_dir`, exactly as
    pynvml loads the real driver. `old_driver` leaves out the newer entry points
    (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetCurrentClocksEventReasons) to test fallbacks.
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FakeNvmlBuildError("no C compiler (cc) on PATH: cannot build the fake NVML")
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra"]
    if old_driver:
        command.append("-DFAKE_NVML_OLD_DRIVER")
    command += ["-o", str(out_dir / LIBRARY_NAME), str(SOURCE), "-lpthread"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FakeNvmlBuildError(
            f"building the fake NVML failed ({' '.join(command)}):\n{result.stderr}"
        )
    return out_dir


def _percent(ratio: float) -> int:
    """NVML reports whole percents; round half up like a sampled counter would."""
    return max(0, math.floor(ratio * 100 + 0.5))


def _whole(value: float) -> int:
    """A non-negative integer: NVML's unsigned fields cannot hold negatives."""
    return max(0, math.floor(value + 0.5))


def _in_nvml_unit(value: float, encoding: Encoding) -> float:
    """A state value in NVML's unit: the inverse of reading.from_nvml, so a reader gets back
    the value the scenario wrote. Sub-unit factors multiply by their whole inverse, as
    from_nvml divides by it; ints stay ints at factor 1 (no float rounding above 2**53)."""
    factor = NVML_UNIT[encoding]
    if factor == 1:
        return value
    return value * round(1 / factor) if factor < 1 else value / factor


def _nvml_integer(value: float, encoding: Encoding) -> int:
    """An integer NVML number: rounded half up, never negative."""
    number = _in_nvml_unit(value, encoding)
    return max(0, number) if isinstance(number, int) else _whole(number)


def _nvml_double(value: float, encoding: Encoding) -> str:
    """A GPM double, never negative, in its shortest exact form (repr). A sub-unit factor's
    product is rounded to 9 decimals first, which sheds the multiplication's error (0.29 * 100
    is 28.999999999999996 → 29.0) so that dividing back gives a short decimal exactly."""
    number = float(_in_nvml_unit(value, encoding))
    if NVML_UNIT[encoding] < 1:
        number = round(number, 9)
    return repr(max(0.0, number))


def _clock_event_mask(names: frozenset[str]) -> int:
    mask = 0
    for name in names:
        mask |= CLOCK_EVENT_REASONS[name]
    return mask


def _one_line(text: str, what: str) -> str:
    """Values are line- and space-delimited in the state file; refuse ones that would break it."""
    if "\n" in text or "\r" in text or not text.strip():
        raise ValueError(f"{what} must be one non-empty line: {text!r}")
    return text


def _token(text: str, what: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{what} must be one word: {text!r}")
    return text


def _mig_slices(profile: str) -> int:
    """`3g.40gb` → 3: the GPU-instance slice count is the profile's leading number."""
    return int(profile.split("g", 1)[0])


_ENCODE: Mapping[Encoding, Callable[[Any], str]] = MappingProxyType(
    {
        Encoding.INTEGER: lambda value: str(int(value)),
        Encoding.WHOLE: lambda value: str(_whole(value)),
        Encoding.MILLI: lambda value: str(_whole(value * 1000)),
        Encoding.PERCENT: lambda value: str(_percent(value)),
        Encoding.MASK: lambda names: f"{_clock_event_mask(names):#x}",
        Encoding.NANO: lambda value: str(_nvml_integer(value, Encoding.NANO)),
        Encoding.KIB: lambda value: str(_nvml_integer(value, Encoding.KIB)),
        Encoding.GPM_PERCENT: lambda value: _nvml_double(value, Encoding.GPM_PERCENT),
        Encoding.GPM_MIB_RATE: lambda value: _nvml_double(value, Encoding.GPM_MIB_RATE),
    }
)
# The C header lists memory first; the other lines follow the table's order.
_LINE_ROWS = (MEMORY, *(row for row in READINGS if row is not MEMORY))


def _reading_lines(device: DeviceState) -> list[str]:
    """A GPU's value lines, from the readings table: rows naming one line share it."""
    lines: dict[str, list[str]] = {}
    for row in _LINE_ROWS:
        if row.line is not None:
            words = lines.setdefault(row.line.name, [row.line.name])
            words += [_ENCODE[how](getattr(device, state)) for state, how in row.line.values]
    return [" ".join(words) for words in lines.values()]


def _field_lines(device: DeviceState) -> list[str]:
    """`field` lines of the FIELDS rows' supported values, per link for per-link values
    (scopeId = link, or each link's own field id with scopeId 0: Value.entries).

    A value is NVML's integer modulo 2**bits: a 32-bit counter past 2**32 reads wrapped.
    """
    lines = []
    for row in READINGS:
        if row.source is not Source.FIELDS:
            continue
        dropped = unsupported_values(row, device.unsupported)
        for value in row.values:
            if value.state in dropped:
                continue
            number = _nvml_integer(device.readings[value.state], value.encoding)
            number %= 1 << value.bits
            lines += [
                f"field {entry.field_id} {entry.scope} {value.bits} {number}"
                for entry in value.entries(device.nvlink_links)
            ]
    if device.nvlink_links > 0:
        lines.append(f"field {NVLINK_LINK_COUNT_FIELD} 0 32 {device.nvlink_links}")
    return lines


def _gpm_values(device: DeviceState) -> tuple[Value, ...] | None:
    """The GPM metrics the device counts; None when it has no GPM at all."""
    if GPM.key in device.unsupported:
        return None
    dropped = unsupported_values(GPM, device.unsupported)
    return tuple(value for value in GPM.values if value.state not in dropped)


def _gpm_lines(device: DeviceState) -> list[str]:
    values = _gpm_values(device)
    if values is None:
        return ["gpm_supported 0"]
    return ["gpm_supported 1"] + [
        f"gpm {v.nvml_id} {_nvml_double(device.readings[v.state], v.encoding)}" for v in values
    ]


def _mig_gpm_lines(device: DeviceState) -> list[str]:
    """Each GPU instance's GPM metrics, once per instance id (GPM samples a GPU instance,
    not a compute instance: the first MIG device of the instance gives its values)."""
    values = _gpm_values(device) or ()
    instances: dict[int, MigState] = {}
    for mig in device.mig:
        instances.setdefault(mig.gpu_instance_id, mig)
    return [
        f"mig_gpm {gi} {v.nvml_id} {_nvml_double(mig.readings[v.state], v.encoding)}"
        for gi, mig in instances.items()
        for v in values
    ]


def _device_lines(device: DeviceState, errors: Mapping[str, int]) -> list[str]:
    lines = [
        f"device {device.index}",
        f"uuid {_token(device.uuid, 'uuid')}",
        f"name {_one_line(device.name, 'name')}",
        f"pci_bus_id {_token(device.pci_bus_id, 'pci_bus_id')}",
        f"minor {device.minor}",
        f"lost {int(device.lost)}",
        *_reading_lines(device),
        *_field_lines(device),
        *_gpm_lines(device),
    ]
    lines += [f"error {_token(fn, 'function')} {code}" for fn, code in sorted(errors.items())]
    for mig in device.mig:
        name = _one_line(f"{device.name} MIG {mig.profile}", "MIG name")
        lines.append(
            f"mig {mig.gpu_instance_id} {mig.compute_instance_id} {_mig_slices(mig.profile)}"
            f" {mig.memory_total_bytes} {mig.memory_used_bytes} {_token(mig.uuid, 'uuid')}"
            f" {name}"
        )
    lines += _mig_gpm_lines(device)
    for proc in device.processes:
        gi = NO_INSTANCE if proc.gpu_instance_id is None else proc.gpu_instance_id
        ci = NO_INSTANCE if proc.compute_instance_id is None else proc.compute_instance_id
        lines.append(
            f"process {proc.pid} {proc.used_memory_bytes} {gi} {ci}"
            f" {_percent(proc.sm_utilization)} 0"
        )
    lines += [f"xid {xid}" for xid in device.xids]
    return lines


def render_state(
    node: NodeState | None,
    *,
    delay_ms: int = 0,
    init_error: int | None = None,
    hang: bool = False,
    errors: Mapping[tuple[int, str], int] = _NO_ERRORS,
    node_errors: Mapping[str, int] = MappingProxyType({}),
) -> str:
    """The state file text for `node` (None: a driver that reports no GPUs).

    `errors` maps (GPU index, NVML C function name) to the nvmlReturn_t that function must
    answer for that GPU; it wins over the NOT_SUPPORTED (3) implied by `unsupported` keys of
    rows read by their own calls (the keys of field-value and GPM rows drop lines instead).
    `hang` makes every call block (in the fake, without its lock) until a rewrite without it:
    a driver stuck in the kernel, for what the exporter does while NVML never answers.
    `node_errors` maps a node-wide C function (nvmlDeviceGetCount_v2,
    nvmlSystemGetDriverVersion) to the nvmlReturn_t it must answer.
    """
    devices = node.devices if node is not None else ()
    known = {d.index for d in devices}
    unknown = sorted({index for index, _fn in errors} - known)
    if unknown:
        raise ValueError(f"errors name GPU indexes the node does not have: {unknown}")
    driver = node.driver_version if node is not None else "550.54.15"
    lines = [
        "# fake libnvidia-ml state (tests/fakenvml)",
        f"driver_version {_token(driver, 'driver_version')}",
        f"delay_ms {int(delay_ms)}",
    ]
    if hang:
        lines.append("hang 1")
    if init_error is not None:
        lines.append(f"init_error {int(init_error)}")
    lines += [f"error {_token(fn, 'function')} {code}" for fn, code in sorted(node_errors.items())]
    for device in devices:
        per_function = dict.fromkeys(
            faulted_functions(device.unsupported), NVML_ERROR_NOT_SUPPORTED
        )
        per_function |= {fn: code for (index, fn), code in errors.items() if index == device.index}
        lines += _device_lines(device, per_function)
    return "\n".join(lines) + "\n"


def write_state(
    path: Path,
    node: NodeState | None,
    *,
    delay_ms: int = 0,
    init_error: int | None = None,
    hang: bool = False,
    errors: Mapping[tuple[int, str], int] = _NO_ERRORS,
    node_errors: Mapping[str, int] = MappingProxyType({}),
) -> None:
    """Atomically replace the state file, so the fake never reads a half-written one.

    The fake notices a change by (mtime ns, size, inode). Filesystem timestamps are only as
    fine as the kernel tick and inode numbers are reused, so two quick rewrites of the same
    size could look unchanged; each write therefore stamps a strictly increasing mtime.
    """
    global _last_mtime_ns
    text = render_state(
        node,
        delay_ms=delay_ms,
        init_error=init_error,
        hang=hang,
        errors=errors,
        node_errors=node_errors,
    )
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        stamp = max(time.time_ns(), _last_mtime_ns + 1_000_000)
        _last_mtime_ns = stamp
        os.utime(tmp, ns=(stamp, stamp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def call_count(library: ctypes.CDLL, function: str) -> int:
    """How often the loaded fake was asked `function` (its C name) since it was loaded: what
    proves that a reading NVML refused is not asked again."""
    count = library.fakeNvmlCallCount
    count.restype = ctypes.c_ulonglong
    count.argtypes = [ctypes.c_char_p]
    return int(count(function.encode()))


def exporter_env(library_dir: Path, state: Path, node: NodeState) -> dict[str, str]:
    """Write `node` to `state` and return the environment that makes a subprocess's pynvml
    load the fake from `library_dir` and serve that state (the exporter as a real process)."""
    write_state(state, node)
    return {"LD_LIBRARY_PATH": str(library_dir), "FAKE_NVML_STATE": str(state)}
