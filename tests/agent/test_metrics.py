"""/metrics (Prometheus text), /explain (JSON) and ``harvest agent explain`` against a live agent."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from agent.config import load_config
from agent.metrics import Metrics
from agent.runtime import Agent
from tests.agent.agent_proc import ROOT

LINE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$|^-?inf$')


def test_render_is_prometheus_text():
    metrics = Metrics()
    metrics.inc("kills_total")
    metrics.inc("errors_total", kind="report")
    metrics.inc("errors_total", kind="report")
    metrics.set("reserve_cores", 1.5)
    text = metrics.render()
    assert "# TYPE harvest_agent_kills_total counter" in text
    assert 'harvest_agent_errors_total{kind="report"} 2' in text
    assert "harvest_agent_reserve_cores 1.5" in text
    for line in text.splitlines():
        assert line.startswith("# ") or LINE.match(line), line


@pytest.fixture
def live_agent(tmp_path):
    flags = {"state_dir": str(tmp_path), "capacity_cores": "4", "capacity_memory_mb": "4096",
             "reserve_cores": "1", "reserve_memory_mb": "1024", "metrics_port": "0",
             "scope_root_pid": str(os.getpid())}
    agent = Agent(load_config({}, {}, flags)).start()
    agent.tick()
    yield agent
    agent.close()


def get(agent: Agent, path: str) -> tuple[int, bytes]:
    assert agent.server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.server.port}{path}", timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_metrics_endpoint_has_samples_kills_reserve_buffer_errors(live_agent):
    live_agent.metrics.inc("errors_total", kind="sample")
    status, body = get(live_agent, "/metrics")
    text = body.decode()
    assert status == 200
    for name in ("samples_total 1", "kills_total 0", "reserve_cores 1", "reserve_memory_mb 1024",
                 "report_buffer_depth", 'errors_total{kind="sample"} 1', "harvestable_cores"):
        assert f"harvest_agent_{name}" in text
    assert get(live_agent, "/nope")[0] == 404


def test_explain_shows_the_numbers_behind_the_decision(live_agent):
    status, body = get(live_agent, "/explain")
    data = json.loads(body)
    assert status == 200
    assert data["capacity"] == {"cores": 4.0, "memory_mb": 4096}
    assert data["reserve"] == {"cores": 1.0, "memory_mb": 1024}
    decision = data["decision"]
    primary = data["primary"]
    assert decision["harvestable_target"]["cores"] == max(4 - primary["cores"] - 1, 0)
    assert decision["harvestable_target"]["memory_mb"] == max(4096 - primary["memory_mb"] - 1024, 0)
    assert "harvestable = capacity - primary - reserve" in data["formula"]
    assert isinstance(decision["reasons"], list) and data["containers"] == []


def test_cli_explain_prints_the_live_agent_and_fails_cleanly_without_one(live_agent):
    assert live_agent.server is not None
    done = subprocess.run([sys.executable, "-m", "placement_service.cli", "agent", "explain", "--metrics-port",
                           str(live_agent.server.port)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["capacity"]["cores"] == 4.0
    missing = subprocess.run([sys.executable, "-m", "placement_service.cli", "agent", "explain"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT,
                             env={k: v for k, v in os.environ.items() if not k.startswith("HARVEST_AGENT_")})
    assert missing.returncode == 2 and "metrics_port" in missing.stderr
