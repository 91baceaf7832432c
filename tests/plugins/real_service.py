"""A real ``harvest serve`` process on 127.0.0.1 for end-to-end plugin tests (always stopped here)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.readiness import NotReady, ready_line


@dataclass(frozen=True)
class RealService:
    http: str
    token: str
    token_file: Path

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.http + path, data=None if body is None else json.dumps(body).encode(),
                                     method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


@contextmanager
def real_service(tmp: Path, classes_file: Path) -> Iterator[RealService]:
    token = "plugins-e2e-token"
    token_file = tmp / "token"
    token_file.write_text(token + "\n")
    cmd = [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(tmp / "data"), "--http-port",
           "0", "--grpc-port", "0", "--token-file", str(token_file), "--classes-file", str(classes_file)]
    log = open(tmp / "service.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        try:
            line = ready_line(proc, "harvest serve:", 60)
        except NotReady as exc:
            raise RuntimeError(f"service did not start: {exc}: {(tmp / 'service.log').read_text()[-2000:]}") from None
        yield RealService(line.split()[2], token, token_file)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
