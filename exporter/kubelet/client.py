"""The kubelet pod-resources v1 client: which container holds which GPU.

The kubelet serves `PodResourcesLister` on a unix socket. `PodResourcesClient.list()` asks it
for the node's allocations (List) and allocatable devices (GetAllocatableResources) and turns
the answer into small immutable values; every failure becomes one `PodResourcesError` with a
kind that a metric can count. `PodResourcesWatcher` calls it on its own interval, so a slow or
restarting kubelet never delays a scrape, and it refuses to hand out an answer so old that the
pods in it may be gone.

Device ids are kept verbatim (`GPU-…`, `MIG-…`, `<id>::<n>` replicas, GKE's `nvidiaN`): mapping
them to NVML devices is attribution's job, not the transport's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

from grpclib.client import Channel, UnaryUnaryMethod
from grpclib.const import Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from kube_gpu_exporter.exporter.catalog.errors import (
    POD_RESOURCES_ERROR_KINDS,
    PodResourcesErrorKind,
)
from kube_gpu_exporter.exporter.kubelet import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from kube_gpu_exporter.exporter.kubelet.listing import (
    Listing,
    ResourceFilter,
    parse_allocatable,
    parse_allocations,
)
from kube_gpu_exporter.exporter.kubelet.wire import WireError, decode_allocatable, decode_list

log = logging.getLogger(__name__)

# gRPC's default receive limit (4 MiB) broke dcgm-exporter on a 4.7 MB answer (its #509);
# Kubernetes' own e2e client uses 16 MiB.
MAX_RECEIVE_MESSAGE_LENGTH: Final = 16 << 20


_Response = TypeVar("_Response")
# The service's path, as v1/api.proto names it (package v1; a test holds it to the stubs').
SERVICE: Final = "/v1.PodResourcesLister/"


class PodResourcesError(Exception):
    """A failed conversation with the kubelet; `kind` is one of POD_RESOURCES_ERROR_KINDS."""

    def __init__(self, kind: PodResourcesErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: PodResourcesErrorKind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def classify(code: Status, details: str) -> PodResourcesErrorKind:
    """Map a gRPC status to the error kind we count.

    RESOURCE_EXHAUSTED means two different things: the kubelet's rate limiter ("rejected by
    rate limit") or our own receive limit ("Received message larger than max"); only the
    message tells them apart.
    """
    if code is Status.UNAVAILABLE:
        return "unavailable"
    if code is Status.DEADLINE_EXCEEDED:
        return "timeout"
    if code is Status.RESOURCE_EXHAUSTED:
        return "too_large" if "larger than max" in details.lower() else "rate_limited"
    return "other"


# Failures of the conversation itself, which fail the whole listing; any other answer to
# GetAllocatableResources only means the kubelet will not tell.
_TRANSPORT_FAILURES: Final = frozenset(
    {
        Status.UNAVAILABLE,
        Status.DEADLINE_EXCEEDED,
        Status.RESOURCE_EXHAUSTED,
        Status.CANCELLED,
    }
)


# What a kubelet that cannot list allocatable devices answers: UNIMPLEMENTED before 1.21,
# UNKNOWN on 1.21–1.22 with the KubeletPodResourcesGetAllocatable gate off. Expected there;
# any other refusal (PERMISSION_DENIED, INTERNAL, …) is a fault, counted as
# `allocatable_refused`: it silences the advertised-device alerts.
_CANNOT_TELL: Final = frozenset({Status.UNIMPLEMENTED, Status.UNKNOWN})


class _CallFailed(Exception):
    """One call's failure as a gRPC status, whatever layer it came from."""

    def __init__(self, code: Status, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _WireCodec(CodecBase):
    """The kubelet's messages as wire.py reads them, with no protobuf runtime: both requests are
    empty messages (no bytes), and the answer's "type" is the function that decodes it.

    An answer over MAX_RECEIVE_MESSAGE_LENGTH is refused as grpcio does (RESOURCE_EXHAUSTED,
    "larger than max"): grpclib itself sets no limit. It is read before its size is judged; the
    kubelet is the node's own, and its answer is the one thing read here. Passing a codec also
    keeps grpclib from importing googleapis' status types.
    """

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return b""

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > MAX_RECEIVE_MESSAGE_LENGTH:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({len(data)} vs. {MAX_RECEIVE_MESSAGE_LENGTH})",
            )
        return message_type(data)


class PodResourcesClient:
    """Async client for the kubelet's pod-resources socket (grpclib: gRPC on asyncio and h2,
    in pure Python; grpcio's C core cost ~10 MiB of every node's exporter to import).

    The channel is created on first use and again after an UNAVAILABLE error: the kubelet
    replaces its socket file when it restarts, and a new channel connects to the new file at
    once (grpclib keeps no reconnect backoff of its own).

    Meant for one caller at a time (the watcher): a call may close the channel.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout: float = 5.0,
        resource_patterns: Sequence[str] = DEFAULT_RESOURCE_PATTERNS,
    ) -> None:
        self.path = os.path.abspath(socket_path)
        self.target = "unix://" + self.path
        self.timeout = timeout
        self._wanted = ResourceFilter(resource_patterns)
        self._channel: Channel | None = None
        self._allocatable_refusal: Status | None = None

    def _open(self) -> Channel:
        if self._channel is None:
            self._channel = Channel(path=self.path, codec=_WireCodec())
        return self._channel

    def _allocatable_refused(self, err: _CallFailed) -> None:
        """Log once per kind of refusal: it lasts as long as the kubelet's version or gate."""
        code = err.code
        if code is not self._allocatable_refusal:
            self._allocatable_refusal = code
            log.log(
                logging.INFO if code in _CANNOT_TELL else logging.WARNING,
                "kubelet cannot list allocatable devices (%s: %s); the advertised counts are "
                "left out, attribution goes on",
                code.name,
                err.details,
            )

    async def close(self) -> None:
        """Close the channel; the next `list()` opens a new one."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    async def _call(
        self, name: str, decode: Callable[[bytes], _Response], deadline: float
    ) -> _Response:
        """One unary call (an empty request) within `deadline`; every failure becomes a
        `_CallFailed`."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise PodResourcesError("timeout", f"no time left for {name} within {self.timeout}s")
        method: UnaryUnaryMethod[bytes, _Response] = UnaryUnaryMethod(
            self._open(),
            SERVICE + name,
            bytes,
            decode,  # type: ignore[arg-type]
        )
        try:
            return await method(b"", timeout=remaining)
        except WireError as err:
            # what grpcio answers when its deserializer fails
            raise _CallFailed(Status.INTERNAL, f"Exception deserializing response: {err}") from None
        except GRPCError as err:
            raise _CallFailed(err.status, err.message or "") from None
        except TimeoutError:
            raise _CallFailed(Status.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except (OSError, StreamTerminatedError, ProtocolError) as err:
            # No socket, nobody listening, or the kubelet went away mid-call.
            raise _CallFailed(Status.UNAVAILABLE, f"{type(err).__name__}: {err}") from None

    async def list(self) -> Listing:
        """List the node's allocations and allocatable devices, within `timeout` in all.

        Raises PodResourcesError. A kubelet that cannot answer GetAllocatableResources —
        UNIMPLEMENTED before 1.21, UNKNOWN on 1.21–1.22 with its feature gate off, any answer
        but a transport failure — yields `allocatable` None: the advertised counts are unknown,
        the allocations are still good.
        """
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            listed = await self._call("List", decode_list, deadline)
            allocatable: Mapping[str, tuple[str, ...]] | None = None
            refused = False
            try:
                answer = await self._call("GetAllocatableResources", decode_allocatable, deadline)
                allocatable = parse_allocatable(answer, self._wanted)
                self._allocatable_refusal = None  # answered: a later refusal is news again
            except _CallFailed as err:
                if err.code in _TRANSPORT_FAILURES:
                    raise
                self._allocatable_refused(err)
                refused = err.code not in _CANNOT_TELL
        except _CallFailed as err:
            code, details = err.code, err.details
            if code is Status.UNAVAILABLE:
                await self.close()
            message = f"{code.name}: {details}"
            if code is Status.DEADLINE_EXCEEDED:
                message += f" (timeout {self.timeout:g}s)"
            raise PodResourcesError(classify(code, details), message) from None
        allocations, dra = parse_allocations(listed, self._wanted)
        return Listing(allocations, dra, allocatable, allocatable_refused=refused)


class ListingSource(Protocol):
    """Anything that lists like the kubelet: PodResourcesClient, or a simulated node."""

    async def list(self) -> Listing: ...


class PodResourcesWatcher:
    """Refreshes the kubelet's listing on its own interval, off the scrape path.

    Attribution reads `latest`, which never waits on the kubelet. After a failure the next
    try comes after 1 s, doubling, but never later than one interval. The last good listing is
    kept through short outages, but not beyond `STALE_AFTER_INTERVALS` intervals: by then pods
    may be gone, and series attributed to a pod that no longer exists are a defect, whereas
    missing attribution is only a gap.

    An answer that drops every allocation at once, after one that had some, is believed only
    when another answer at least `CONFIRM_EMPTY` later says so too (asked that soon): a
    restarted kubelet answers with no pods until its pod manager has them back from the API
    server, and believing it would end every pod's series for an interval and restart every
    alert's `for` (a real kubelet 1.37 answers so for about a second). A drained node is
    believed that much later.

    The age is measured on `clock`, a monotonic clock: a wall-clock step (NTP, a VM resumed)
    must neither withhold a fresh listing nor pass off an old one. `last_success` is the wall
    time of the last success, for the metric that exposes it.

    `stop()` does not close the source; whoever created the client closes it.
    """

    STALE_AFTER_INTERVALS: Final = 3
    INITIAL_BACKOFF: Final = 1.0
    CONFIRM_EMPTY: Final = 2.0

    def __init__(
        self,
        client: ListingSource,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self.interval = interval
        self._clock = clock
        self._wall_clock = wall_clock
        self._listing: Listing | None = None
        self._listed_at = 0.0  # on `clock`
        self.up = False
        self.last_success = 0.0  # on `wall_clock`: a Unix timestamp
        self.errors_total: Counter[str] = Counter({kind: 0 for kind in POD_RESOURCES_ERROR_KINDS})
        self._failing: PodResourcesErrorKind | None = None
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._emptied_at: float | None = None  # on `clock`: an empty answer, not yet believed

    @property
    def latest(self) -> Listing | None:
        """The last good listing, or None if there was none or it is too old to trust."""
        if self._listing is None:
            return None
        if self._clock() - self._listed_at > self.STALE_AFTER_INTERVALS * self.interval:
            return None
        return self._listing

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="podresources")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def refresh(self) -> bool:
        """One try: ask the kubelet and record the outcome. True on success."""
        try:
            listing = await self._client.list()
        except PodResourcesError as err:
            self._failed(err.kind, str(err), traceback=False)
            return False
        except Exception as err:
            # A bug, not a kubelet fault: keep its traceback, and keep the watcher running.
            self._failed("other", f"{type(err).__name__}: {err}", traceback=True)
            return False
        if listing.allocatable_refused:
            self.errors_total["allocatable_refused"] += 1
        self.up = True  # before the listing is out: a cycle that reads it reads this as up
        if self._unconfirmed_empty(listing):
            return True
        self._listing = listing
        self._listed_at = self._clock()
        self.last_success = self._wall_clock()
        if self._failing is not None:
            log.info("kubelet pod-resources recovered after %d failed tries", self._failures)
        self._failing = None
        self._failures = 0
        return True

    def _unconfirmed_empty(self, listing: Listing) -> bool:
        """Whether `listing` empties a listing that held devices and is not yet confirmed
        (see the class's docstring); the last listing is kept meanwhile, ageing as usual."""
        held = self._listing is not None and (self._listing.allocations or self._listing.dra)
        if not held or listing.allocations or listing.dra:
            self._emptied_at = None
            return False
        now = self._clock()
        if self._emptied_at is None:
            self._emptied_at = now
            log.info("kubelet pod-resources lists no pods now; asking again before believing it")
            return True
        if now - self._emptied_at < self.CONFIRM_EMPTY:
            return True
        self._emptied_at = None
        return False

    def _failed(self, kind: PodResourcesErrorKind, reason: str, traceback: bool) -> None:
        self.up = False
        self.errors_total[kind] += 1
        self._failures += 1
        if kind != self._failing:
            log.warning("kubelet pod-resources failed: %s", reason, exc_info=traceback)
        self._failing = kind

    def _retry_delay(self) -> float:
        if self._emptied_at is not None:
            return min(self.INITIAL_BACKOFF, self.interval)
        if self._failures == 0:
            return self.interval
        backoff = self.INITIAL_BACKOFF * 2.0 ** min(self._failures - 1, 30)
        return min(backoff, self.interval)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.refresh()
            elapsed = loop.time() - started
            await asyncio.sleep(max(0.0, self._retry_delay() - elapsed))
