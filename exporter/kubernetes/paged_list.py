"""Every object of a Kubernetes list, read page after page: the one list path of the watches
(list_watch.py) and of `explain` (cluster/explain/api.py).

A list asked for with `limit` comes in pages chained by their `continue` token, as
client-go's pager reads it. The next page is asked for while this one is decoded
(page_prefetch.py), and a page's raw JSON is let go once its items are read, so a list of the
whole cluster is never in memory as JSON at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from kube_gpu_exporter.exporter.kubernetes.api_errors import check_status
from kube_gpu_exporter.exporter.kubernetes.client import Request
from kube_gpu_exporter.exporter.kubernetes.decoding import JSON, Decoder
from kube_gpu_exporter.exporter.kubernetes.page_prefetch import Fetch, PageFetcher, Prefetch

# Lists come in pages of this many objects, so only a page or two of raw JSON is held at a
# time (a real node object carries its image list, tens of KiB; a pod its whole spec).
PAGE: Final = 500


def read_body(request: Request, params: Mapping[str, Any]) -> bytes:
    """One request's whole body; a non-2xx answer raises (api_errors.py)."""
    response = request(_preload_content=False, **params)
    try:
        check_status(response)
        return bytes(response.data)
    except BaseException:
        response.close()  # never hand a half-read connection back to the pool
        raise
    finally:
        response.release_conn()


def _always() -> bool:
    return True


class PagedList:
    """The items of the list that `fetch(params)` reads, in order, as `decoder` gives them;
    after the last, `version` is the list's resourceVersion.

    Each page's `continue` token is followed while `follow()` says so (a watch being stopped,
    or one that reads the list unpaged, says no), the next page asked for of one worker
    thread before this one is decoded.
    """

    def __init__(
        self,
        name: str,
        fetch: Fetch,
        params: Mapping[str, Any],
        decoder: Decoder = JSON,
        *,
        follow: Callable[[], bool] = _always,
    ) -> None:
        self._name = name
        self._fetch = fetch
        self._params = params
        self._decoder = decoder
        self._follow = follow
        self.version = ""

    def __iter__(self) -> Iterator[Any]:
        params = dict(self._params)
        data = self._fetch(params)
        with PageFetcher(self._name, self._fetch) as fetcher:
            while True:
                ahead = self._ask_ahead(fetcher, data, params)
                page = self._decoder.page(data)
                del data
                yield from page.items
                self.version = page.version
                token = page.token
                if not token or not self._follow():
                    return
                del page
                params["_continue"] = token
                data = ahead[1].result() if ahead and ahead[0] == token else self._fetch(params)

    def _ask_ahead(
        self, fetcher: PageFetcher, data: bytes, params: Mapping[str, Any]
    ) -> tuple[Any, Prefetch] | None:
        """The next page asked for before this one is decoded, with the token it was asked
        with; None on the last page, or when the list is not to be followed."""
        if not self._follow():
            return None
        token = self._decoder.token(data)
        if not token:
            return None
        return token, fetcher.ask({**params, "_continue": token})
