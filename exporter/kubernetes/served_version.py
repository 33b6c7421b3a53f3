"""A list or watch request on the first API version the server serves, for a group an
optional component adds (DRA's ResourceSlices, Kueue's queues) under versions that change.

The request goes to the version that answered last; a 404 moves on to the next, and when no
version is served it raises `list_watch.NotServed`, so the watch idles instead of failing
and looks again later (the component may be installed then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kube_gpu_exporter.exporter.kubernetes.api_errors import status_code
from kube_gpu_exporter.exporter.kubernetes.list_watch import NotServed

NOT_FOUND: Final = 404


class ServedVersion:
    """Called as a ListWatch request: `requests` are one per API version, in the order to try
    (newest first); `versions` name them; `absent` is NotServed's message."""

    def __init__(
        self,
        requests: Sequence[Callable[..., Any]],
        versions: Sequence[str],
        absent: str,
    ) -> None:
        self._requests = tuple(requests)
        self._versions = tuple(versions)
        self._absent = absent
        self._at = 0

    @property
    def version(self) -> str:
        """The version asked last (the served one, once a request went through)."""
        return self._versions[self._at]

    def __call__(self, **params: Any) -> Any:
        for _ in self._requests:
            try:
                return self._requests[self._at](**params)
            except Exception as exc:
                if status_code(exc) != NOT_FOUND:
                    raise
            self._at = (self._at + 1) % len(self._requests)
        raise NotServed(self._absent)
