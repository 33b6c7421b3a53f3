"""`kube-gpu-exporter demo`: start the stack, print where to look, report alerts as they come.

Like `generate`, the subcommand's flags are added by `add_arguments` and `run` does the work;
the stack (gRPC, pydantic, the rules generator) is imported only when the demo runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kube_gpu_exporter.exporter.units import parse_host, parse_port

if TYPE_CHECKING:
    from kube_gpu_exporter.demo.stack import Stack

# The story node lives beside the simulated backend (`serve --simulate` in the image uses it too);
# its thresholds, the defaults with shorter durations, belong to the demo.
SCENARIO = (
    Path(__file__).resolve().parent.parent / "exporter" / "simulated" / "scenarios" / "demo.yaml"
)
THRESHOLDS = Path(__file__).resolve().with_name("thresholds.yaml")
POLL_SECONDS = 5.0
STORY_END_SECONDS = 270.0  # the memory alert has resolved: the story has been told
REFUSAL_SECONDS = 30.0  # how often the quota refuses the Job's pod again
EXPLAIN_SECONDS = 30.0
REPORT = "gpu-report.html"
REPORT_MIN_MINUTES = 2
REPORT_SECONDS = 120.0  # the report's queries over a few minutes of data take seconds
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, terminal closed
PORTS = {
    "exporter": 19400,
    "prometheus": 19090,
    "alertmanager": 19093,
    "cluster": 19401,
    "alerts": 19094,
}
EXIT_FAILED = 1
EXIT_USAGE = 2

STORY = """\
The story (the node is simulated; alerts use the generated rules with shorter durations):
  GPU 0  ml/llm-pretrain-0 trains flat out; from 0:30 it runs hot and throttles
         → GPUTemperatureHigh, GPUThermalThrottling (routed to the pod that holds the GPU)
  GPU 1  lab/notebook-alice holds a whole H100 and leaves it idle       → GPUAllocatedIdle
  GPU 2  ml/finetune-llama's memory climbs towards CUDA OOM            → GPUMemoryNearFull;
         at 4:00 it is restarted with a smaller batch and the alert resolves
  GPU 3  an A100 in MIG instances: ml/embeddings (3g.20gb), lab/notebook-bob (2g.10gb),
         one 1g.5gb free
  GPU 4  time-sliced into 4 replicas: serving/chat-0, -1 and -2 share it, each pod's memory
         and utilization on its own (nvidia_gpu_pod_*, from the pod watch); chat-2 barely
         uses its share                                   → GPUAllocatedIdle serving/chat;
         at 2:30 the driver reports Xid 109 and asks for a GPU reset
         → GPUXidErrors, GPURecoveryActionRequired (nvidia_gpu_action_required: reset_gpu)
Around the node, the cluster view shows GPU pods that wait: ml/llm-sft-0 (2 GPUs, one free
on each of four nodes: fragmented), ml/pretrain-70b-0 (8 GPUs: the only empty node is
tainted), and the research namespace's Job whose GPU quota is used up. In Kueue's queue
ml-cq, whose 8 GPUs are in use, the Job ml/llm-eval (8 GPUs) has waited 70 minutes to be
admitted: suspended, no pod                              → KubeGpuWorkloadPendingTooLong
At 4:30 the demo writes the weekly report (kube-gpu-exporter report) of the story so far.
Expect the first alerts within about 75 seconds. Ctrl-C stops everything."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default=str(SCENARIO),
        help="the simulated node and its kubelet's pods (default: the demo story)",
    )
    parser.add_argument(
        "--thresholds",
        default=str(THRESHOLDS),
        help="thresholds file for the generated rules (default: the defaults, durations "
        "shortened for the demo)",
    )
    parser.add_argument(
        "--host",
        type=_host,
        default="127.0.0.1",
        help="address every part listens on: an IPv4 address or a host name (default 127.0.0.1)",
    )
    for part, port in PORTS.items():
        parser.add_argument(
            f"--port.{part}",
            dest=f"port_{part}",
            type=_port,
            default=port,
            metavar="PORT",
            help=f"{part} port (default {port})",
        )
    parser.add_argument(
        "--report",
        default=REPORT,
        metavar="FILE",
        help=f"where the weekly report of the story goes once it has been told (default "
        f"{REPORT} in the current folder; '' for none)",
    )
    parser.add_argument(
        "--report-at",
        type=_seconds,
        default=STORY_END_SECONDS,
        metavar="SECONDS",
        help=f"when, into the story, to write the report (default {STORY_END_SECONDS:g}: "
        "once the memory alert has resolved)",
    )
    parser.add_argument(
        "--workdir",
        help="where configs, data and logs go, kept after the demo (default: a temporary "
        "folder, removed at exit unless a part failed)",
    )


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not 0 <= seconds <= 86400:
        raise argparse.ArgumentTypeError(f"{value}: out of range 0–86400 seconds")
    return seconds


def _host(value: str) -> str:
    """The listen host of every part, checked as the listen flags check theirs (units.py); the
    demo writes `host:port` into its parts' flags and URLs, so an IPv6 address cannot be one."""
    try:
        host = parse_host(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not host or ":" in host:
        raise argparse.ArgumentTypeError(
            f"the demo needs an IPv4 address or a host name: {value!r}"
        )
    return host


def _port(value: str) -> int:
    try:
        return parse_port(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from kube_gpu_exporter.demo.stack import Ports, Stack, StackSpec
    from kube_gpu_exporter.exporter.input_errors import InputError
    from kube_gpu_exporter.exporter.output_paths import check_output_dir, check_output_file
    from kube_gpu_exporter.rules.config import load_config

    try:  # checked before anything starts; a temporary folder is always writable
        if args.workdir:
            check_output_dir(args.workdir, "--workdir")
        if args.report:
            check_output_file(args.report, "--report")
    except InputError as exc:
        print(f"kube-gpu-exporter demo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kgx-demo-"))
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    failed = True
    try:
        spec = StackSpec(
            scenario=Path(args.scenario),
            thresholds=load_config(args.thresholds),
            workdir=workdir,
            host=args.host,
            ports=Ports(**{part: getattr(args, f"port_{part}") for part in PORTS}),
            cluster=True,
        )
        with Stack(spec) as stack:
            _say(_banner(stack, keep=bool(args.workdir)))
            report = functools.partial(weekly_report, stack, args.report, args.thresholds)
            failed = _watch(stack, stop, report if args.report else None, args.report_at)
        _say("\nstopped the exporter, the cluster view, the kubelet, Prometheus and Alertmanager")
        return EXIT_FAILED if failed else 0
    except InputError as exc:  # the thresholds (ConfigError), the scenario, a port taken
        print(f"kube-gpu-exporter demo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not args.workdir:
            if failed and any(workdir.glob("*.log")):
                _say(f"the logs are kept in {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _banner(stack: Stack, keep: bool) -> str:
    from kube_gpu_exporter.demo.cluster_story import FRAGMENTED_POD

    kept = "kept" if keep else "removed at exit; --workdir DIR keeps them"
    alertmanager = stack.url("alertmanager")
    return (
        "kube-gpu-exporter demo is up:\n"
        f"  exporter      {stack.url('exporter')}/metrics\n"
        f"  cluster view  {stack.url('cluster')}/metrics\n"
        f"  Prometheus    {stack.url('prometheus')}{stack.prometheus_alerts}{_no_ui(stack)}\n"
        f"  running       {stack.monitoring.describe() if stack.monitoring else '?'}\n"
        f"  alerts        {stack.url('alerts')}/  (what Alertmanager holds; or: amtool "
        f"--alertmanager.url={alertmanager} alert query)\n"
        f"  work folder   {stack.spec.workdir}  (configs, data, logs; {kept})\n"
        f"  kubeconfig    {stack.kubeconfig}  (the demo's API server)\n\n"
        f"Why a GPU pod waits (kube-gpu-exporter explain --kubeconfig={stack.kubeconfig} "
        f"-n {FRAGMENTED_POD[0]} {FRAGMENTED_POD[1]}):\n{_explain(stack)}\n{STORY}\n"
    )


def _no_ui(stack: Stack) -> str:
    """Why the Prometheus address is its API: a binary built without its web UI."""
    if stack.prometheus_alerts.startswith("/api/"):
        return "  (this build has no web UI: its alerts API)"
    return ""


def _explain(stack: Stack) -> str:
    """`explain`'s report on the fragmented pod, indented, as a user would see it."""
    from kube_gpu_exporter.demo.cluster_story import FRAGMENTED_POD

    namespace, name = FRAGMENTED_POD
    args = ["explain", "-n", namespace, name, f"--kubeconfig={stack.kubeconfig}", "--color=never"]
    done = _cli(args, EXPLAIN_SECONDS)
    if done is None:
        return "  (explain did not answer)\n"
    text = done.stdout or done.stderr
    return "".join(f"  {line}\n" for line in text.strip().splitlines())


def _cli(args: list[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """`kube-gpu-exporter ARGS` as a user runs it, its output captured; None on timeout."""
    from kube_gpu_exporter.demo.stack import EXPORTER

    try:
        return subprocess.run([*EXPORTER, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def weekly_report(stack: Stack, out: str, thresholds: str) -> None:
    """`kube-gpu-exporter report` over the story so far, from the demo's Prometheus, as a
    platform lead would run it each week (`--since 7d`); says where it went, or why not."""
    # The story so far, and at least the shortest period a report takes.
    minutes = max(REPORT_MIN_MINUTES, math.ceil((time.monotonic() - stack.story_started) / 60))
    args = [
        "report",
        f"--prometheus={stack.url('prometheus')}",
        f"--since={minutes}m",
        f"--thresholds={thresholds}",
        f"--out={out}",
    ]
    done = _cli(args, REPORT_SECONDS)
    if done is None:
        _say("the weekly report did not finish in time")
        return
    if done.returncode == 0:
        _say(f"the weekly report, of the story's last {minutes} minutes: {Path(out).resolve()}")
    else:
        _say(
            f"no report: {done.stderr.strip().splitlines()[-1] if done.stderr else done.returncode}"
        )


def _watch(
    stack: Stack, stop: threading.Event, report: Callable[[], None] | None, report_at: float
) -> bool:
    """Print alerts as Alertmanager gets and resolves them, and once the story has been told
    write the `report` (in its own thread: alerts keep coming meanwhile); True if a part
    died."""
    active: dict[tuple[str, ...], str] = {}
    told = False
    refused_at = 0.0
    while not stop.wait(POLL_SECONDS):
        dead = stack.exited()
        if dead is not None:
            _say(f"{dead} exited unexpectedly; its log: {stack.children.log_path(dead)}")
            return True
        elapsed = time.monotonic() - stack.story_started
        if elapsed - refused_at >= REFUSAL_SECONDS and stack.record_refusal():
            refused_at = elapsed
        if elapsed >= report_at and not told:
            told = True
            if report is not None:
                threading.Thread(target=report, name="report", daemon=True).start()
        try:
            alerts = stack.alerts()
        except OSError:
            continue
        now = {_key(a): a["annotations"].get("summary", "") for a in alerts}
        stamp = f"[{int(elapsed) // 60}:{int(elapsed) % 60:02d}]"
        for key in sorted(now.keys() - active.keys()):
            _say(f"{stamp} firing    {_describe(key)}  {now[key]}")
        for key in sorted(active.keys() - now.keys()):
            _say(f"{stamp} resolved  {_describe(key)}")
        active = now
    return False


def _say(text: str, file: TextIO | None = None) -> None:
    """Print, unless the terminal has gone (closed: the demo still stops its parts)."""
    with contextlib.suppress(OSError):
        print(text, file=file or sys.stdout, flush=True)


def _key(alert: dict[str, Any]) -> tuple[str, ...]:
    labels = alert["labels"]
    who = labels.get("pod") or labels.get("workload", "")  # a workload's alert has no pod
    return (labels["alertname"], labels.get("namespace", ""), who, labels.get("gpu", ""))


def _describe(key: tuple[str, ...]) -> str:
    name, namespace, pod, gpu = key
    where = f"{namespace}/{pod}" if pod else ""
    return " ".join(part for part in (name, where, f"GPU {gpu}" if gpu else "") if part)
