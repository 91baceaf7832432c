"""Shared harness of the simulator benchmarks: one child process per system (so each system's peak
RSS is its own), each printing one JSON line; the machine load before and after."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def run_children(script: str, systems: Sequence[str], args: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """Run ``script --child SYSTEM *args`` for each system, in order; returns the JSON rows and a
    line describing the machine load (1-minute load average before and after, cores)."""
    before = os.getloadavg()[0]
    rows = []
    for system in systems:
        cmd = [sys.executable, script, "--child", system, *args]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    after = os.getloadavg()[0]
    return rows, f"load average before {before:.2f}, after {after:.2f} (1 min), {os.cpu_count()} cores"


def emit(row: dict[str, Any]) -> None:
    """A child's result line, with its peak RSS."""
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(row))
