"""The next page of a list, fetched while the last one is decoded.

A paged list is a chain: each page's `continue` token asks for the next. Read one page,
decode it, then ask for the next, and the API server and this process take turns: the server
reads etcd and encodes while this process waits, and the other way round (bench/README.md
has the figures). The token sits in the page's metadata, so it is read first (the decoder's
`token`, which skips the items) and the next page is asked for at once of the list's one
worker thread; the API server encodes it while the list's own thread decodes. At most one
page is fetched ahead, so at most two pages of raw JSON are held at a time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

Fetch = Callable[[Mapping[str, Any]], bytes]


class Prefetch:
    """One page asked for ahead: `result` waits for it and returns its bytes, or raises what
    its fetch raised."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params
        self._data = b""
        self._error: BaseException | None = None
        self._done = threading.Event()

    def run(self, fetch: Fetch) -> None:
        try:
            self._data = fetch(self.params)
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


class PageFetcher:
    """The one thread that fetches a list's pages ahead, in the order they are asked for.

    A daemon (a stuck request never holds the exit), started with the first page asked for,
    so a list of one page starts none; `close` lets it end once what was asked is fetched.
    """

    def __init__(self, name: str, fetch: Fetch) -> None:
        self._name = name
        self._fetch = fetch
        self._asked: queue.SimpleQueue[Prefetch | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def ask(self, params: Mapping[str, Any]) -> Prefetch:
        prefetch = Prefetch(params)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"{self._name}-next-page", daemon=True
            )
            self._thread.start()
        self._asked.put(prefetch)
        return prefetch

    def close(self) -> None:
        if self._thread is not None:
            self._asked.put(None)

    def __enter__(self) -> PageFetcher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self) -> None:
        while (prefetch := self._asked.get()) is not None:
            prefetch.run(self._fetch)
