"""`serve --health.node-conditions` and `--health.node-taint`: the GPU health of the latest
snapshot (node_condition.py) written on the exporter's own Node, beside collection, never in it.

It reads what collection already has, so it adds no NVML call; it writes only when the
condition's content (status, reason, message) or the taint changes, plus a heartbeat: the
condition is written again every --health.heartbeat-interval (5 minutes, as
node-problem-detector's default) with a new lastHeartbeatTime, so that a reader can tell a
condition whose exporter is gone by its age. lastTransitionTime moves only when the status
does, and is kept across restarts (read back from the Node at start).

The taint (NoSchedule) is on while a GPU needs a reset or more (False with such a reason), off
when the condition turns True, and left as it is while the condition is Unknown: an exporter
that cannot read NVML must not let pods onto a GPU it last saw broken.

The API calls run on a thread of their own, so a slow or unreachable API server delays these
writes and nothing else. A failure is counted (collection_errors_total{kind="node_health_*"}),
logged once when it begins and once when writes succeed again, and retried with backoff: a
missing RBAC grant or an API server away never ends the exporter or floods its log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from kube_gpu_exporter.exporter.catalog.errors import NODE_HEALTH_ERROR_KINDS
from kube_gpu_exporter.exporter.kubernetes.api_errors import classify as watch_kind
from kube_gpu_exporter.exporter.kubernetes.api_errors import status_code, summary
from kube_gpu_exporter.exporter.serve.collection import Worker
from kube_gpu_exporter.exporter.serve.node_condition import CONDITION_TYPE, GpuHealth, gpu_health
from kube_gpu_exporter.exporter.snapshot import Snapshot

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.kubernetes.node_status import NodeStatus

log = logging.getLogger(__name__)

MAX_BACKOFF: Final = 300.0  # seconds between attempts while they fail


class NodeHealthReporter:
    """Writes the GPUHealthy condition (`conditions`) and the taint (`taint_key`, None for
    none) of `latest()`'s snapshot on the Node behind `status`, every `interval`."""

    def __init__(
        self,
        status: NodeStatus,
        latest: Callable[[], Snapshot | None],
        interval: float,
        *,
        conditions: bool = True,
        taint_key: str | None = None,
        heartbeat: float = 300.0,
    ) -> None:
        self._status = status
        self._latest = latest
        self._interval = interval
        self._conditions = conditions
        self._taint_key = taint_key
        self._heartbeat = heartbeat
        self._worker = Worker("node-health")
        self._task: asyncio.Task[None] | None = None
        # counted on the worker thread, read by the collector's
        self._lock = threading.Lock()
        self._errors = dict.fromkeys(NODE_HEALTH_ERROR_KINDS, 0)
        # What the Node holds as far as we know: None until read (the condition) or set
        # (the taint); the monotonic time of the last condition write, for the heartbeat.
        self._written: Mapping[str, Any] | None = None
        self._written_at = 0.0
        self._taint: str | bool | None = False  # False: not known; None: no taint
        self._taint_checked_at = 0.0
        self._failing: dict[str, str] = {}  # part → the kind of its ongoing failure
        self._failures = 0
        self._next_attempt = 0.0

    def errors_total(self) -> dict[str, int]:
        """node_health_<kind> → count, every kind from 0 (for the collection errors)."""
        with self._lock:
            return {f"node_health_{kind}": n for kind, n in self._errors.items()}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="node-health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._worker.stop()

    async def _run(self) -> None:
        while True:
            snapshot = self._latest()
            if snapshot is not None and time.monotonic() >= self._next_attempt:
                health = gpu_health(snapshot)
                await asyncio.wrap_future(self._worker.submit(partial(self.sync, health)))
            await asyncio.sleep(self._interval)

    def sync(self, health: GpuHealth) -> None:
        """Bring the Node to `health` (on the worker thread); failures are counted, logged
        when they begin, and put the next attempt off."""
        ok = True
        if self._conditions:
            ok &= self._attempt("condition", lambda: self._sync_condition(health))
        if self._taint_key is not None:
            ok &= self._attempt("taint", lambda: self._sync_taint(health))
        if ok:
            self._failures = 0
            self._next_attempt = 0.0
        else:
            self._failures += 1
            backoff = min(self._interval * 2 ** min(self._failures - 1, 16), MAX_BACKOFF)
            self._next_attempt = time.monotonic() + backoff

    def _attempt(self, part: str, call: Callable[[], None]) -> bool:
        try:
            call()
        except Exception as exc:
            kind = classify(exc)
            with self._lock:
                self._errors[kind] += 1
            if self._failing.get(part) != kind:
                self._failing[part] = kind
                log.warning(
                    "cannot write the node's GPU %s (%s): %s; retrying with backoff, "
                    "metrics are served as before",
                    part,
                    kind,
                    summary(exc),
                )
            return False
        if self._failing.pop(part, None) is not None:
            log.info("the node's GPU %s is written again", part)
        return True

    def _sync_condition(self, health: GpuHealth) -> None:
        if self._written is None:
            self._written = self._status.condition(CONDITION_TYPE) or {}
            self._written_at = -float("inf")  # a restart writes once: a fresh heartbeat
        content = {"status": health.status, "reason": health.reason, "message": health.message}
        same = all(self._written.get(k) == v for k, v in content.items())
        beat_due = self._heartbeat > 0 and time.monotonic() - self._written_at >= self._heartbeat
        if same and not beat_due:
            return
        now = _rfc3339(time.time())
        moved = self._written.get("status") != health.status
        condition = {
            "type": CONDITION_TYPE,
            **content,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now if moved else self._written.get("lastTransitionTime", now),
        }
        try:
            self._status.write_condition(condition)
        except Exception:
            self._written = None  # read back before the next write
            raise
        self._written, self._written_at = condition, time.monotonic()

    def _sync_taint(self, health: GpuHealth) -> None:
        if health.status == "Unknown":
            return  # kept as it is (above)
        wanted = health.reason if health.needs_reset else None
        recheck = self._heartbeat > 0 and (
            time.monotonic() - self._taint_checked_at >= self._heartbeat
        )
        if wanted == self._taint and not recheck:
            return
        assert self._taint_key is not None
        self._taint = False
        if self._status.set_taint(self._taint_key, wanted):
            log.info("taint %s: %s", self._taint_key, wanted or "removed")
        self._taint, self._taint_checked_at = wanted, time.monotonic()


def classify(exc: BaseException) -> str:
    """The node_health kind of a failed read or write."""
    named = {403: "forbidden", 404: "not_found", 409: "conflict"}
    code = status_code(exc)
    if code in named:
        return named[code]
    kind = watch_kind(exc)
    return kind if kind in NODE_HEALTH_ERROR_KINDS else "other"


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
