"""`kube-gpu-exporter explain POD [-n NAMESPACE] | -f pod.yaml`: why a GPU pod waits, or
whether a manifest would schedule before it is submitted.

The cluster is read once (api.py), a manifest put through the API server's admission by a
dry run (admission.py), the pod classified against the cluster (classify.py) and every check
printed with its evidence (report.py). Exit status: 0 when the pod would schedule (or already
is), 1 when it would not (the reason on the last line; a manifest that admission refuses),
2 on bad input — an unreadable manifest or one the API server finds invalid, a kubeconfig
that does not load, an API server that does not answer, a pod that does not exist — as one
line on stderr, never a traceback. A pending pod that only Kueue's gates hold is explained by
its Workload, as `explain workload/NAME` (kueue_pod.py).

The CLI adds the subcommand's flags with `add_arguments`; this module imports only argparse when
loaded, so other commands do not pay for the cluster view or the kubernetes client.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final

from kube_gpu_exporter.exporter.cluster.flags import add_gpu_flags

PROG: Final = "kube-gpu-exporter"
EXIT_SCHEDULES, EXIT_WAITS, EXIT_USAGE = 0, 1, 2
POD_PREFIXES: Final = ("pod/", "pods/", "po/")  # kubectl's TYPE/NAME form


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument(
        "pod",
        nargs="?",
        metavar="POD",
        help="the pending pod's name; job/NAME or workload/NAME for a Job Kueue queues",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        help="the pod's namespace (default: the kubeconfig context's, else default)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="a manifest (Pod, or a workload's pod template) to check before submitting it "
        "(- reads it from standard input)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use (default $KUBECONFIG's files, merged, or ~/.kube/config, else "
        "in-cluster config)",
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )
    add_gpu_flags(parser)
    parser.add_argument(
        "--all-nodes", action="store_true", help="list every GPU node, not only the first 20"
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the output: auto (on a terminal, unless NO_COLOR is set), always, never",
    )


def run(args: argparse.Namespace) -> int:
    """Explain, print, and return the exit status (see the module docstring)."""
    from kube_gpu_exporter.exporter.cluster.classify import classify
    from kube_gpu_exporter.exporter.cluster.explain import kueue_command, kueue_pod, limits
    from kube_gpu_exporter.exporter.cluster.explain.admission import Admission, admit
    from kube_gpu_exporter.exporter.cluster.explain.api import (
        ApiReader,
        context_namespace,
        default_kubeconfig,
    )
    from kube_gpu_exporter.exporter.cluster.explain.manifest import as_written, read_manifest
    from kube_gpu_exporter.exporter.cluster.explain.report import (
        render,
        render_bound,
        render_refused,
    )
    from kube_gpu_exporter.exporter.cluster.flags import settings_from
    from kube_gpu_exporter.exporter.cluster.parse import parse_pod
    from kube_gpu_exporter.exporter.cluster.view import ClusterView
    from kube_gpu_exporter.exporter.input_errors import InputError

    settings = settings_from(args)
    admitted = not args.filename
    colour = args.color == "always" or (
        args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    )
    admission = Admission()
    kueue_line = ""
    try:
        # a Job or Workload, or a manifest of a Job queued by Kueue: kueue_command.py's
        queued = kueue_command.target(args) if bool(args.pod) != bool(args.filename) else None
        name = _pod_name(args) if queued is None else ""
        kubeconfig = default_kubeconfig(args.kubeconfig, args.context)
        namespace = args.namespace or context_namespace(kubeconfig)
        if queued is not None:
            reader = ApiReader(kubeconfig, settings)
            try:
                return kueue_command.run(args, *queued, reader, namespace, colour)
            finally:
                reader.close()
        if args.filename:
            label = f"manifest {args.filename}"
            manifest = read_manifest(args.filename, namespace)
            pod = as_written(manifest, label)
            if args.namespace and pod.namespace != args.namespace:
                raise InputError(
                    f"the manifest's namespace {pod.namespace} does not match -n {args.namespace}"
                )
        reader = ApiReader(kubeconfig, settings)
        try:
            if admitted:
                pod = reader.pod(namespace, name)
            if admitted and (pod.node_name or pod.terminated):
                print(_placed(pod))
                return EXIT_SCHEDULES
            if admitted:  # a pod Kueue holds is its Workload's to explain (kueue_pod.py)
                workload = kueue_pod.find(reader, pod)
                if workload is not None and kueue_pod.held(pod):
                    print(kueue_pod.held_line(pod, workload))
                    name = kueue_pod.name(workload)
                    return kueue_command.run(args, "workload", name, reader, pod.namespace, colour)
                kueue_line = kueue_pod.admitted_line(workload)
            if not admitted:
                admission = admit(reader, manifest, label)
                if admission.refusal:
                    sys.stdout.write(
                        render_refused(pod, admission.refusal, quota=admission.quota, colour=colour)
                    )
                    return EXIT_WAITS
                if admission.unasked:
                    print(
                        f"{PROG}: note: {admission.unasked}: the manifest is judged as written, "
                        "without the API server's admission",
                        file=sys.stderr,
                    )
                elif admission.pod is not None:
                    manifest = admission.pod
                    pod = parse_pod(manifest) or pod
            cluster = reader.cluster(pod.namespace)
        finally:
            reader.close()
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not admitted and pod.node_name:
        sys.stdout.write(render_bound(pod, any(n.name == pod.node_name for n in cluster.nodes)))
        return EXIT_SCHEDULES if any(n.name == pod.node_name for n in cluster.nodes) else EXIT_WAITS
    view = ClusterView.build(cluster.nodes, cluster.pods, cluster.quotas, settings)
    # a pod the dry run admitted has passed every quota; one judged as written has not
    result = classify(view, pod, admitted=admitted or admission.pod is not None)
    unchecked: tuple[str, ...] = ()
    preempting: tuple[str, ...] = ()
    if not admitted:
        unchecked = limits.unchecked(manifest, pod)
        preempting = limits.preemptible(view, manifest, pod, result)
    sys.stdout.write(kueue_line)
    sys.stdout.write(
        render(
            view,
            pod,
            result,
            admitted=admitted,
            colour=colour,
            all_nodes=args.all_nodes,
            unchecked=unchecked,
            preempting=preempting,
        )
    )
    return EXIT_SCHEDULES if result.schedulable else EXIT_WAITS


def _pod_name(args: argparse.Namespace) -> str:
    """The POD argument (TYPE/NAME accepted); exactly one of POD and -f must be given."""
    from kube_gpu_exporter.exporter.input_errors import InputError, quoted

    if bool(args.pod) == bool(args.filename):
        raise InputError("explain takes a POD name or -f FILE (one of them)")
    name = str(args.pod or "")
    for prefix in POD_PREFIXES:
        name = name.removeprefix(prefix)
    if args.pod and (not name or "/" in name):
        raise InputError(f"not a pod name: {quoted(args.pod)}")
    return name


def _placed(pod: Any) -> str:
    if pod.node_name:
        return f"pod {pod.namespace}/{pod.name} is scheduled on {pod.node_name} ({pod.phase})"
    return f"pod {pod.namespace}/{pod.name} has ended ({pod.phase}); nothing to schedule"
