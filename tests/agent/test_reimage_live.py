"""Reimages reach the placement service live: an agent that starts on a reimaged node (new boot id,
wiped DataNode dir) reports it over HTTP; 'harvest agent report-reimage' declares one; while the
service is away the events wait in the state dir and are delivered once, when it is back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from agent.config import load_config
from agent.reimage import BOOT_ID_NAME, MARKER_NAME
from agent.runtime import Agent
from tests.agent.procs import wait_until
from tests.server.conftest import TOKEN, report, start_server


def _flags(tmp_path, srv_http: str, dn) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    return {"mode": "local", "interval_s": "0.2", "report_interval_s": "0.2", "state_dir": str(tmp_path / "state"),
            "service_http": srv_http, "token_file": str(token), "node": "n1", "tenant": "web",
            "capacity_cores": "4", "capacity_memory_mb": "4096", "scope_root_pid": str(os.getpid()),
            "datanode_dirs": str(dn)}


def test_agent_reports_a_detected_reimage_and_a_declared_one_once(tmp_path):
    srv = start_server(tmp_path / "data", "--compact-interval-s", "1")
    try:
        assert srv.call("POST", "/v1/reports", {"reports": [report("n1", "web", time.time(), seq=1)]})[0] == 202
        dn = tmp_path / "dn"
        dn.mkdir()
        state = tmp_path / "state"
        state.mkdir()
        # The previous run saw another boot; the reimage wiped the DataNode dir (no marker).
        (state / BOOT_ID_NAME).write_text("a-boot-before-the-reimage\n")
        agent = Agent(load_config({}, {}, _flags(tmp_path, "http://127.0.0.1:9", dn)))  # service away
        agent.start()
        try:
            assert (dn / MARKER_NAME).exists()
            pending = agent.explain()["reimages"]["pending"]
            assert len(pending) == 1 and pending[0]["how"] == "detected"
            assert wait_until(lambda: agent.explain()["reimages"]["last_error"] != "", 20)
        finally:
            agent.close()
        # The next start (same boot) finds the service: the queued event is delivered, not re-detected.
        agent = Agent(load_config({}, {}, _flags(tmp_path, srv.http, dn))).start()
        stop = threading.Event()
        loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        loop.start()
        try:
            assert wait_until(lambda: len(srv.call("GET", "/v1/reimages")[1]["reimages"]) == 1, 30)
            assert wait_until(lambda: agent.explain()["reimages"]["pending"] == [], 10)
            # The sender marks its round finished just after it empties the queue: wait for it.
            assert wait_until(lambda: "reimage" in agent.explain()["loops_heartbeat_age_s"], 10)
            # An operator declares one (e.g. a reimage the agent could not see).
            out = subprocess.run(
                [sys.executable, "-m", "placement_service.cli", "agent", "report-reimage", "--at", "2026-01-02T03:04:05Z",
                 "--state-dir", str(state), "--node", "n1", "--service-http", srv.http,
                 "--token-file", str(tmp_path / "token")], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert "reported 1" in out.stdout
        finally:
            stop.set()
            loop.join(timeout=10)
            agent.close()
        rows = srv.call("GET", "/v1/reimages")[1]["reimages"]
        assert [(r["node"], r["how"]) for r in rows] == [("n1", "declared"), ("n1", "detected")]
        assert rows[0]["timestamp"] == 1767323045.0
    finally:
        srv.stop()
