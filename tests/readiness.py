"""Wait for a started process's ready line on its stdout: one helper for every test and benchmark.

Reads the raw pipe with ``select`` + ``os.read``. Mixing ``select`` with a buffered ``readline``
loses lines: the first ``readline`` may pull several lines into Python's buffer, after which
``select`` sees an empty pipe and the wait runs to its deadline (how a HiGHS banner printed before
``harvest ras serve:`` failed CI on 2026-11-29).
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Any


class NotReady(RuntimeError):
    """The process exited, or the deadline passed, before it printed the ready line."""


def ready_line(proc: subprocess.Popen[Any], prefix: str, timeout_s: float = 60.0) -> str:
    """The first stdout line of ``proc`` starting with ``prefix`` (without its newline).

    Lines before it are skipped (a library may print first); raises ``NotReady`` with what was seen
    when the process exits or ``timeout_s`` passes first.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    pending = b""
    seen: list[str] = []
    while True:
        while b"\n" in pending:
            raw, pending = pending.split(b"\n", 1)
            line = raw.decode(errors="replace")
            if line.startswith(prefix):
                return line
            seen.append(line)
        left = deadline - time.monotonic()
        if left <= 0:
            raise NotReady(f"no {prefix!r} line within {timeout_s:.0f} s; stdout so far: {seen[-5:]!r}")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        chunk = os.read(fd, 65536) if ready else b""
        if chunk:
            pending += chunk
        elif ready or proc.poll() is not None:  # end of file, or exited with nothing left to read
            tail = seen[-5:] + ([pending.decode(errors="replace")] if pending else [])
            raise NotReady(f"exited (rc {proc.poll()}) before a {prefix!r} line; stdout: {tail!r}")
