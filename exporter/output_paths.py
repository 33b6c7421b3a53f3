"""Output paths checked before anything is written: `generate --out DIR` and `--runbooks FILE`,
the demo's `--workdir`.

A path that cannot be written is the operator's to fix, so it is an InputError (one line, exit
2) raised before the first file is written, not an OSError traceback halfway through a run
that leaves half the files new and half old. The check is what can be known without writing
(the nearest existing folder is a folder and writable); what only the write itself finds out
(root on a read-only mount, a full disk) goes through `file_errors`, which reports it in one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kube_gpu_exporter.exporter.input_errors import InputError, quoted

__all__ = ["check_output_dir", "check_output_file", "file_errors"]


def check_output_dir(path: str | Path, flag: str) -> Path:
    """`path` as a folder that exists or can be made, and can be written into."""
    path = _path(path, flag)
    with _stat_errors(flag, path):
        if path.exists() and not path.is_dir():
            raise InputError(f"{flag} {path}: not a directory")
        _check_creatable(path, flag)
    return path


def check_output_file(path: str | Path, flag: str) -> Path:
    """`path` as a file that can be (re)written: not a folder, and in a folder it can make."""
    path = _path(path, flag)
    with _stat_errors(flag, path):
        if path.is_dir():
            raise InputError(f"{flag} {path}: is a directory, not a file")
        if path.exists() and not os.access(path, os.W_OK):
            raise InputError(f"{flag} {path}: not writable")
        _check_creatable(path.parent, flag, of=path)
    return path


def _path(value: str | Path, flag: str) -> Path:
    if not str(value) or "\0" in str(value):
        raise InputError(f"{flag}: not a path: {quoted(str(value))}")
    return Path(value)


@contextmanager
def _stat_errors(flag: str, path: Path) -> Iterator[None]:
    """A folder on the way that cannot be looked into (EACCES) is the answer, not a crash."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"{flag} {path}: {exc.strerror or exc}") from None


def _check_creatable(folder: Path, flag: str, of: Path | None = None) -> None:
    """The nearest existing ancestor of `folder` (itself included) is a writable folder."""
    shown = of or folder
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{flag} {shown}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {shown}: {existing} is not writable")


@contextmanager
def file_errors(doing: str) -> Iterator[None]:
    """OSErrors met while reading or writing the outputs (`doing`: "read", "write") as one
    InputError naming the file."""
    try:
        yield
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise InputError(f"cannot {doing}{where}: {exc.strerror or exc}") from None
