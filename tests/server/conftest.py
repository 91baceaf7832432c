"""Real ``harvest serve`` processes on 127.0.0.1 for the server tests (started and always stopped here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.readiness import NotReady, ready_line

TOKEN = "test-token-7f3a"
RECLUSTER_WAIT_S = 180.0
"""Client timeout of ``POST /v1/recluster?wait=1``: a re-clustering child process (imports, fit) on two
cores shared with other work can take well over the default 30 s. Tests that wait for one also run it
at ``--recluster-priority normal``: at the default ``idle`` it would wait for as long as other work
kept both cores busy."""


@dataclass
class ServerProc:
    proc: subprocess.Popen[str]
    http: str
    grpc: str
    data_dir: Path
    token: str = TOKEN
    log: Path = field(default_factory=Path)

    def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = TOKEN, raw: bytes | None = None,
        timeout_s: float = 30.0,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.http + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                text = resp.read().decode()
                status = resp.status
        except urllib.error.HTTPError as exc:
            text = exc.read().decode()
            status = exc.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric on ``GET /metrics`` (0 while it was never set)."""
        status, text = self.call("GET", "/metrics", token=None)
        assert status == 200, text
        for line in str(text).splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def start_server(data_dir: Path, *extra: str, env: dict[str, str] | None = None,
                 preexec_fn: Any = None) -> ServerProc:
    data_dir.mkdir(parents=True, exist_ok=True)
    token_file = data_dir.parent / f"{data_dir.name}.token"
    token_file.write_text(TOKEN + "\n")
    log = data_dir.parent / f"{data_dir.name}.log"
    cmd = [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(data_dir),
           "--http-port", "0", "--grpc-port", "0", "--token-file", str(token_file), *extra]
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log, "a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=full_env,
                                preexec_fn=preexec_fn)
    try:
        line = ready_line(proc, "harvest serve:", 60)
    except NotReady as exc:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server did not start: {exc}; log:\n{log.read_text()[-3000:]}") from None
    parts = line.split()
    return ServerProc(proc=proc, http=parts[2], grpc=parts[4], data_dir=data_dir, log=log)


def report(node: str, tenant: str, ts: float, cpu: float = 2.0, seq: int = 0, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node": node, "tenant": tenant, "timestamp": ts, "primary_cpu_cores": cpu, "primary_memory_mb": 1024.0,
        "capacity_cores": 8.0, "capacity_memory_mb": 16384.0, "busy": False, "free_storage_gb": 500.0,
    }
    if seq:
        doc["seq"] = seq
    doc.update(over)
    return doc


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    srv = start_server(tmp_path_factory.mktemp("srv") / "data", "--compact-interval-s", "1")
    try:
        yield srv
    finally:
        srv.stop()


def grid_classes_file(tmp: Path, cells: dict[str, tuple[int, int]], servers: int = 4, cores: float = 128) -> Path:
    """A classes.json with one constant class per tenant, at the given (reimage row, peak column)."""
    classes, tenants, grid = [], {}, {}
    for i, (t, (row, col)) in enumerate(cells.items()):
        cid = f"constant-{i}"
        classes.append({"id": cid, "pattern": "constant", "avg_cpu": 0.2 + 0.1 * i, "peak_cpu": 0.3 + 0.1 * i,
                        "current_cpu": 0.25, "servers": servers, "cores": cores, "tenants": [t]})
        tenants[t] = {"class": cid, "pattern": "constant"}
        grid[t] = {"reimage_row": row, "peak_column": col}
    path = tmp / "classes.json"
    path.write_text(json.dumps({"classes": classes, "tenants": tenants, "grid": grid}))
    return path
