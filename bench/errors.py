"""The bench's one error type."""

from __future__ import annotations


class BenchError(RuntimeError):
    """Something the bench needs did not work; reported as one line, exit status 1.

    Slow figures are never an error: the bench reports them beside their targets.
    """
