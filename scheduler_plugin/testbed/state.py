"""The testbed's state file and its processes: record at start, recognise, stop (``testbed.py``).

A process record: role, host, PID, start time (``/proc/PID/stat``), command line and log. A record is
*ours* while the PID has that start time and that command line; only then is it signalled, so a
stale directory or a reused PID never gets a process killed that the testbed did not start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json
from scheduler_plugin.testbed import procs

STATE_FILE = "testbed.json"
REPO = Path(__file__).resolve().parents[2]


class TestbedError(HarvestError):
    """The testbed could not be started, switched or stopped; the message names the part and its log."""

    __test__ = False  # not a pytest class



def say(message: str) -> None:
    print(f"harvest testbed: {message}", file=sys.stderr, flush=True)


def _py() -> list[str]:
    return [sys.executable, "-m", "placement_service.cli"]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def _run(cmd: list[str], what: str, log: Path, timeout_s: float = 600) -> None:
    with open(log, "ab") as handle:
        done = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env={**os.environ, **_env()}, timeout=timeout_s, check=False, cwd=REPO)
    if done.returncode != 0:
        raise TestbedError(f"{what} failed (exit {done.returncode}); {log}:\n{procs.tail(log)}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])



# ---------------------------------------------------------------- state


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise TestbedError(f"{directory}: no testbed here ({STATE_FILE} missing)") from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: unreadable testbed state ({exc})") from None


def write_state(directory: Path, state: dict[str, Any]) -> None:
    atomic_write_json(directory / STATE_FILE, state)


def cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def ours(proc: dict[str, Any]) -> bool:
    """The recorded process is still the one we started: same start time and same command line."""
    return procs.alive(proc) and cmdline(int(proc["pid"])) == list(proc["cmd"])


def start_process(state: dict[str, Any], directory: Path, role: str, host: str, cmd: list[str], log: Path,
                  **extra: Any) -> dict[str, Any]:
    """Spawn ``cmd`` in its own process group and record it in the state at once."""
    pid = procs.spawn(cmd, _env(), str(REPO), str(log))
    rec = {"role": role, "host": host, "pid": pid, "start_time": procs.start_time(pid), "cmd": cmd,
           "log": str(log), **extra}
    state["processes"] = [p for p in state.get("processes", []) if not (p["role"] == role and p["host"] == host)]
    state["processes"].append(rec)
    write_state(directory, state)
    return rec


def stop_processes(records: list[dict[str, Any]], grace_s: float = 10.0) -> int:
    """SIGTERM each recorded process group that is ours (and its descendants), SIGKILL after ``grace_s``;
    returns how many processes were signalled. Records that are not ours any more are skipped."""
    mine = [p for p in records if ours(p)]
    pids: list[int] = []
    for p in mine:
        pid = int(p["pid"])
        pids.append(pid)
        pids.extend(procs.descendants(pid))
    pids = sorted(set(pids) - {os.getpid()})
    for p in mine:
        try:
            os.killpg(int(p["pid"]), signal.SIGTERM)
        except OSError:
            pass
    procs.send(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in pids):
        time.sleep(0.2)
    left = [pid for pid in pids if procs.start_time(pid) is not None]
    for p in mine:
        if procs.start_time(int(p["pid"])) is not None:
            try:
                os.killpg(int(p["pid"]), signal.SIGKILL)
            except OSError:
                pass
    procs.send(left, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in left):
        time.sleep(0.1)
    return len(pids)
