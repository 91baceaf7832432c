"""Reports: seq across restarts, the bounded disk buffer, and a placement service killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from agent.config import load_config
from agent.metrics import Metrics
from agent.report import Report, ReportBuffer, SeqCounter
from agent.runtime import Agent
from tests.agent.agent_proc import ROOT
from tests.agent.procs import wait_until


def report(seq: int) -> Report:
    return Report("n1", "web", 1000.0 + seq, 1.0, 100.0, 8.0, 8192.0, False, 10.0, seq)


def test_seq_keeps_increasing_across_restarts(tmp_path):
    path = str(tmp_path / "seq")
    first = SeqCounter(path)
    assert [first.next() for _ in range(3)] == [1, 2, 3]
    second = SeqCounter(path)
    assert second.next() == 4
    second.at_least(10)
    assert SeqCounter(path).next() == 11


def test_buffer_is_bounded_drops_oldest_and_counts(tmp_path):
    metrics = Metrics()
    buffer = ReportBuffer(str(tmp_path / "buf"), 5, metrics)
    for seq in range(1, 11):
        buffer.append(report(seq))
    assert [r.seq for r in buffer.pending()] == [6, 7, 8, 9, 10]
    assert metrics.get("report_buffer_dropped_total") == 5
    assert metrics.get("report_buffer_depth") == 5
    reopened = ReportBuffer(str(tmp_path / "buf"), 5, Metrics())  # survives an agent restart
    assert [r.seq for r in reopened.pending()] == [6, 7, 8, 9, 10]
    assert reopened.ack(8) == 3 and [r.seq for r in reopened.pending()] == [9, 10]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    def __init__(self, port: int, state: str, token: str | None = None) -> None:
        self.port, self.state_path, self.token = port, state, token
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Service:
        argv = [sys.executable, "-m", "tests.agent.fake_service", "--port", str(self.port), "--state",
                self.state_path]
        if self.token:
            argv += ["--token", self.token]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "serving"
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def stored(self) -> list[int]:
        if not os.path.exists(self.state_path):
            return []
        with open(self.state_path) as handle:
            return list(json.load(handle)["stored"].get("n1", []))

    def received(self) -> int:
        with open(self.state_path) as handle:
            return int(json.load(handle)["received"])


@pytest.fixture
def service(tmp_path):
    svc = Service(free_port(), str(tmp_path / "service.json"))
    yield svc
    svc.kill()


def make_agent(tmp_path, service_port: int, **extra) -> Agent:
    flags = {"mode": "local", "interval_s": "0.05", "report_interval_s": "0.05", "state_dir": str(tmp_path / "state"),
             "service": f"127.0.0.1:{service_port}", "node": "n1", "tenant": "web", "capacity_cores": "4",
             "capacity_memory_mb": "4096", "scope_root_pid": str(os.getpid()), **extra}
    return Agent(load_config({}, {}, flags))


def run_in_thread(agent: Agent) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    agent.start()
    thread.start()
    return thread, stop


def test_service_killed_and_restarted_reports_buffered_replayed_none_duplicated(service, tmp_path):
    service.start()
    agent = make_agent(tmp_path, service.port)
    thread, stop = run_in_thread(agent)
    try:
        assert wait_until(lambda: len(service.stored()) >= 5, 30)
        service.kill()
        assert wait_until(lambda: agent.buffer.depth() >= 20, 30), "reports are buffered while it is away"
        assert agent.metrics.total("errors_total") >= 1
        assert agent.explain()["service"]["connected"] is False
        service.start()
        assert wait_until(lambda: agent.buffer.depth() < 3 and agent.sender is not None
                          and agent.sender.connected, 30)
    finally:
        stop.set()
        thread.join(timeout=10)
    agent.sender.wake() if agent.sender else None
    assert wait_until(lambda: agent.buffer.depth() == 0, 15)
    agent.close()
    stored = service.stored()
    created = int((tmp_path / "state" / "seq").read_text())
    assert stored == list(range(1, created + 1)), "every report stored once, in order, none lost"
    assert (tmp_path / "state" / "node-label").read_text() == "constant-2\n"


def test_replay_after_a_lost_reply_is_not_stored_twice(service, tmp_path):
    service.start()
    agent = make_agent(tmp_path, service.port)
    assert agent.sender is not None
    try:
        for _ in range(3):
            agent.buffer.append(report(agent.seq.next()))
        assert agent.sender.flush_once() == 3
        # the replies were lost: the same reports are sent again on reconnect
        for seq in range(1, 4):
            agent.buffer.append(report(seq))
        agent.buffer.append(report(agent.seq.next()))
        agent.sender.flush_once()
        assert service.stored() == [1, 2, 3, 4]
        assert service.received() == 7  # replays arrived and were acknowledged, not stored
        assert agent.buffer.depth() == 0
    finally:
        agent.close()


def test_wrong_token_keeps_reports_buffered(tmp_path):
    svc = Service(free_port(), str(tmp_path / "service.json"), token="s3cret").start()
    token = tmp_path / "token"
    token.write_text("wrong\n")
    agent = make_agent(tmp_path, svc.port, token_file=str(token))
    thread, stop = run_in_thread(agent)
    try:
        assert wait_until(lambda: agent.metrics.get("errors_total", kind="report") >= 1, 30)
        assert svc.stored() == [] and agent.buffer.depth() >= 1
        assert "UNAUTHENTICATED" in (agent.explain()["service"]["last_error"] or "")
        token.write_text("s3cret\n")  # the token file is read on every connection
        assert wait_until(lambda: len(svc.stored()) >= 1 and agent.buffer.depth() <= 2, 30)
    finally:
        stop.set()
        thread.join(timeout=10)
        agent.close()
        svc.kill()
