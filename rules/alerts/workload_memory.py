"""Workload alerts, second part of group kube-gpu-exporter.workloads: CUDA out of memory coming,
in two tiers (framebuffer left behind is in memory_leaks.py).

A framebuffer that stays nearly full is a warning: vLLM, JAX and TensorFlow reserve most of it
up front by design, so namespaces (or pod labels) that do are opted out with `preallocating`.
Only usage that is still growing and, at its rate over `window`, fills the device within
`horizon` pages critical — node-mixin's FilesystemSpaceFillingUp, for GPU memory. Both fire
once per device (not once per sharing pod, all with the device's value), carry the holder's
namespace, pod and owner when one pod holds it, and name every holder in the description.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.promql import Query, agg, fmt_number, fmt_percent
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    edges,
    minutes,
    s,
    steady,
    uuid,
)
from kube_gpu_exporter.rules.runbook_parts import (
    NODE_GPUS,
    Runbook,
    find_node,
    on_node,
    promql,
    who,
)
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import (
    Duration,
    Matchers,
    PositiveDuration,
    Ratio,
    Severity,
    duration_seconds,
    selector_labels,
)
from kube_gpu_exporter.rules.spec import AlertSpec

TOTAL = 80 << 30  # an H100's framebuffer, for the cases


def _ratio_at(threshold: float) -> float:
    """Bytes used whose ratio to TOTAL is exactly `threshold` in floating point, so that a case
    can sit on the threshold itself."""
    used = threshold * TOTAL
    while used / TOTAL < threshold:  # rounding put it below: step up by the least amount
        used = math.nextafter(used, math.inf)
    return used


def mig_instance(w: World) -> dict[str, str]:
    """A MIG instance of GPU 3 on node a, whose parent's memory the rules leave out."""
    return w.dev("a", 3) | {"uuid": "MIG-a-3-1", "parent_uuid": uuid("a", 3)}


def _mig_series(w: World, parent_used: float, n: int) -> list[Series]:
    """GPU 3 of node a is MIG-enabled: its own memory series is the sum of its instances'."""
    mig = mig_instance(w)
    return [
        s(c.MEMORY_USED, w.dev("a", 3), steady(parent_used, n)),
        s(c.MEMORY_TOTAL, w.dev("a", 3), steady(TOTAL, n)),
        s(c.MEMORY_USED, mig, steady(0, n)),
        s(c.MEMORY_TOTAL, mig, steady(TOTAL, n)),
        s(c.GPU_INFO, mig | {"mig_profile": "3g.40gb"}, steady(1, n)),
    ]


# --- GPUMemoryNearFull ---------------------------------------------------------------------------


class MemoryAlert(AlertSettings):
    for_: Duration = Field(default="15m", alias="for")
    threshold: Ratio = 0.95  # framebuffer used / total
    # Allocations of frameworks that reserve the framebuffer up front (vLLM, JAX, TensorFlow):
    # label matchers on nvidia_gpu_allocation_info, e.g. namespace=~"llm-serving|jax-.*" or a
    # pod label the exporter copies (--kubernetes.pod-labels), label_gpu_preallocates="true".
    preallocating: Matchers | None = None


def _near_full_rule(a: MemoryAlert, q: Query) -> AlertText:
    used = agg("max", q.device_display, q.sel(c.MEMORY_USED))
    total = agg("max", q.device_display, q.sel(c.MEMORY_TOTAL))
    expr = (
        f"{used}\n  / {total}\n  > {fmt_number(a.threshold)}\n"
        f"unless {q.on(q.device)} {q.mig_parents()}"
    )
    if a.preallocating:
        expr += f"\nunless {q.on(q.device)} {q.sel(c.ALLOCATION_INFO, a.preallocating)}"
    return AlertText(
        expr,
        f"{device(q)} has had {{{{ $value | humanizePercentage }}}} of its "
        f"framebuffer in use, over the {fmt_percent(a.threshold)} threshold, for {a.for_}. "
        "The next allocation on it may fail with CUDA out of memory.",
    )


def _near_full_case(a: MemoryAlert, w: World) -> Case:
    full, fine = TOTAL * (1 + a.threshold) / 2, TOTAL * a.threshold / 2
    at = _ratio_at(a.threshold)
    past = at + TOTAL * (1 - a.threshold) / 100
    n = minutes(a.for_) + 10
    # 0: two pods share it; 1: no pod; 2: below; 4: one pod (its labels join the alert);
    # 5: a pre-allocating framework's; 6: exactly at the threshold; 7: just past it
    used = {0: full, 1: full, 2: fine, 4: full, 6: at, 7: past}
    owner = {"owner_kind": "Deployment", "owner_name": "infer"}
    series = [s(c.MEMORY_USED, w.dev("a", g), steady(v, n)) for g, v in used.items()]
    series += [s(c.MEMORY_TOTAL, w.dev("a", g), steady(TOTAL, n)) for g in used]
    series += _mig_series(w, full, n)
    series += [
        w.alloc("a", 0, "team-a", "train-0", "shared"),
        w.alloc("a", 0, "team-a", "train-1", "shared"),
        w.alloc("a", 2, "team-b", "small-0", "exclusive"),
    ]
    held = w.alloc("a", 4, "team-b", "infer-0", "exclusive")
    series.append(Series(held.metric, {**held.labels, **owner}, held.values))
    if a.preallocating:
        served = w.alloc("a", 5, "serving", "vllm-0", "exclusive")
        labels = {**served.labels, **selector_labels(a.preallocating)}
        series += [
            Series(served.metric, labels, served.values),
            s(c.MEMORY_USED, w.dev("a", 5), steady(full, n)),
            s(c.MEMORY_TOTAL, w.dev("a", 5), steady(TOTAL, n)),
        ]
    firing = (
        Firing(
            w.dev_out("a", 0),
            full / TOTAL,
            ({"namespace": "team-a", "pod": "train-0"}, {"namespace": "team-a", "pod": "train-1"}),
        ),
        Firing(w.dev_out("a", 1), full / TOTAL),  # no pod holds it: still alerts
        Firing(
            w.held_out("a", 4, "team-b", "infer-0", **owner),
            full / TOTAL,
            ({"namespace": "team-b", "pod": "infer-0"},),
        ),
        Firing(w.dev_out("a", 7), past / TOTAL),
    )
    return Case(tuple(series), edges(a.for_, firing))


def _near_full_runbook(a: MemoryAlert, q: Query) -> Runbook:
    used, total = q.sel(c.MEMORY_USED), q.sel(c.MEMORY_TOTAL)
    opt_out = (
        f" Allocations matching `{a.preallocating}` are left out (frameworks that reserve "
        "the framebuffer up front)."
        if a.preallocating
        else " Frameworks that reserve the framebuffer up front (vLLM, JAX, TensorFlow) are "
        "opted out with `alerts.GPUMemoryNearFull.preallocating` (label matchers on the "
        "allocation: a namespace, or a pod label the exporter copies)."
    )
    return Runbook(
        meaning=(
            f"A GPU or MIG instance has had more than {fmt_percent(a.threshold)} of its "
            f"framebuffer in use for {a.for_}. The alert fires once per device; when one pod "
            "holds it the alert carries that pod's `namespace`, `pod` and owner, and the "
            "description names every pod allocated to it. MIG-enabled GPUs are judged per "
            "instance, not as a whole. This is the warning tier: memory that is still "
            "growing towards exhaustion pages as GPUMemoryFillingUp." + opt_out
        ),
        impact=(
            "The next allocation on the device can fail with `CUDA error: out of memory`, "
            "killing a training step or an inference request. On a shared GPU one pod's "
            "growth starves the others."
        ),
        diagnosis="\n\n".join(
            (
                "Headroom per device, and what each pod on it uses:",
                promql(
                    f"1 - {used} / {total}",
                    q.sel(c.POD_MEMORY_USED, 'uuid="<uuid>"'),
                ),
                who(q),
                "Per process, on the node:",
                NODE_GPUS,
            )
        ),
        mitigation=(
            "If the pod is expected to use the memory (frameworks that pre-allocate), add it "
            "to `preallocating` or lower its pre-allocation (`XLA_PYTHON_CLIENT_MEM_FRACTION`, "
            "`gpu_memory_utilization` in vLLM, `PYTORCH_CUDA_ALLOC_CONF`). If usage grows "
            "steadily, the program leaks GPU memory: restart the pod and report it. On shared "
            "GPUs, move the heaviest pod to a whole GPU or a larger MIG profile."
        ),
    )


GPU_MEMORY_NEAR_FULL = AlertSpec(
    name="GPUMemoryNearFull",
    summary="A GPU's framebuffer has stayed nearly full.",
    settings=MemoryAlert,
    rule=_near_full_rule,
    cases=_near_full_case,
    runbook=_near_full_runbook,
    holders=True,
)

# --- GPUMemoryFillingUp --------------------------------------------------------------------------


class FillingUpAlert(AlertSettings):
    for_: Duration = Field(default="10m", alias="for")
    severity: Severity = "critical"
    window: PositiveDuration = "1h"  # the usage history the growth rate is fitted over
    horizon: PositiveDuration = "1h"  # page when the device is full sooner than this

    @model_validator(mode="after")
    def _horizon_past_for(self) -> FillingUpAlert:
        # A prediction that must hold for `for` before paging is useless if the device fills
        # before `for` has passed.
        if duration_seconds(self.horizon) < duration_seconds(self.for_) + 600:
            raise ValueError(f"horizon {self.horizon} must be at least `for` ({self.for_}) + 10m")
        return self


def _recent_window(a: FillingUpAlert) -> str:
    """`for`, and 2m at least: `deriv` needs two samples, and Prometheus 3's left-open range
    holds only one of a target scraped every minute in `[1m]` (Prometheus 2's closed one two),
    so a shorter window left the alert silent there."""
    return a.for_ if duration_seconds(a.for_) >= 120 else "2m"


def _filling_rule(a: FillingUpAlert, q: Query) -> AlertText:
    used, total = q.sel(c.MEMORY_USED), q.sel(c.MEMORY_TOTAL)
    headroom = f"{agg('max', q.device_display, total)}\n  - {agg('max', q.device_display, used)}"
    rate = agg("max", q.device_display, f"deriv({used}[{a.window}])")
    # Still growing over the whole of `for`: a framework's one-off reservation at start-up
    # is a step, whose growth leaves this window before `for` has passed.
    recent = agg("max", q.device, f"deriv({used}[{_recent_window(a)}])")
    seconds = f"{duration_seconds(a.horizon):g}"
    expr = (
        # A rate of 0 or less divides to +Inf (or NaN when full): never under the horizon.
        f"(\n{headroom}\n)\n  / clamp_min({rate}, 0)\n  < {seconds}\n"
        f"and {q.on(q.device)} {recent} > 0\n"
        f"unless {q.on(q.device)} {q.mig_parents()}"
    )
    return AlertText(
        expr,
        f"{device(q)} is filling its framebuffer: at its rate over the last "
        f"{a.window} it is full in {{{{ $value | humanizeDuration }}}}, under the {a.horizon} "
        "horizon, and it has kept growing for "
        f"{a.for_}. CUDA out of memory will follow.",
    )


def _filling_case(a: FillingUpAlert, w: World) -> Case:
    for_, horizon = minutes(a.for_), duration_seconds(a.horizon) / 60
    n = minutes(a.window) + for_ + 20
    # Bytes per minute, a power of two per second (exact through deriv's regression), that
    # takes four horizons or more from empty to full.
    rate = 60.0 * 2 ** math.floor(math.log2(TOTAL / (4 * horizon * 60)))
    # Times to full end half a second short of a whole second, so that humanizeDuration's
    # truncation cannot tip with the last bit of the regression.
    ttf = horizon - 1 - 1 / 120  # minutes at the start: fires, and not full before the check
    leak = f"{TOTAL - rate * ttf!r}+{rate!r}x{int(ttf)} {TOTAL!r}+0x{n}"
    step = f"0+0x4 {0.9 * TOTAL!r}+0x{n}"  # a framework reserving 90 % at minute 5
    slow = f"{TOTAL / 4!r}+{rate / 3!r}x{n}"  # full in well over a horizon
    series = [
        s(c.MEMORY_USED, w.dev("a", 0), leak),
        s(c.MEMORY_USED, w.dev("a", 1), steady(0.9 * TOTAL, n)),  # reserved up front
        s(c.MEMORY_USED, w.dev("a", 2), step),
        s(c.MEMORY_USED, w.dev("a", 4), slow),
    ]
    series += [s(c.MEMORY_TOTAL, w.dev("a", g), steady(TOTAL, n)) for g in (0, 1, 2, 4)]
    # 6 and 7: headroom held at 1 % more and 1 % less than the horizon's worth of growth
    # (used and total both grow), so the time to full sits just outside and inside it.
    for g, factor in ((6, 1.01), (7, 0.99)):
        start = TOTAL / 2
        series.append(s(c.MEMORY_USED, w.dev("a", g), f"{start!r}+{rate!r}x{n}"))
        headroom = rate * (horizon * factor - 1 / 120)
        series.append(s(c.MEMORY_TOTAL, w.dev("a", g), f"{start + headroom!r}+{rate!r}x{n}"))
    series += _mig_series(w, TOTAL / 2, n)
    series.append(w.alloc("a", 0, "team-a", "leaky-0", "exclusive"))
    start, step_at = 1, 5  # deriv needs two samples; the framework reserves at minute 5

    def firing(minute: int) -> tuple[Firing, ...]:
        return (
            Firing(
                w.held_out("a", 0, "team-a", "leaky-0"),
                (ttf - minute) * 60,
                ({"namespace": "team-a", "pod": "leaky-0"},),
            ),
            Firing(w.dev_out("a", 7), (horizon * 0.99 - 1 / 120) * 60),
        )

    # The start-up step looks like growth for exactly `for` (its jump leaves the recent
    # window then), so it stays pending and never fires: checked a minute after it would have.
    after_step = step_at + max(for_, minutes(_recent_window(a))) + 1
    checks = (*edges(a.for_, firing(start + for_), start), Check(after_step, firing(after_step)))
    return Case(tuple(series), checks)


def _filling_runbook(a: FillingUpAlert, q: Query) -> Runbook:
    used = q.sel(c.MEMORY_USED, 'uuid="<uuid>"')
    return Runbook(
        meaning=(
            "A GPU's or MIG instance's framebuffer use has grown over the last "
            f"{a.window} at a rate that fills it within {a.horizon}, and it has kept growing "
            f"over the last {a.for_}. A framework that reserves memory once at start-up is a "
            "step, not growth, and does not fire; a device that stays full without growing "
            "is GPUMemoryNearFull's (a warning). Fires once per device, with the holder's "
            "labels when one pod holds it and every holder named in the description."
        ),
        impact=(
            "When it is full, the next allocation fails with `CUDA error: out of memory` and "
            "the process (a training run, an inference server) usually dies with it."
        ),
        diagnosis="\n\n".join(
            (
                "The growth, and which pod's memory grows:",
                promql(
                    used,
                    f"deriv({used}[{a.window}])",
                    q.sel(c.POD_MEMORY_USED, 'uuid="<uuid>"'),
                ),
                who(q),
                find_node(q),
                on_node("nvidia-smi --query-compute-apps=pid,used_memory --format=csv -l 10"),
            )
        ),
        mitigation=(
            "A leak: restart the pod before it crashes on its own (checkpoint first if it "
            "trains), then report it to the owner — common causes are tensors kept across "
            "steps, a growing cache, or a caching allocator with a fragmenting workload "
            "(`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`). On a shared GPU, move the "
            "growing pod away from the others."
        ),
    )


GPU_MEMORY_FILLING_UP = AlertSpec(
    name="GPUMemoryFillingUp",
    summary="A GPU's framebuffer is growing towards CUDA out of memory.",
    settings=FillingUpAlert,
    rule=_filling_rule,
    cases=_filling_case,
    runbook=_filling_runbook,
    holders=True,
)

SPECS = (GPU_MEMORY_NEAR_FULL, GPU_MEMORY_FILLING_UP)
