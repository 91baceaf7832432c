"""Atomic small-file writes and the state-dir files other parts read (see docs/contracts.md).

``StateFile`` writes a one-line file by temp file + rename, skips the write when the content is
unchanged, and refreshes the mtime at least every ``heartbeat_s`` while the agent is healthy, so
readers can tell a live agent from a dead one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from placement_service.atomic import atomic_write

__all__ = ["StateFile", "Throttle", "atomic_write"]


class StateFile:
    def __init__(self, path: str, heartbeat_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self.content: str | None = None
        self._touched_s = -float("inf")
        self.writes = 0
        try:
            with open(path, encoding="utf-8") as handle:
                self.content = handle.read()
        except OSError:
            self.content = None

    def set(self, line: str, healthy: bool = True) -> bool:
        """Make the file hold ``line``; returns True when the content was (re)written."""
        content = line.rstrip("\n") + "\n"
        now = self._clock()
        if content != self.content or not os.path.exists(self.path):
            atomic_write(self.path, content)
            self.content, self._touched_s = content, now
            self.writes += 1
            return True
        if healthy and now - self._touched_s >= self.heartbeat_s:
            os.utime(self.path)
            self._touched_s = now
        return False


class Throttle:
    """Log a repeated error at most once per ``interval_s`` per kind, with the count in between."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def should_log(self, kind: str) -> tuple[bool, int]:
        """(log now?, how many of this kind were suppressed since the last log)."""
        now = self._clock()
        if now - self._last.get(kind, -float("inf")) >= self.interval_s:
            self._last[kind] = now
            return True, self._suppressed.pop(kind, 0)
        self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
        return False, 0
