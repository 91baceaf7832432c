"""Processes of a test cluster: start, recognise (PID + start time), stop with their descendants."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    return int(fields[19])


def alive(proc: dict[str, Any]) -> bool:
    return start_time(int(proc["pid"])) == proc.get("start_time")


def spawn(cmd: list[str], env_extra: dict[str, str], cwd: str, log_path: str) -> int:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **env_extra}, start_new_session=True, cwd=cwd)
    return proc.pid


def tail(path: str | Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def descendants(pid: int) -> list[int]:
    """Children of ``pid``, recursively (e.g. a NodeManager's containers, which run in their own sessions)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
