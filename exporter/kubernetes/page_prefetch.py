"""The next page of a list, fetched while the last one is decoded.

A paged list is a chain: each page's `continue` token asks for the next. Read one page,
decode it, then ask for the next, and the API server and this process take turns — at
150,000 pods against a real kube-apiserver, 300 pages of 500, half of the 28.7 s to the first
complete metrics was this process decoding and the other half waiting for the server to
read etcd and encode the next page. The token sits in the page's metadata, so it is read
first (the decoder's `token`, which skips the items) and the next page is asked for at once
in a thread of its own; the API server encodes it while this thread decodes. At most one
page is fetched ahead, so at most two pages of raw JSON are held at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class Prefetch:
    """One `fetch(params)` run in a daemon thread (a stuck request never holds the exit);
    `result` waits for it and returns its bytes, or raises what it raised."""

    def __init__(
        self, name: str, fetch: Callable[[Mapping[str, Any]], bytes], params: Mapping[str, Any]
    ) -> None:
        self._fetch, self._params = fetch, params
        self._data = b""
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name=f"{name}-next-page", daemon=True).start()

    def _run(self) -> None:
        try:
            self._data = self._fetch(self._params)
        except BaseException as exc:  # handed to the thread that reads the result
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> bytes:
        self._done.wait()
        if self._error is not None:
            raise self._error
        data, self._data = self._data, b""
        return data
