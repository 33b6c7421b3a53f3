"""What a connection still has to send, as views of the bytes it was given.

A pre-rendered /metrics body is shared by every response that carries it; queuing a view of it
instead of a copy is what keeps a client that never reads from pinning a response's worth of
memory per connection (wire.py hands the kernel one chunk at a time from here).
"""

from __future__ import annotations

import collections


class Outbox:
    """A FIFO of byte views; `take` returns the next bytes to send, a view where it can."""

    def __init__(self) -> None:
        self._views: collections.deque[memoryview] = collections.deque()
        self.queued = 0  # bytes waiting

    def __bool__(self) -> bool:
        return bool(self._views)

    def append(self, data: bytes | bytearray | memoryview) -> None:
        # A bytes object cannot change under us, so a view of it is enough; anything else
        # is copied once, as asyncio would.
        view = memoryview(data if isinstance(data, bytes) else bytes(data))
        self._views.append(view)
        self.queued += len(view)

    def take(self, size: int) -> bytes | memoryview:
        """Up to `size` bytes off the front; a view when one piece covers them."""
        head = self._views[0]
        if len(head) >= size:
            self._views[0] = head[size:]
            if not self._views[0]:
                self._views.popleft()
            self.queued -= size
            return head[:size]
        pieces: list[memoryview] = []
        taken = 0
        while self._views and taken + len(self._views[0]) <= size:
            piece = self._views.popleft()
            pieces.append(piece)
            taken += len(piece)
        self.queued -= taken
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def clear(self) -> None:
        self._views.clear()
        self.queued = 0
