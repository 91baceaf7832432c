"""Run ``harvest agent`` for real as a subprocess and read its ``/explain`` and ``/metrics``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from typing import Any

from tests.agent.procs import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class AgentProcess:
    def __init__(self, args: list[str], log_path: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "placement_service.cli", "-v", "agent", *args, "--metrics-port", "0"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
            env=env or dict(os.environ), start_new_session=True)
        port: list[int] = []

        def find_port() -> bool:
            match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.log())
            if match:
                port.append(int(match.group(1)))
            return bool(port) or self.proc.poll() is not None

        assert wait_until(find_port, 60), "agent did not start"
        assert port, f"agent exited: {self.log()}"
        self.port = port[0]

    def log(self) -> str:
        with open(self.log_path) as handle:
            return handle.read()

    def explain(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/explain", timeout=10) as answer:
            return json.load(answer)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as answer:
            return answer.read().decode()

    def metric(self, name: str) -> float:
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(f"harvest_agent_{name}") and not line.startswith("#"):
                key = line.split(" ")[0].split("{")[0]
                if key == f"harvest_agent_{name}":
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        return int(self.proc.returncode)
