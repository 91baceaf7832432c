"""Run one Hadoop admin command (``yarn rmadmin -refreshQueues``, ``hdfs dfsadmin -refreshNodes``)."""

from __future__ import annotations

import shlex
import subprocess


def run_admin_command(command: str, timeout_s: float) -> str:
    """Run ``command`` (split like a shell would, no shell); "" on success, else why it failed:
    the exit status with the last 500 characters of its output, or the error that kept it from running."""
    try:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
