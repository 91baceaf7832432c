"""Atomic file writes shared by every part: a reader sees the old file or the new one, never a torn one.

Steps of every write:
1. create a temporary file in the target's directory (same filesystem, so the rename is atomic),
   named ``.<name>.<random><suffix>`` and with the usual 0644 permissions;
2. the caller writes it (by path or through an open handle);
3. flush and fsync the temporary file;
4. rename it over the target;
5. fsync the directory, so the rename itself survives a crash.
On any error the temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

PathLike = str | os.PathLike[str]


def fsync_dir(directory: PathLike) -> None:
    """Make a rename or a new file in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: PathLike, *, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path next to ``path``; when the block succeeds, it replaces ``path``.

    For writers that want a file name (pyarrow, matplotlib); ``suffix`` lets them infer the format.
    The parent directory is created when missing.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; the files we write are meant to be read by others
    finally:
        os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


@contextmanager
def atomic_open(path: PathLike, mode: str = "w", *, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """``open(path, mode)`` whose content appears at ``path`` only once the block succeeds."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole file: mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
        yield fh


def atomic_write(path: PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    atomic_write(path, text)


def atomic_write_json(path: PathLike, doc: Any, *, indent: int | None = 1) -> None:
    """Write ``doc`` as JSON (plus a final newline) to ``path`` atomically."""
    atomic_write(path, json.dumps(doc, indent=indent) + "\n")
