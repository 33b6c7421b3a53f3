"""prometheus-client's own `start_http_server` serving the node's metrics, for comparison.

Run as a subprocess by bench/run.py with the fake NVML in its environment: a second
collection cycle a second after the first gives a fixed snapshot (with the series that need two
readings), and the stock threaded WSGI server renders (and gzips) it on every request, as an
exporter built the usual way would. The difference from ours is then
the serving model alone, since the families and the encoder are the same.

Usage: client_server.py PORT
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Metric, start_http_server
from prometheus_client.registry import Collector

from kube_gpu_exporter.exporter.exposition.snapshot_families import SnapshotCollector
from kube_gpu_exporter.exporter.nvml.sampler import NvmlSampler
from kube_gpu_exporter.exporter.serve.collection import CollectionLoop
from kube_gpu_exporter.exporter.snapshot import Snapshot


class FixedSnapshot(Collector):
    """The exporter's own collector behind prometheus-client's Collector interface."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._collector = SnapshotCollector(snapshot)

    def collect(self) -> Iterator[Metric]:
        yield from self._collector.collect()


def main(port: int) -> None:
    loop = CollectionLoop(NvmlSampler(watch_xids=False), 5.0)
    loop.cycle()
    time.sleep(1.0)
    # the second cycle's: rates (GPM activity, NVLink throughput) need two readings, and the
    # snapshot should hold every series ours serves
    snapshot = loop.cycle().snapshot
    if not snapshot.node.nvml_up:
        sys.exit("client_server: the fake NVML did not answer")
    registry = CollectorRegistry()
    registry.register(FixedSnapshot(snapshot))
    start_http_server(port, addr="127.0.0.1", registry=registry)
    threading.Event().wait()  # serve until the bench terminates us


if __name__ == "__main__":
    main(int(sys.argv[1]))
