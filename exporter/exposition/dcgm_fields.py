"""dcgm-exporter's fields as compat mode serves them, per schema: names, units, types, sources.

dcgm-exporter names each series after the DCGM field in its collectors CSV, so a schema is that
CSV's names and units plus its labels (`--compat.dcgm-exporter=SCHEMA`):

- `classic`: dcgm-exporter 3.x to 4.8.2, DCGM's historic names and units (%, MiB, MHz, mJ),
  labels `Hostname` and `DCGM_FI_DRIVER_VERSION`. Dashboard 12239 and almost every published
  alert are written against it.
- `4.8.3`: the same fields; the `Hostname` label became `hostname`.
- `4.9`: the default fields under DCGM 4.7's names in base units (0–1 ratios, bytes, Hz, J), the
  driver label `DCGM_FI_SYSTEM_DRIVER_VERSION`, and `DCGM_FI_DEV_FB_CAPACITY_BYTES` on by default.

Every value is one of our catalog readings (base units) scaled into the schema's unit, so a
reading NVML cannot give leaves the series absent in every schema. The rows are in the order of
dcgm-exporter's default-counters.csv, then the opt-in fields we can serve; docs and tests read
the same table (docs/migrating-from-dcgm-exporter.md lists it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from kube_gpu_exporter.exporter import catalog as c

Schema = Literal["classic", "4.8.3", "4.9"]
SCHEMAS: tuple[Schema, ...] = ("classic", "4.8.3", "4.9")
CLASSIC: Schema = "classic"
DCGM_4_7: Schema = "4.9"  # the schema with DCGM 4.7's names
# How a row reads the snapshot: a catalog value, a labelled catalog value, or a derived one.
Kind = Literal["value", "labelled", "fb_free", "xid", "nvlink", "clock_reasons"]

GAUGE, COUNTER = "gauge", "counter"
MIB = float(1 << 20)
ALL = SCHEMAS


@dataclass(frozen=True, slots=True)
class Name:
    """A field as one schema serves it: its name, its help, and our base unit × factor,
    rounded to `digits` decimals (the float noise of ×100, ÷10⁶, ×1000)."""

    name: str
    help: str
    factor: float = 1.0
    digits: int | None = None

    def convert(self, value: float) -> float:
        scaled = value * self.factor
        return round(scaled, self.digits) if self.digits is not None else scaled


@dataclass(frozen=True, slots=True)
class CompatField:
    """One dcgm-exporter field: its name under the classic schema (also 4.8.3's, which renamed
    a label and no field) and under 4.9, read from one catalog metric."""

    classic: Name | None  # None: not served under classic and 4.8.3
    dcgm47: Name | None  # None: not served under 4.9
    type: str  # dcgm-exporter's type for it (its CSV's): gauge or counter
    source: str  # the catalog metric read (kind `nvlink`: the transmit one, receive beside it)
    label: str = ""  # kind `labelled`: the value of the catalog metric's one label
    kind: Kind = "value"
    defaults: tuple[Schema, ...] = ()  # the schemas whose default-counters.csv has it

    def named(self, schema: Schema) -> Name | None:
        return self.dcgm47 if schema == DCGM_4_7 else self.classic


def _mhz(name: str, what: str) -> Name:
    return Name(name, f"{what} (in MHz).", 1e-6, 6)


def _percent(name: str, what: str) -> Name:
    return Name(name, f"{what} (in %).", 100.0, 6)


def _mib(name: str, what: str) -> Name:
    return Name(name, f"{what} (in MiB).", 1 / MIB)


def _dev(name: str, help: str) -> Name:
    return Name(f"DCGM_FI_DEV_{name}", help)


def _prof(name: str, help: str) -> Name:
    return Name(f"DCGM_FI_PROF_{name}", help)


def _renamed(
    make: Callable[[str, str], Name], classic: str, dcgm47: str, help: str
) -> tuple[Name, Name]:
    """A field whose unit 4.9 kept: the same help under its classic and its DCGM 4.7 name."""
    return make(classic, help), make(dcgm47, help)


# fmt: off
FIELDS: tuple[CompatField, ...] = (
    # dcgm-exporter's default-counters.csv, in its order.
    CompatField(_mhz("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency"),
                _dev("SM_CLOCK_HERTZ", "SM clock frequency (in Hz)."),
                GAUGE, c.SM_CLOCK.name, defaults=ALL),
    CompatField(_mhz("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency"),
                _dev("MEMORY_CLOCK_HERTZ", "Memory clock frequency (in Hz)."),
                GAUGE, c.MEMORY_CLOCK.name, defaults=ALL),
    CompatField(*_renamed(_dev, "MEMORY_TEMP", "MEMORY_TEMP_CELSIUS", "Memory temperature (in C)."),
                GAUGE, c.MEMORY_TEMPERATURE.name, defaults=ALL),
    CompatField(*_renamed(_dev, "GPU_TEMP", "GPU_TEMP_CELSIUS", "GPU temperature (in C)."),
                GAUGE, c.TEMPERATURE.name, defaults=ALL),
    CompatField(*_renamed(_dev, "POWER_USAGE", "BOARD_POWER_WATTS", "Power draw (in W)."),
                GAUGE, c.POWER.name, defaults=ALL),
    CompatField(Name("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                     "Total energy consumption since the driver loaded (in mJ).", 1000.0, 3),
                _dev("GPU_ENERGY_JOULES_TOTAL",
                     "Total energy consumption since the driver loaded (in J)."),
                COUNTER, c.ENERGY.name, defaults=ALL),
    CompatField(*_renamed(_dev, "PCIE_REPLAY_COUNTER", "PCIE_REPLAY_TOTAL",
                          "Total number of PCIe retries."),
                COUNTER, c.PCIE_REPLAYS.name, defaults=ALL),
    CompatField(_percent("DCGM_FI_DEV_GPU_UTIL", "GPU utilization"),
                _dev("GPU_UTIL_RATIO", "GPU utilization (ratio 0-1)."),
                GAUGE, c.UTILIZATION.name, defaults=ALL),
    CompatField(_percent("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization"),
                _dev("MEMORY_UTIL_RATIO", "Memory utilization (ratio 0-1)."),
                GAUGE, c.MEMORY_BANDWIDTH_UTILIZATION.name, defaults=ALL),
    CompatField(_percent("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization"),
                _dev("ENC_UTIL_RATIO", "Encoder utilization (ratio 0-1)."),
                GAUGE, c.ENCODER_UTILIZATION.name, defaults=ALL),
    CompatField(_percent("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization"),
                _dev("DEC_UTIL_RATIO", "Decoder utilization (ratio 0-1)."),
                GAUGE, c.DECODER_UTILIZATION.name, defaults=ALL),
    CompatField(*_renamed(_dev, "XID_ERRORS", "XID_ERROR",
                          "Value of the last XID error encountered."),
                GAUGE, c.XID_ERRORS.name, kind="xid", defaults=ALL),
    CompatField(_mib("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free"),
                _dev("FB_FREE_BYTES", "Framebuffer memory free (in bytes)."),
                GAUGE, c.MEMORY_TOTAL.name, kind="fb_free", defaults=ALL),
    CompatField(_mib("DCGM_FI_DEV_FB_USED", "Framebuffer memory used"),
                _dev("FB_USED_BYTES", "Framebuffer memory used (in bytes)."),
                GAUGE, c.MEMORY_USED.name, defaults=ALL),
    CompatField(_mib("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved"),
                _dev("FB_RESERVED_BYTES", "Framebuffer memory reserved (in bytes)."),
                GAUGE, c.MEMORY_RESERVED.name, defaults=ALL),
    CompatField(_dev("NVLINK_BANDWIDTH_TOTAL",
                     "Total number of NVLink bandwidth counters for all lanes."),
                _dev("NVLINK_THROUGHPUT_TOTAL", "NVLink throughput for all lanes (in MB/s)."),
                COUNTER, c.NVLINK_TRANSMIT_BYTES.name, kind="nvlink", defaults=ALL),
    CompatField(_dev("UNCORRECTABLE_REMAPPED_ROWS",
                     "Number of remapped rows for uncorrectable errors."),
                _dev("ROW_REMAP_UNCORRECTABLE_TOTAL",
                     "Number of remapped rows for uncorrectable errors."),
                COUNTER, c.REMAPPED_ROWS.name, "uncorrectable", "labelled", defaults=ALL),
    CompatField(_dev("CORRECTABLE_REMAPPED_ROWS",
                     "Number of remapped rows for correctable errors."),
                _dev("ROW_REMAP_CORRECTABLE_TOTAL",
                     "Number of remapped rows for correctable errors."),
                COUNTER, c.REMAPPED_ROWS.name, "correctable", "labelled", defaults=ALL),
    CompatField(*_renamed(_dev, "ROW_REMAP_FAILURE", "ROW_REMAP_FAILED",
                          "Whether remapping of rows has failed."),
                GAUGE, c.ROW_REMAP_FAILED.name, defaults=ALL),
    CompatField(*_renamed(_prof, "GR_ENGINE_ACTIVE", "GR_ENGINE_UTIL_RATIO",
                          "Ratio of time the graphics engine is active."),
                GAUGE, c.GRAPHICS_ACTIVE.name, defaults=ALL),
    CompatField(*_renamed(_prof, "PIPE_TENSOR_ACTIVE", "TENSOR_UTIL_RATIO",
                          "Ratio of cycles the tensor (HMMA) pipe is active."),
                GAUGE, c.TENSOR_ACTIVE.name, defaults=ALL),
    CompatField(*_renamed(_prof, "DRAM_ACTIVE", "DRAM_UTIL_RATIO",
                          "Ratio of cycles the device memory interface is active."),
                GAUGE, c.DRAM_ACTIVE.name, defaults=ALL),
    CompatField(*_renamed(_prof, "PCIE_TX_BYTES", "PCIE_TX_BYTES",
                          "The rate of data transmitted over PCIe (in B/s)."),
                GAUGE, c.PCIE_TRANSMIT_RATE.name, defaults=ALL),
    CompatField(*_renamed(_prof, "PCIE_RX_BYTES", "PCIE_RX_BYTES",
                          "The rate of data received over PCIe (in B/s)."),
                GAUGE, c.PCIE_RECEIVE_RATE.name, defaults=ALL),
    # Opt-in fields (commented out in dcgm-exporter's CSV) that alerts and dashboards use.
    CompatField(_mib("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total"),
                _dev("FB_CAPACITY_BYTES", "Framebuffer memory total (in bytes)."),
                GAUGE, c.MEMORY_TOTAL.name, defaults=(DCGM_4_7,)),
    CompatField(*_renamed(_dev, "ECC_SBE_VOL_TOTAL", "ECC_SBE_VOL_TOTAL",
                          "Total number of single-bit volatile ECC errors."),
                COUNTER, c.ECC_CORRECTED.name),
    CompatField(*_renamed(_dev, "ECC_DBE_VOL_TOTAL", "ECC_DBE_VOL_TOTAL",
                          "Total number of double-bit volatile ECC errors."),
                COUNTER, c.ECC_UNCORRECTED.name),
    CompatField(_dev("ENFORCED_POWER_LIMIT",
                     "Effective power limit that the driver enforces (in W)."),
                _dev("BOARD_POWER_LIMIT_ENFORCED_WATTS",
                     "Effective power limit that the driver enforces (in W)."),
                GAUGE, c.POWER_LIMIT.name),
    CompatField(*_renamed(_dev, "POWER_MGMT_LIMIT", "BOARD_POWER_LIMIT_REQUESTED_WATTS",
                          "Power management limit (in W)."),
                GAUGE, c.POWER_MANAGEMENT_LIMIT.name),
    CompatField(*_renamed(_prof, "SM_ACTIVE", "SM_UTIL_RATIO",
                          "The ratio of cycles an SM has at least 1 warp assigned."),
                GAUGE, c.SM_ACTIVE.name),
    CompatField(*_renamed(_prof, "SM_OCCUPANCY", "SM_OCCUPANCY_RATIO",
                          "The ratio of number of warps resident on an SM."),
                GAUGE, c.SM_OCCUPANCY.name),
    CompatField(*_renamed(_prof, "PIPE_FP64_ACTIVE", "FP64_UTIL_RATIO",
                          "Ratio of cycles the fp64 pipes are active."),
                GAUGE, c.FP64_ACTIVE.name),
    CompatField(*_renamed(_prof, "PIPE_FP32_ACTIVE", "FP32_UTIL_RATIO",
                          "Ratio of cycles the fp32 pipes are active."),
                GAUGE, c.FP32_ACTIVE.name),
    CompatField(*_renamed(_prof, "PIPE_FP16_ACTIVE", "FP16_UTIL_RATIO",
                          "Ratio of cycles the fp16 pipes are active."),
                GAUGE, c.FP16_ACTIVE.name),
    CompatField(*_renamed(_prof, "NVLINK_TX_BYTES", "NVLINK_TX_BYTES",
                          "The rate of data transmitted over NVLink (in B/s)."),
                GAUGE, c.NVLINK_TRANSMIT_RATE.name),
    CompatField(*_renamed(_prof, "NVLINK_RX_BYTES", "NVLINK_RX_BYTES",
                          "The rate of data received over NVLink (in B/s)."),
                GAUGE, c.NVLINK_RECEIVE_RATE.name),
    # DCGM field 112 under both its names in classic (DCGM 3.3 renamed it; CSVs use either).
    CompatField(_dev("CLOCK_THROTTLE_REASONS",
                     "Current clock event (throttle) reasons, a bitmask of NVML's reason bits."),
                None, GAUGE, c.CLOCK_EVENT_ACTIVE.name, kind="clock_reasons"),
    CompatField(_dev("CLOCKS_EVENT_REASONS",
                     "Current clock event (throttle) reasons, a bitmask of NVML's reason bits."),
                _dev("CLOCKS_EVENT_REASONS",
                     "Current clock event (throttle) reasons, a bitmask of NVML's reason bits."),
                GAUGE, c.CLOCK_EVENT_ACTIVE.name, kind="clock_reasons"),
)
# fmt: on


@dataclass(frozen=True, slots=True)
class NotServed:
    """A default field compat mode does not serve in any schema, and why."""

    classic: str
    dcgm47: str
    reason: str


NOT_SERVED: tuple[NotServed, ...] = (
    NotServed(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "a vGPU guest's licence state: on bare metal or with GPU passthrough there is no vGPU "
        "and NVML has no licence to report; a constant would be invented",
    ),
)

# DCGM 4.7 names read in no DCGM header nor dcgm-exporter file (DCGM 4.6.1's headers are the
# newest at hand): taken from NVIDIA's DCGM 4.7 field reference as quoted by others, and
# flagged (†) in docs/migrating-from-dcgm-exporter.md.
SECONDHAND_NAMES: frozenset[str] = frozenset(
    {
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        "DCGM_FI_DEV_ENC_UTIL_RATIO",
        "DCGM_FI_DEV_DEC_UTIL_RATIO",
        "DCGM_FI_DEV_FB_FREE_BYTES",
        "DCGM_FI_DEV_FB_USED_BYTES",
        "DCGM_FI_DEV_FB_RESERVED_BYTES",
        "DCGM_FI_DEV_FB_CAPACITY_BYTES",
    }
)


@dataclass(frozen=True, slots=True)
class SchemaLabels:
    """The label names a schema renamed; the others are the same in every schema."""

    hostname: str
    driver: str


LABELS: Mapping[Schema, SchemaLabels] = {
    "classic": SchemaLabels("Hostname", "DCGM_FI_DRIVER_VERSION"),
    "4.8.3": SchemaLabels("hostname", "DCGM_FI_DRIVER_VERSION"),
    "4.9": SchemaLabels("hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"),
}
COMMON_LABELS: tuple[str, ...] = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "namespace",
    "pod",
    "container",
    "err_code",
    "err_msg",
)


def metric_names(schema: Schema) -> tuple[str, ...]:
    """Every series name the schema can emit, in exposition order."""
    return tuple(n.name for f in FIELDS if (n := f.named(schema)) is not None)


def label_names(schema: Schema) -> tuple[str, ...]:
    return (*COMMON_LABELS, LABELS[schema].hostname, LABELS[schema].driver)


def serves(schema: Schema, name: str) -> bool:
    return name in metric_names(schema)
