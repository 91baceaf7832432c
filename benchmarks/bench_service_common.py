"""Shared helpers of the service benchmarks: start/stop a real ``harvest serve``, run the load
generator in its own process, read the machine load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.readiness import NotReady, ready_line

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
_STDERR: dict[int, Any] = {}


@dataclass
class Server:
    proc: subprocess.Popen[str]
    http: str
    grpc: str
    data_dir: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def memory_mb(self) -> dict[str, float]:
        """The server process's resident memory now (``VmRSS``) and its peak (``VmHWM``), in MB."""
        out: dict[str, float] = {}
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[{"VmRSS": "rss_mb", "VmHWM": "peak_rss_mb"}[key]] = round(int(value.split()[0]) / 1024, 1)
        return out

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(data_dir: Path, *extra: str, tree: Path = ROOT) -> Server:
    """``harvest serve`` on free ports from ``tree`` (its package first on the path: a baseline
    checkout can run beside this one)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    token_file = data_dir.parent / "token"
    token_file.write_text(TOKEN)
    cmd = [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(data_dir), "--http-port", "0",
           "--grpc-port", "0", "--token-file", str(token_file), *extra]
    log = open(data_dir.parent / "server.log", "a")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=tree)
    try:
        line = ready_line(proc, "harvest serve:", 120)
    except NotReady as exc:
        proc.kill()
        raise RuntimeError(f"server did not start: {exc}") from None
    parts = line.split()
    return Server(proc, parts[2], parts[4], data_dir)


def loadgen(mode: str, server: Server, *args: str) -> dict[str, Any]:
    proc = start_loadgen(mode, server, *args)
    try:
        return read_result(proc)
    finally:
        release(proc)


def start_loadgen(mode: str, server: Server, *args: str) -> subprocess.Popen[str]:
    """Start the load generator in its own process; it holds (stays alive) after printing its result
    until ``release``, so its exit does not disturb another generator still measuring."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "service_loadgen.py"), mode, "--http", server.http,
           "--grpc", server.grpc, "--token", TOKEN, "--hold", *args]
    err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty generator never blocks
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    _STDERR[proc.pid] = err
    return proc


def read_result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("{"):
        proc.kill()
        proc.wait()
        err = _STDERR.pop(proc.pid)
        err.seek(0)
        raise RuntimeError(f"load generator failed: {line!r} {err.read()[-2000:]}")
    result: dict[str, Any] = json.loads(line)
    return result


def release(proc: subprocess.Popen[str]) -> int:
    """Let a held generator exit; returns how many lines it wrote to stderr (errors)."""
    proc.communicate(timeout=120)
    err = _STDERR.pop(proc.pid, None)
    if err is None:
        return 0
    err.seek(0)
    n = len(err.read().splitlines())
    err.close()
    return n


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def now_utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
