"""The node under test: 8 A100 80GB GPUs, each split into seven 1g.10gb MIG instances.

A fully partitioned HGX A100 is the largest device count a common node shows NVML (8 GPUs +
56 MIG instances = 64 devices, so the most series per scrape), which is why the bench uses it.
The attribution bench adds a ninth, unpartitioned GPU that ten time-slicing replicas share,
with one compute process per replica, so the per-process split of a shared GPU runs too.
The scenarios are generated in code rather than kept as YAML so their shape is stated once here.
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.exporter.simulated.scenario import Scenario, ScenarioSpec

GPUS = 8
MIG_PER_GPU = 7
MIG_PROFILE = "1g.10gb"
# The GPU-instance ids an A100 80GB gives its seven 1g.10gb slices.
FIRST_GPU_INSTANCE_ID = 7
GIB = 1 << 30
MIG_MEMORY_BYTES = 9984 << 20
# The attribution node's ninth GPU: time-slicing replicas <uuid>::0..9, one process each.
SHARED_REPLICAS = 10
SHARED_FIRST_PID = 9000


def _mig(gpu: int, slot: int) -> dict[str, Any]:
    return {
        "profile": MIG_PROFILE,
        "gpu_instance_id": FIRST_GPU_INSTANCE_ID + slot,
        "memory_total_bytes": MIG_MEMORY_BYTES,
        "readings": {"memory_used_bytes": ((gpu + slot) % 9) * GIB},
    }


def _gpu(gpu: int) -> dict[str, Any]:
    """One partitioned GPU with varied readings, and two processes on its first slices."""
    processes = [
        {
            "pid": 4000 + 10 * gpu + slot,
            "used_memory_bytes": 2 * GIB,
            "sm_utilization": 0.4,
            "gpu_instance_id": FIRST_GPU_INSTANCE_ID + slot,
            "compute_instance_id": 0,
        }
        for slot in range(2)
    ]
    return {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_bytes": 80 * GIB,
        "power_limit_watts": 400,
        "energy_joules": 1.0e6 * (gpu + 1),
        "unsupported": ["gpm"],  # Ampere has no GPM (bench/profiling.py measures it on H100s)
        "readings": {
            "temperature_celsius": 40 + 3 * gpu,
            "power_watts": 150 + 20 * gpu,
            "sm_clock_mhz": 1410,
            "memory_clock_mhz": 1593,
        },
        "processes": processes,
        "mig": [_mig(gpu, slot) for slot in range(MIG_PER_GPU)],
    }


def _shared_gpu() -> dict[str, Any]:
    """A whole GPU shared by time-slicing: one compute process per replica's pod."""
    return {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_bytes": 80 * GIB,
        "power_limit_watts": 400,
        "unsupported": ["gpm"],
        "readings": {"utilization": 0.55, "memory_used_bytes": 4 * GIB * SHARED_REPLICAS},
        "processes": [
            {
                "pid": SHARED_FIRST_PID + replica,
                "used_memory_bytes": 4 * GIB,
                "sm_utilization": 0.05 + 0.01 * replica,
            }
            for replica in range(SHARED_REPLICAS)
        ],
    }


def node_scenario() -> Scenario:
    """The 64-device node, validated through the same model as scenario files."""
    spec = ScenarioSpec.model_validate(
        {
            "description": f"{GPUS} A100 80GB GPUs × {MIG_PER_GPU} {MIG_PROFILE} MIG instances",
            "driver_version": "550.54.15",
            "devices": [_gpu(gpu) for gpu in range(GPUS)],
        }
    )
    return Scenario(spec, source="bench/node.py")


def attribution_scenario() -> Scenario:
    """The 64-device node plus one whole GPU shared by time-slicing (65 devices)."""
    spec = ScenarioSpec.model_validate(
        {
            "description": f"{GPUS} A100 80GB GPUs × {MIG_PER_GPU} {MIG_PROFILE} MIG instances "
            f"and one A100 shared by {SHARED_REPLICAS} time-slicing replicas",
            "driver_version": "550.54.15",
            "devices": [*(_gpu(gpu) for gpu in range(GPUS)), _shared_gpu()],
        }
    )
    return Scenario(spec, source="bench/node.py")


DEVICE_COUNT = GPUS * (1 + MIG_PER_GPU)
ATTRIBUTION_DEVICE_COUNT = DEVICE_COUNT + 1


# --- 8 whole H100s: the other common node layout --------------------------------------------

H100_LINKS = 18  # NVLinks per SXM H100


def _h100(gpu: int) -> dict[str, Any]:
    """One whole H100 with one compute process (the pod holding it runs one)."""
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 80 * GIB,
        "power_limit_watts": 700,
        "energy_joules": 2.0e6 * (gpu + 1),
        "nvlink_links": H100_LINKS,
        "readings": {
            "temperature_celsius": 38 + 2 * gpu,
            "power_watts": 400 + 25 * gpu,
            "utilization": 0.6,
            "memory_used_bytes": (20 + gpu) * GIB,
            "graphics_active": 0.9,
            "sm_active": 0.7,
            "tensor_active": 0.4,
            "dram_active": 0.3,
        },
        "processes": [{"pid": 5000 + gpu, "used_memory_bytes": 20 * GIB, "sm_utilization": 0.6}],
    }


def h100_scenario() -> Scenario:
    """8 whole H100s (8 devices, each with its NVLinks and GPM readings)."""
    spec = ScenarioSpec.model_validate(
        {
            "description": f"{GPUS} H100 80GB GPUs, {H100_LINKS} NVLinks each",
            "driver_version": "550.54.15",
            "devices": [_h100(gpu) for gpu in range(GPUS)],
        }
    )
    return Scenario(spec, source="bench/node.py")


# The peers' nodes by name (bench/peers.py --node): how the tables describe each, its scenario
NODES = {
    "a100-mig": (f"{DEVICE_COUNT} devices ({GPUS} A100 × {MIG_PER_GPU} MIG {MIG_PROFILE})",
                 node_scenario),
    "h100": (f"{GPUS} devices ({GPUS} H100, {H100_LINKS} NVLinks each)", h100_scenario),
}  # fmt: skip
