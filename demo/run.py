"""`kube-gpu-exporter demo`: start the stack, print where to look, report alerts as they come.

Like `generate`, the subcommand's flags are added by `add_arguments` and `run` does the work;
the stack (gRPC, pydantic, the rules generator) is imported only when the demo runs.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kube_gpu_exporter.exporter.units import parse_port

# The story node lives beside the simulated backend (`serve --simulate` in the image uses it too);
# its thresholds, the defaults with shorter durations, belong to the demo.
SCENARIO = (
    Path(__file__).resolve().parent.parent / "exporter" / "simulated" / "scenarios" / "demo.yaml"
)
THRESHOLDS = Path(__file__).resolve().with_name("thresholds.yaml")
POLL_SECONDS = 5.0
EXIT_FAILED = 1
EXIT_USAGE = 2

STORY = """\
The story (the node is simulated; alerts use the generated rules with shorter durations):
  GPU 0  ml/llm-pretrain-0 trains flat out; from 0:30 it runs hot and throttles
         → GPUTemperatureHigh, GPUThermalThrottling
  GPU 1  lab/notebook-alice holds a whole H100 and leaves it idle       → GPUAllocatedIdle
  GPU 2  ml/finetune-llama's memory climbs towards CUDA OOM            → GPUMemoryNearFull;
         at 4:00 it is restarted with a smaller batch and the alert resolves
  GPU 3  an A100 in MIG instances: ml/embeddings (3g.20gb), lab/notebook-bob (2g.10gb),
         one 1g.5gb free
  GPU 4  time-sliced into 4 replicas, 3 serving pods share it (usage split per process needs
         --kubernetes.enabled in a cluster)
Expect the first alerts in Alertmanager within about two minutes. Ctrl-C stops everything."""


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
        "--host", default="127.0.0.1", help="address every part listens on (default 127.0.0.1)"
    )
    for part, port in (("exporter", 19400), ("prometheus", 19090), ("alertmanager", 19093)):
        parser.add_argument(
            f"--port.{part}",
            dest=f"port_{part}",
            type=_port,
            default=port,
            metavar="PORT",
            help=f"{part} port (default {port})",
        )
    parser.add_argument(
        "--workdir",
        help="where configs, data and logs go (default: a temporary folder, removed at exit)",
    )


def _port(value: str) -> int:
    try:
        return parse_port(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from kube_gpu_exporter.demo.stack import Ports, Stack, StackSpec
    from kube_gpu_exporter.exporter.input_errors import InputError
    from kube_gpu_exporter.exporter.output_paths import check_output_dir
    from kube_gpu_exporter.rules.config import load_config

    if args.workdir:  # checked before anything starts; a temporary folder is always writable
        try:
            check_output_dir(args.workdir, "--workdir")
        except InputError as exc:
            print(f"kube-gpu-exporter demo: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kgx-demo-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        spec = StackSpec(
            scenario=Path(args.scenario),
            thresholds=load_config(args.thresholds),
            workdir=workdir,
            host=args.host,
            ports=Ports(args.port_exporter, args.port_prometheus, args.port_alertmanager),
        )
        with Stack(spec) as stack:
            _banner(stack, workdir)
            failed = _watch(stack, stop)
        print("\nstopped the exporter, the kubelet, Prometheus and Alertmanager")
        return EXIT_FAILED if failed else 0
    except InputError as exc:  # the thresholds (ConfigError), the scenario, a port taken
        print(f"kube-gpu-exporter demo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _banner(stack: Any, workdir: Path) -> None:
    print(
        "kube-gpu-exporter demo is up:\n"
        f"  exporter      {stack.url('exporter')}/metrics\n"
        f"  Prometheus    {stack.url('prometheus')}/alerts\n"
        f"  Alertmanager  {stack.url('alertmanager')}/#/alerts\n"
        f"  logs          {workdir}\n\n{STORY}\n",
        flush=True,
    )


def _watch(stack: Any, stop: threading.Event) -> bool:
    """Print alerts as Alertmanager gets and resolves them; True if a part died."""
    started = time.monotonic()
    active: dict[tuple[str, ...], str] = {}
    while not stop.wait(POLL_SECONDS):
        dead = stack.exited()
        if dead is not None:
            print(f"{dead} exited unexpectedly; its log: {stack.spec.workdir / dead}.log")
            return True
        try:
            alerts = stack.alerts()
        except OSError:
            continue
        now = {_key(a): a["annotations"].get("summary", "") for a in alerts}
        elapsed = time.monotonic() - started
        stamp = f"[{int(elapsed) // 60}:{int(elapsed) % 60:02d}]"
        for key in sorted(now.keys() - active.keys()):
            print(f"{stamp} firing    {_describe(key)}  {now[key]}", flush=True)
        for key in sorted(active.keys() - now.keys()):
            print(f"{stamp} resolved  {_describe(key)}", flush=True)
        active = now
    return False


def _key(alert: dict[str, Any]) -> tuple[str, ...]:
    labels = alert["labels"]
    return tuple(labels.get(k, "") for k in ("alertname", "namespace", "pod", "gpu"))


def _describe(key: tuple[str, ...]) -> str:
    name, namespace, pod, gpu = key
    where = f"{namespace}/{pod}" if pod else ""
    return " ".join(part for part in (name, where, f"GPU {gpu}" if gpu else "") if part)
