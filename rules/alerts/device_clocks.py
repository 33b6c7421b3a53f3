"""Device alerts, first part of group kube-gpu-exporter.devices: heat and slowed clocks.

The three slowdown alerts read NVML's clock-event reasons (one series per reason, 1 while
active) and each names the reason it is about, so a GPU slowed for one reason alerts once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from kube_gpu_exporter.exporter import catalog as c
from kube_gpu_exporter.rules.alert_text import AlertText, device
from kube_gpu_exporter.rules.promql import Query, agg, fmt_number, settled
from kube_gpu_exporter.rules.promtool_cases import (
    Case,
    Check,
    Firing,
    Series,
    World,
    edges,
    just_over,
    just_under,
    minutes,
    s,
    steady,
)
from kube_gpu_exporter.rules.runbook_parts import NODE_GPUS, Runbook, find_node, on_node, promql
from kube_gpu_exporter.rules.settings.alert import AlertSettings
from kube_gpu_exporter.rules.settings.values import Duration
from kube_gpu_exporter.rules.spec import AlertSpec


def _clock_event(q: Query, reasons: str) -> str:
    op = "=~" if "|" in reasons else "="
    active = q.sel(c.CLOCK_EVENT_ACTIVE, f'reason{op}"{reasons}"')
    return agg("max", q.device_display, active)


def _clock_events(w: World, n: int, active: Mapping[int, tuple[str, ...]]) -> tuple[Series, ...]:
    """Every reason's series for each GPU in `active`, 1 for the reasons listed."""
    return tuple(
        s(c.CLOCK_EVENT_ACTIVE, w.dev("a", g, reason=r), steady(int(r in reasons), n))
        for g, reasons in active.items()
        for r in c.CLOCK_EVENT_REASONS
    )


def _slowed(a: AlertSettings, w: World, active: Mapping[int, tuple[str, ...]]) -> Case:
    """GPUs with the reasons in `active`; GPU 0 alone must fire, exactly when `for` has held."""
    n = minutes(a.for_) + 10
    return Case(_clock_events(w, n, active), edges(a.for_, (Firing(w.dev_out("a", 0), 1),)))


def _clock_queries(q: Query, *readings: c.Metric) -> str:
    """The runbooks' PromQL: the device's active reasons, then the readings that explain them."""
    return promql(
        q.sel(c.CLOCK_EVENT_ACTIVE, 'uuid="<uuid>"') + " == 1",
        *(q.sel(metric, 'uuid="<uuid>"') for metric in readings),
    )


# --- GPUTemperatureHigh --------------------------------------------------------------------------


class TemperatureAlert(AlertSettings):
    threshold: Annotated[float, Field(strict=True, gt=0, le=150)] = 85.0  # °C


def _temperature_rule(a: TemperatureAlert, q: Query) -> AlertText:
    return AlertText(
        f"{q.sel(c.TEMPERATURE)} > {fmt_number(a.threshold)}",
        f"{device(q)} is at {{{{ $value | humanize }}}} °C, over the "
        f"{fmt_number(a.threshold)} °C threshold, for {a.for_}. Clocks will be slowed "
        "for heat next.",
    )


def _temperature_case(a: TemperatureAlert, w: World) -> Case:
    """A hot GPU and a cool one; GPU 2 exactly at the threshold (not over it: silent) and
    GPU 3 just over it (fires), so that neither `>=` nor a slightly different threshold
    passes."""
    temperatures = {0: a.threshold + 3, 1: a.threshold / 2, 2: a.threshold}
    temperatures[3] = just_over(a.threshold)
    n = minutes(a.for_) + 10
    series = tuple(s(c.TEMPERATURE, w.dev("a", g), steady(t, n)) for g, t in temperatures.items())
    firing = tuple(Firing(w.dev("a", g), temperatures[g]) for g in (0, 3))
    return Case(series, edges(a.for_, firing))


def _temperature_runbook(a: TemperatureAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"The GPU die has been above {fmt_number(a.threshold)} °C for {a.for_}. Data-center "
            "GPUs start slowing their clocks for heat around 85–90 °C and shut down near "
            "their maximum operating temperature."
        ),
        impact=(
            "Thermal slowdown follows (see GPUThermalThrottling): jobs run slower, and "
            "multi-GPU jobs run at the pace of the hottest GPU."
        ),
        diagnosis="\n\n".join(
            (
                "Is it one GPU, a whole node or a whole rack?",
                promql(
                    q.sel(c.TEMPERATURE),
                    f"max by ({q.node_label}) ({q.sel(c.TEMPERATURE)})",
                    q.sel(c.POWER, 'uuid="<uuid>"'),
                ),
                find_node(q),
                NODE_GPUS,
            )
        ),
        mitigation=(
            "One GPU hot while its neighbours are cool: failing fan, blocked airflow or "
            "degraded thermal paste — cordon the node and open a hardware ticket. A whole "
            "node or rack hot: data-center cooling; tell facilities. As a stopgap, lower the "
            "power limit (`nvidia-smi -pl <watts> -i <gpu>`) or drain the node."
        ),
    )


GPU_TEMPERATURE_HIGH = AlertSpec(
    name="GPUTemperatureHigh",
    summary="A GPU is running hot.",
    settings=TemperatureAlert,
    rule=_temperature_rule,
    cases=_temperature_case,
    runbook=_temperature_runbook,
    holders=True,
)

# --- GPUThermalThrottling ------------------------------------------------------------------------

SW = "sw_thermal_slowdown"
THERMAL = f"{SW}|hw_thermal_slowdown"


class ThrottlingAlert(AlertSettings):
    window: Duration = "15m"
    duty: Annotated[float, Field(strict=False, gt=0, le=1)] = 0.25  # share of the window


def _throttled_share(q: Query, window: str) -> str:
    """The share of `window` the clocks were held down for heat, per device.

    From the driver's clock-event duration counters where the GPU has them (seconds held down
    per second; the two reasons can overlap, hence the clamp); from the 0/1 reason series
    sampled at each scrape on GPUs without them.
    """
    seconds = q.sel(c.CLOCK_EVENT_DURATION, f'reason=~"{THERMAL}"')
    counted = agg("sum", q.device_display, f"rate({seconds}[{window}])")
    active = q.sel(c.CLOCK_EVENT_ACTIVE, f'reason=~"{THERMAL}"')
    sampled = agg("max", q.device_display, f"avg_over_time({active}[{window}])")
    return f"clamp_max({counted}, 1)\nor\n{sampled}"


def _throttling_rule(a: ThrottlingAlert, q: Query) -> AlertText:
    return AlertText(
        f"{settled(_throttled_share(q, a.window))} >= {fmt_number(a.duty)}",
        f"{device(q)} held its clocks down for heat (sw_thermal_slowdown or "
        f"hw_thermal_slowdown) {{{{ $value | humanizePercentage }}}} of the last {a.window}, "
        f"at least {a.duty:.0%}, for {a.for_}: it runs below its clocks to cool down.",
    )


def _throttling_case(a: ThrottlingAlert, w: World) -> Case:
    """Duration counters rising from minute 0: GPU 0 by exactly the duty's share of each
    minute (fires: the rule says "at least"), GPU 1 just under it (silent; its 0/1 series, 1
    from minute 1, does not count where the counter exists). GPU 2 has no duration counters
    and its reason is active from minute 0: it fires as soon as `for` has held. GPU 0's rate
    climbs to the duty as its window fills, so it is checked once that has happened.

    The at-duty probe is exact when the duty is a whole number of seconds per minute (25 %:
    15 s); otherwise GPU 0 sits just over it instead. Prometheus 3 extrapolates the rate over
    the interval its left-open range leaves out, a bit under the duty: the rule rounds the
    share (promql.settled), so both generations fire on it."""
    span, held = minutes(a.window), minutes(a.for_)
    n = span + held + 15
    at_duty = a.duty * 60 if (a.duty * 60).is_integer() else just_over(a.duty) * 60
    rising = {0: at_duty, 1: just_under(a.duty) * 60}  # seconds held down per minute
    duration = c.CLOCK_EVENT_DURATION
    series = (
        *(s(duration, w.dev("a", g, reason=SW), f"0+{v!r}x{n}") for g, v in rising.items()),
        *(s(duration, w.dev("a", g, reason="hw_thermal_slowdown"), steady(0, n)) for g in rising),
        *_clock_events(w, n, {0: (), 2: ("hw_thermal_slowdown",)}),
        *(  # from minute 1, when its counter has two samples and so a rate
            s(c.CLOCK_EVENT_ACTIVE, w.dev("a", 1, reason=r), f"0 {int(r == SW)}+0x{n}")
            for r in c.CLOCK_EVENT_REASONS
        ),
    )
    gpu_2 = Firing(w.dev_out("a", 2), 1)
    late = Check(span + held + 2, (Firing(w.dev_out("a", 0), at_duty / 60), gpu_2))
    return Case(series, (*edges(a.for_, (gpu_2,)), late))


def _throttling_runbook(a: ThrottlingAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            "The GPU held its clocks down for heat (`sw_thermal_slowdown`: the driver lowers "
            "clocks as the GPU nears its slowdown temperature; `hw_thermal_slowdown`: the "
            f"hardware cuts clocks hard) at least {a.duty:.0%} of the last {a.window}, for "
            f"{a.for_}. The share comes from the driver's clock-event duration counters "
            "(`nvidia_gpu_clock_event_duration_seconds_total`), or, on GPUs without them, "
            "from the reason series sampled at each scrape — so a GPU throttled half the "
            "time is caught, not only one throttled at every sample."
        ),
        impact=(
            "The GPU runs below its rated clocks; jobs take longer, and synchronous "
            "multi-GPU jobs slow to the pace of this GPU."
        ),
        diagnosis="\n\n".join(
            (
                _clock_queries(q, c.TEMPERATURE, c.SM_CLOCK),
                promql(_throttled_share(q, a.window)),
                find_node(q),
                on_node("nvidia-smi -q -d PERFORMANCE,TEMPERATURE"),
            )
        ),
        mitigation="As for GPUTemperatureHigh: fix the cooling of the GPU, node or rack; "
        "lower the power limit or drain the node meanwhile.",
    )


GPU_THERMAL_THROTTLING = AlertSpec(
    name="GPUThermalThrottling",
    summary="A GPU slows its clocks because it is too hot.",
    settings=ThrottlingAlert,
    rule=_throttling_rule,
    cases=_throttling_case,
    runbook=_throttling_runbook,
    holders=True,
)

# --- GPUHardwareSlowdown -------------------------------------------------------------------------


def _slowdown_rule(a: AlertSettings, q: Query) -> AlertText:
    specific = _clock_event(q, "hw_thermal_slowdown|hw_power_brake_slowdown")
    return AlertText(
        f"{_clock_event(q, 'hw_slowdown')} == 1\nunless {q.on(q.device)}\n{specific} == 1",
        f"{device(q)} has had hw_slowdown active for {a.for_} without a more specific "
        "thermal or power-brake reason: a board sensor, the power supply or fast-trigger "
        "power protection is halving its clocks.",
    )


def _slowdown_case(a: AlertSettings, w: World) -> Case:
    return _slowed(a, w, {0: ("hw_slowdown",), 1: ("hw_slowdown", "hw_thermal_slowdown"), 2: ()})


def _slowdown_runbook(a: AlertSettings, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"`hw_slowdown` has been active for {a.for_} without `hw_thermal_slowdown` or "
            "`hw_power_brake_slowdown` (those have their own alerts). The hardware halves "
            "the clocks or more because of a board temperature sensor, an external power "
            "brake signal on older boards, or fast-trigger power protection when the draw "
            "spikes over what the board can deliver."
        ),
        impact="The GPU runs at a fraction of its speed until the condition clears.",
        diagnosis="\n\n".join(
            (
                _clock_queries(q, c.POWER, c.POWER_LIMIT),
                find_node(q),
                on_node("nvidia-smi -q -d PERFORMANCE,POWER"),
            )
        ),
        mitigation=(
            "If power draw sits at the limit, lower the power limit a little. Otherwise it "
            "is the board or the node's power delivery: check the BMC/IPMI event log, "
            "cordon the node and open a hardware ticket."
        ),
    )


GPU_HARDWARE_SLOWDOWN = AlertSpec(
    name="GPUHardwareSlowdown",
    summary="A GPU's hardware slows its clocks for a reason the driver does not name.",
    settings=AlertSettings,
    rule=_slowdown_rule,
    cases=_slowdown_case,
    runbook=_slowdown_runbook,
    holders=True,
)

# --- GPUPowerBrake -------------------------------------------------------------------------------


class PowerBrakeAlert(AlertSettings):
    for_: Duration = Field(default="1m", alias="for")


def _brake_rule(a: PowerBrakeAlert, q: Query) -> AlertText:
    return AlertText(
        f"{_clock_event(q, 'hw_power_brake_slowdown')} == 1",
        f"{device(q)} has had hw_power_brake_slowdown active for {a.for_}: the system "
        "(power supply or baseboard) asserted the power brake and clocks are cut hard.",
    )


def _brake_case(a: PowerBrakeAlert, w: World) -> Case:
    return _slowed(a, w, {0: ("hw_power_brake_slowdown", "hw_slowdown"), 1: ("sw_power_cap",)})


def _brake_runbook(a: PowerBrakeAlert, q: Query) -> Runbook:
    return Runbook(
        meaning=(
            f"`hw_power_brake_slowdown` has been active for {a.for_}: the system asserted "
            "the external power-brake signal, usually because a power supply failed or the "
            "chassis is over its power budget."
        ),
        impact="Clocks are cut hard on the affected GPUs, usually on every GPU of the node.",
        diagnosis="\n\n".join(
            (
                promql(
                    f"count by ({q.node_label}) ("
                    + q.sel(c.CLOCK_EVENT_ACTIVE, 'reason="hw_power_brake_slowdown"')
                    + " == 1)"
                ),
                find_node(q),
                "Check the node's BMC for power-supply events (`ipmitool sel list` on the host).",
            )
        ),
        mitigation=(
            "Replace or reseat the failed power supply; check the rack's power budget. Drain "
            "the node if its jobs are time-critical."
        ),
    )


GPU_POWER_BRAKE = AlertSpec(
    name="GPUPowerBrake",
    summary="A GPU is slowed by an external power brake.",
    settings=PowerBrakeAlert,
    rule=_brake_rule,
    cases=_brake_case,
    runbook=_brake_runbook,
    holders=True,
)

SPECS = (GPU_TEMPERATURE_HIGH, GPU_THERMAL_THROTTLING, GPU_HARDWARE_SLOWDOWN, GPU_POWER_BRAKE)
