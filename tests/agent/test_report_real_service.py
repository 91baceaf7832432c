"""The agent against the real placement service (``harvest serve``), killed with SIGKILL mid-run.

The service's own count is read back from ``GET /v1/tenants/<tenant>/samples`` (reports per slot,
which survives the restart through the service's log): it must equal the number of reports the
agent created, with every replay acknowledged but not stored twice.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from agent.config import load_config
from agent.report import Report
from agent.runtime import Agent
from placement_service import __version__
from tests.agent.agent_proc import ROOT
from tests.agent.procs import wait_until

pytestmark = pytest.mark.slow

TOKEN = "agent-test-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RealService:
    def __init__(self, tmp_path) -> None:
        self.data = tmp_path / "service-data"
        self.token = tmp_path / "token"
        self.token.write_text(TOKEN + "\n")
        self.http, self.grpc = free_port(), free_port()
        self.log = open(tmp_path / "service.log", "a")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RealService:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(self.data), "--http-port",
             str(self.http), "--grpc-port", str(self.grpc), "--token-file", str(self.token)],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        assert wait_until(self.healthy, 60, step_s=0.1), "harvest serve did not come up"
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stored_reports(self, tenant: str) -> int:
        url = f"http://127.0.0.1:{self.http}/v1/tenants/{tenant}/samples?since=0&until={time.time() + 3600}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return sum(int(s["reports"]) for s in json.load(answer)["samples"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return 0
            raise

    def node_last_seq(self, node: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v1/nodes/{node}", timeout=10) as answer:
            return int(json.load(answer)["last_seq"])


@pytest.fixture
def service(tmp_path):
    svc = RealService(tmp_path)
    yield svc
    svc.kill()
    svc.log.close()


def test_real_service_killed_and_restarted_counts_every_report_once(service, tmp_path):
    service.start()
    flags = {"mode": "local", "interval_s": "0.1", "report_interval_s": "0.1", "state_dir": str(tmp_path / "state"),
             "service": f"127.0.0.1:{service.grpc}", "token_file": str(service.token), "node": "agent-node-1",
             "tenant": "agent-tenant", "capacity_cores": "4", "capacity_memory_mb": "4096",
             "scope_root_pid": str(os.getpid())}
    agent = Agent(load_config({}, {}, flags)).start()
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    try:
        assert wait_until(lambda: service.stored_reports("agent-tenant") >= 5, 60)
        service.kill()
        assert wait_until(lambda: agent.buffer.depth() >= 10, 30), "reports are buffered while it is down"
        service.start()
        assert wait_until(lambda: agent.sender is not None and agent.sender.connected
                          and agent.buffer.depth() <= 2, 60)
        # lost replies: the agent sends some already-stored reports again
        for seq in (1, 2, 3):
            agent.buffer.append(Report("agent-node-1", "agent-tenant", time.time(), 1.0, 100.0, 4.0, 4096.0,
                                       False, 0.0, seq))
    finally:
        stop.set()
        loop.join(timeout=10)
    agent.sender.wake() if agent.sender else None
    assert wait_until(lambda: agent.buffer.depth() == 0, 60)
    agent.close()
    created = int((tmp_path / "state" / "seq").read_text())
    assert service.node_last_seq("agent-node-1") == created
    assert service.stored_reports("agent-tenant") == created, "each report stored exactly once"
    with urllib.request.urlopen(f"http://127.0.0.1:{service.http}/v1/agents", timeout=10) as answer:
        agents = json.load(answer)
    assert agents["versions"] == {__version__: 1}  # the release reached the service over gRPC
    assert agents["nodes"]["agent-node-1"]["version"] == __version__
