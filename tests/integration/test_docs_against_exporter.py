"""What the docs say the running exporter does, held to a running exporter.

docs/troubleshooting.md once quoted a log line from a logger that no longer existed
(`exporter.podresources.client`), and docs/metrics.md listed fewer kinds of
collection_errors_total than the exporter serves. Here the real `serve` runs with every source
that counts errors on and failing the way the guide describes — no NVML library, sysfs that
cannot be read, no kubelet socket, an API server that answers 403 — and:

- every sample log line in the docs (a logfmt line in a ```text block) has a real line of the
  same level and logger whose message starts the same way, up to its second `: `;
- the kinds docs/metrics.md lists are exactly the kinds the exporter serves, and every kind a
  doc's query selects (`kind="…"`, `kind=~"…"`) is one of them.
"""

from __future__ import annotations

import ctypes.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_gpu_exporter.demo.kube_api import NODE, KubeApiServer
from support import Samples, run_exporter, samples, wait_until

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ERRORS = "kube_gpu_exporter_collection_errors_total"
LOGFMT_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
# A logger's lines that the run below provokes: the logger → what makes it log.
PROVOKED = {
    "exporter.nvml.sampler": "no libnvidia-ml.so.1 on the machine",
    "exporter.kubelet.client": "no kubelet socket",
    "exporter.kubernetes.list_watch": "the API server answers 403",
    "exporter.pci_bus": "sysfs without a PCI bus",
}
NVML_PRESENT = ctypes.util.find_library("nvidia-ml") is not None


@dataclass(frozen=True)
class LogLine:
    level: str
    source: str
    msg: str

    @property
    def lead(self) -> str:
        """The message up to its second `: `: what failed and its kind, before the details
        (a path, the API server's own words) that differ between machines."""
        return ": ".join(self.msg.split(": ")[:2])


def parse_logfmt(line: str) -> LogLine:
    fields = {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in LOGFMT_FIELD.findall(line)
    }
    return LogLine(fields["level"], fields["source"], fields["msg"])


def doc_log_lines() -> list[tuple[str, LogLine]]:
    """(doc, line) for every logfmt line in a ```text block of the docs."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```text\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL):
            found += [
                (path.name, parse_logfmt(line))
                for line in block.splitlines()
                if line.startswith("ts=")
            ]
    return found


@dataclass(frozen=True)
class Run:
    log: list[LogLine]
    metrics: Samples


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """`serve` with every error-counting source on and failing as the guide describes."""
    tmp = tmp_path_factory.mktemp("failing")
    (tmp / "sysfs").mkdir()
    with KubeApiServer() as api:
        api.fail(403, times=10_000)
        api.fail(403, times=10_000, resource="resourceslices")
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        args = [
            "--collector.interval=0.5s",
            f"--path.sysfs={tmp / 'sysfs'}",
            f"--kubelet.pod-resources-socket={tmp / 'no-kubelet.sock'}",
            "--kubelet.interval=0.5s",
            "--kubernetes.enabled",
            f"--kubernetes.kubeconfig={kubeconfig}",
            f"--kubernetes.node-name={NODE}",
            "--health.node-conditions",  # its node_health_* kinds, each from 0
        ]
        with run_exporter(args, tmp, wait_ready=False) as exporter:

            def provoked() -> Run | None:
                log = [parse_logfmt(x) for x in exporter.log().splitlines() if x.startswith("ts=")]
                wanted = set(PROVOKED) - ({"exporter.nvml.sampler"} if NVML_PRESENT else set())
                status, _, body = exporter.get()
                if status != 200:  # no cycle has completed yet (NVML absent: it retries)
                    return None
                metrics = samples(body)
                kinds = {dict(labels).get("kind") for name, labels in metrics if name == ERRORS}
                seen = {line.source for line in log}
                return (
                    Run(log, metrics) if wanted <= seen and "pod_resources_other" in kinds else None
                )

            yield wait_until(provoked, timeout=30, what="every provoked log line")


def served_kinds(run: Run) -> set[str]:
    return {dict(labels)["kind"] for name, labels in run.metrics if name == ERRORS}


def test_the_docs_quote_some_log_lines() -> None:
    assert {line.source for _, line in doc_log_lines()} >= {
        "exporter.nvml.sampler",
        "exporter.kubelet.client",
    }


@pytest.mark.parametrize(
    ("doc", "line"), doc_log_lines(), ids=lambda x: x if isinstance(x, str) else x.lead
)
def test_a_sample_log_line_is_what_the_exporter_logs(
    failing_run: Run, doc: str, line: LogLine
) -> None:
    assert line.source in PROVOKED, f"{doc}: no run here provokes {line.source}: add it"
    if line.source == "exporter.nvml.sampler" and NVML_PRESENT:
        pytest.skip("this machine has an NVML library: nothing to fail")
    real = [x for x in failing_run.log if x.source == line.source]
    assert real, f"{doc}: the logger {line.source!r} logged nothing ({PROVOKED[line.source]})"
    matching = [x for x in real if (x.level, x.lead) == (line.level, line.lead)]
    assert matching, f"{doc}: {line} is not among the real lines {real}"


def documented_kinds() -> set[str]:
    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    block = re.search(
        r"<!-- generate:collection-error-kinds -->(.*?)<!-- /generate:", text, re.DOTALL
    )
    assert block, "docs/metrics.md has no generated list of collection error kinds"
    return {
        kind
        for row in block.group(1).splitlines()[3:]
        for kind in re.findall(r"`([a-z_]+)`", row.split(" | ")[0])
    }


def test_metrics_md_lists_exactly_the_kinds_the_exporter_serves(failing_run: Run) -> None:
    assert documented_kinds() == served_kinds(failing_run)


def test_every_kind_a_doc_queries_is_served(failing_run: Run) -> None:
    served = served_kinds(failing_run)
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for op, value in re.findall(r'\bkind(=~?)\\?"([^"\\]+)\\?"', text):
            # `kind="pod_resources_<kind>"` in prose stands for each of those kinds.
            value = value if op == "=~" else re.escape(value).replace("<kind>", "[a-z_]+")
            pattern = re.compile(value)
            assert any(pattern.fullmatch(kind) for kind in served), (
                f"{path.name}: kind{op}{value!r} selects no kind the exporter serves"
            )
        for kind in re.findall(r"`((?:pod_resources|kubernetes)_[a-z_]+)`", text):
            if not kind.startswith("kubernetes_api"):  # kube_gpu_exporter_kubernetes_api_up
                assert kind in served, f"{path.name}: `{kind}` is not a kind the exporter serves"
