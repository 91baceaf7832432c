"""One owner per data directory: an exclusive ``flock`` on ``<data_dir>/service.lock``.

The lock lives as long as the owning process (the kernel drops it when the process dies, even by
``kill -9``), so a stale lock file never blocks a restart. The file holds the owner's pid, which
the refusal names. The descriptor is close-on-exec: child processes do not inherit the lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from placement_service.server.config import ConfigError

LOCK_NAME = "service.lock"


class DataDirLockedError(ConfigError):
    """Another process owns the data directory."""


def lock_data_dir(data_dir: Path, service: str = "harvest serve") -> int:
    """Take the exclusive lock (non-blocking); returns the descriptor to keep open.

    Raises :class:`DataDirLockedError` naming the holder's pid when another process holds it
    (``service``: the command the refusal names). Every service calls it before touching its state.
    """
    path = data_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirLockedError(
            f"data dir {data_dir} is in use by another {service} (pid {holder}); "
            f"stop it first or use another --data-dir"
        ) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_data_dir(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
