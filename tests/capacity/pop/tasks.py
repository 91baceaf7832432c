"""Task functions the Dask tests send to workers (importable by worker processes)."""

from __future__ import annotations

import os
import time


def slow_pid(shared: object, seconds: float) -> tuple[int, object]:
    """Sleep, then return the worker's pid and the shared input it was given."""
    time.sleep(seconds)
    return os.getpid(), shared


def fail(shared: object, spec: object) -> None:
    raise RuntimeError(f"sub-problem {spec} cannot be solved")
