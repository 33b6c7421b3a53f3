"""Six hours of a small fleet, as the exporter and the cluster view would have served them, for
the report's end-to-end test: each GPU plays one case the report must count right.

node-a (three H100s):
  GPU 0  an idle notebook holding a whole GPU (notebooks/jupyter-alice, utilization 0)
  GPU 1  a busy trainer (ml/trainer-0, a Job's pod, 90 %), hot: hardware thermal slowdown
         from hour 2 to hour 4 at 88 °C, and one Xid 13 at hour 3
  GPU 2  shared by three pods (team-shared/svc-a 50 %, svc-b 30 %, svc-c 0 %): 1/3 GPU each
node-b (an A100 in MIG mode, Ampere: no per-slice utilization, hostPID so processes count):
  3g.20gb (3/7 of the GPU) research/inference-0 with a process: busy
  2g.10gb (2/7)            research/dev-0 with none: idle
The cluster view has two ml pods waiting for GPUs from hour 1 to hour 3, and Kueue's queue
ml-cq a Job of 2 GPUs waiting from hour 2 to hour 4 while the queue uses 12 of its 8 + 4.

`EXPECTED` holds what the report must say of it, in GPU-hours over the six hours.
"""

from __future__ import annotations

from collections.abc import Callable

from tsdb_backfill import Labels, Point

HOURS = 6
STEP = 30  # seconds between samples, as a 30-second scrape
A, B = "node-a:19400", "node-b:19400"
JOB = {"job": "kube-gpu-exporter"}
CLUSTER_VIEW = {"job": "kube-gpu-exporter-cluster"}
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
MIG_3G = "MIG-b0000001-0000-4000-8000-000000000000"
MIG_2G = "MIG-b0000002-0000-4000-8000-000000000000"
PARENT = "GPU-b0000000-0000-4000-8000-000000000000"


def gpu_uuid(index: int) -> str:
    return f"GPU-a000000{index}-0000-4000-8000-000000000000"


Series = tuple[str, Labels, list[Point]]


def fleet(start: float) -> list[Series]:
    """Every series of the scenario, sampled every STEP seconds from `start` for HOURS."""
    times = [start + i * STEP for i in range(HOURS * 3600 // STEP + 1)]
    out: list[Series] = []

    def add(name: str, labels: Labels, value: Callable[[float], float]) -> None:
        out.append((name, {**JOB, **labels}, [(t, value(t - start)) for t in times]))

    def between(h0: float, h1: float, inside: float, outside: float) -> Callable[[float], float]:
        return lambda s: inside if h0 * 3600 <= s < h1 * 3600 else outside

    for node in (A, B):
        add("kube_gpu_exporter_host_pid_namespace", {"instance": node}, lambda s: 1)
        # the exporters began counting Xids a minute before the first sample
        add(
            "kube_gpu_exporter_xid_watch_start_timestamp_seconds",
            {"instance": node},
            lambda s: start - 60,
        )
    for index, util in enumerate((0.0, 0.9, 0.8)):
        dev = {"instance": A, "gpu": str(index), "uuid": gpu_uuid(index)}
        add("nvidia_gpu_info", {**dev, "model": H100, "mig_profile": ""}, lambda s: 1)
        add("nvidia_gpu_up", dev, lambda s: 1)
        add("nvidia_gpu_share_ratio", dev, lambda s: 1)
        add("nvidia_gpu_utilization_ratio", dev, lambda s, u=util: u)
        hot = index == 1
        add("nvidia_gpu_temperature_celsius", dev, between(2, 4, 88, 60) if hot else lambda s: 45)
        for reason in ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"):
            slowed = hot and reason == "hw_thermal_slowdown"
            active = between(2, 4, 1, 0) if slowed else (lambda s: 0)
            add("nvidia_gpu_clock_event_active", {**dev, "reason": reason}, active)
            seconds = (lambda s: min(max(s - 7200, 0), 7200)) if slowed else (lambda s: 0)
            add("nvidia_gpu_clock_event_duration_seconds_total", {**dev, "reason": reason}, seconds)
    # The one Xid 13: its counter appears at the event, at 1 (no code is served at 0 before).
    xid = {"instance": A, "gpu": "1", "uuid": gpu_uuid(1), "xid": "13"}
    out.append(
        (
            "nvidia_gpu_xid_errors_total",
            {**JOB, **xid},
            [(t, 1) for t in times if t - start >= 3 * 3600],
        )
    )

    def hold(
        dev: Labels, ns: str, pod: str, sharing: str, util: float | None, **owner: str
    ) -> None:
        who = {**dev, "namespace": ns, "pod": pod, "container": "main"}
        add(
            "nvidia_gpu_allocation_info",
            {**who, "resource": "nvidia.com/gpu", "sharing": sharing, **owner},
            lambda s: 1,
        )
        if util is not None:
            add("nvidia_gpu_pod_utilization_ratio", who, lambda s: util)

    whole = {"instance": A, "gpu": "0", "uuid": gpu_uuid(0)}
    hold(whole, "notebooks", "jupyter-alice", "exclusive", 0.0)
    trainer = {"instance": A, "gpu": "1", "uuid": gpu_uuid(1)}
    hold(trainer, "ml", "trainer-0", "exclusive", 0.9, owner_kind="Job", owner_name="trainer")
    shared = {"instance": A, "gpu": "2", "uuid": gpu_uuid(2)}
    for pod, util in (("svc-a", 0.5), ("svc-b", 0.3), ("svc-c", 0.0)):
        hold(shared, "team-shared", pod, "shared", util)

    parent = {"instance": B, "gpu": "0", "uuid": PARENT}
    add("nvidia_gpu_info", {**parent, "model": A100, "mig_profile": ""}, lambda s: 1)
    add("nvidia_gpu_up", parent, lambda s: 1)
    add("nvidia_gpu_share_ratio", parent, lambda s: 1)
    for uuid, gi, profile, share, pod, procs in (
        (MIG_3G, "1", "3g.20gb", 3 / 7, "inference-0", 1),
        (MIG_2G, "5", "2g.10gb", 2 / 7, "dev-0", 0),
    ):
        mig = {
            **parent,
            "uuid": uuid,
            "parent_uuid": PARENT,
            "gpu_instance_id": gi,
            "compute_instance_id": "0",
        }
        add("nvidia_gpu_info", {**mig, "model": A100, "mig_profile": profile}, lambda s: 1)
        add("nvidia_gpu_up", mig, lambda s: 1)
        add("nvidia_gpu_share_ratio", mig, lambda s, x=share: x)
        add("nvidia_gpu_compute_processes", mig, lambda s, n=procs: n)
        hold(mig, "research", pod, "exclusive", None)

    waiting = {
        **CLUSTER_VIEW,
        "instance": "cluster:19401",
        "namespace": "ml",
        "resource": "nvidia.com/gpu",
        "gpu_product": H100,
    }
    for reason in ("insufficient_gpus", "fragmented"):
        pods = between(1, 3, 2, 0) if reason == "insufficient_gpus" else (lambda s: 0)
        out.append(
            (
                "kube_gpu_pending_pods",
                {**waiting, "reason": reason},
                [(t, pods(t - start)) for t in times],
            )
        )
    age = [(t, (t - start - 3600) if 3600 <= t - start < 3 * 3600 else 0) for t in times]
    out.append(
        (
            "kube_gpu_pending_seconds",
            {**CLUSTER_VIEW, "instance": "cluster:19401", "namespace": "ml"},
            age,
        )
    )
    out += _queues(start, times)
    return out


def _queues(start: float, times: list[float]) -> list[Series]:
    """Kueue's side, as the cluster view serves it: ml-cq (8 H100s, 4 more to borrow) uses 4,
    12 from hour 2 to hour 4 while a Job of 2 GPUs waits in it (absent the rest of the time,
    as the view drops a series when nothing waits); lab-cq (2 A100s, no borrowing limit) has
    its use never counted and nothing waiting."""
    view = {**CLUSTER_VIEW, "instance": "cluster:19401"}
    gpu = {"resource": "nvidia.com/gpu"}
    ml = {**view, **gpu, "cluster_queue": "ml-cq", "flavor": "h100"}
    lab = {**view, **gpu, "cluster_queue": "lab-cq", "flavor": "a100"}

    def busy(s: float) -> bool:
        return 2 * 3600 <= s < 4 * 3600

    def points(value: Callable[[float], float]) -> list[Point]:
        return [(t, value(t - start)) for t in times]

    waiting = {**view, "cluster_queue": "ml-cq", "namespace": "ml", "local_queue": "ml-batch"}
    waiting["reason"] = "Pending"
    return [
        ("kube_gpu_queue_nominal_quota", ml, points(lambda s: 8)),
        ("kube_gpu_queue_borrowing_limit", ml, points(lambda s: 4)),
        ("kube_gpu_queue_used_quota", ml, points(lambda s: 12 if busy(s) else 4)),
        ("kube_gpu_queue_nominal_quota", lab, points(lambda s: 2)),
        (
            "kube_gpu_pending_workload_gpus",
            waiting,
            [p for p in points(lambda s: 2) if busy(p[0] - start)],
        ),
        (
            "kube_gpu_pending_workload_seconds",
            waiting,
            [p for p in points(lambda s: s - 2 * 3600) if busy(p[0] - start)],
        ),
    ]


# GPU-hours over the six hours, by namespace: (allocated, idle).
EXPECTED = {
    "notebooks": (6.0, 6.0),
    "ml": (6.0, 0.0),
    "team-shared": (6.0, 2.0),  # three holds of 1/3 GPU; svc-c idle
    "research": (6 * 5 / 7, 6 * 2 / 7),  # slices of 3/7 and 2/7; the 2/7 one idle
}
