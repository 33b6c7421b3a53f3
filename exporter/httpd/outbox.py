"""What a connection still has to send, as views of the bytes it was given.

A pre-rendered /metrics body is shared by every response that carries it; queuing a view of it
instead of a copy is what keeps a client that never reads from pinning a response's worth of
memory per connection. wire.py hands the kernel the front views (`views`) in one `sendmsg` and
drops what it took (`consume`), so even what the kernel refuses stays a view, never a copy.
"""

from __future__ import annotations

import collections


class Outbox:
    """A FIFO of byte views."""

    def __init__(self) -> None:
        self._views: collections.deque[memoryview] = collections.deque()
        self.queued = 0  # bytes waiting

    def __bool__(self) -> bool:
        return bool(self._views)

    def append(self, data: bytes | bytearray | memoryview) -> None:
        # A bytes object cannot change under us, so a view of it is enough; anything else
        # is copied once, as asyncio would.
        view = memoryview(data if isinstance(data, bytes) else bytes(data))
        if view:
            self._views.append(view)
            self.queued += len(view)

    def views(self, size: int) -> list[memoryview]:
        """The front views, `size` bytes at most in all (the last one cut to fit)."""
        out: list[memoryview] = []
        left = size
        for view in self._views:
            if len(view) >= left:
                out.append(view[:left])
                break
            out.append(view)
            left -= len(view)
        return out

    def consume(self, size: int) -> None:
        """Drop the first `size` bytes: the kernel took them."""
        self.queued -= size
        views = self._views
        while size:
            head = views[0]
            if len(head) > size:
                views[0] = head[size:]
                return
            views.popleft()
            size -= len(head)

    def clear(self) -> None:
        self._views.clear()
        self.queued = 0
