"""The agent loop in YARN mode (in-process, real psutil sampler, real processes, fake RM/NM)."""

from __future__ import annotations

import logging
import os
import time

import psutil

from agent.config import load_config
from agent.runtime import Agent
from tests.agent.agent_proc import AgentProcess
from tests.agent.fakes import YARN_NODE_ID, FakeResourceManager, fake_yarn_cli, read_calls
from tests.agent.procs import Node, wait_until

NODE_ID = YARN_NODE_ID
CIDS = [f"container_1700000000000_0002_01_00000{i}" for i in range(1, 5)]


def make_agent(node, tmp_path, rm_url, nm_url, **extra) -> Agent:
    flags = {"mode": "yarn", "interval_s": "0.25", "state_dir": str(tmp_path / "state"),
             "scope_root_pid": str(node.pid), "capacity_cores": "8", "reserve_cores": "1",
             "capacity_memory_mb": "2048", "reserve_memory_mb": "512", "rm_url": rm_url, "nm_url": nm_url,
             "dynamic_resources_xml": str(tmp_path / "dynamic-resources.xml"), "http_timeout_s": "0.5",
             "rm_retries": "2", "rm_backoff_s": "0.01", **extra}
    return Agent(load_config({}, {}, flags))


def run_until(agent: Agent, predicate, timeout_s: float = 20.0) -> int:
    ticks = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        agent.tick()
        ticks += 1
        if predicate():
            return ticks
        time.sleep(agent.config.interval_s)
    raise AssertionError(f"condition not met after {ticks} ticks: {agent.explain().get('decision')}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_yarn_mode_shrinks_node_kills_locally_and_remotely(node, rm, nm, tmp_path):
    primary = node.primary(spike_mb=600)
    containers = [node.container(cid, memory_mb=50) for cid in CIDS[:3]]
    for cid in CIDS[:3]:
        nm.add(cid, 1, 384)
    nm.add(CIDS[3], 1, 128, state="LOCALIZING")  # launched, no process yet: the youngest
    agent = make_agent(node, tmp_path, rm.url, nm.url, reclaim="local")
    try:
        run_until(agent, lambda: NODE_ID in rm.node_resources)
        first = dict(rm.node_resources[NODE_ID])
        assert first["vCores"] == 7  # 8 - 0 primary - 1 reserve
        assert 2048 - 512 - 100 < first["memory"] <= 2048 - 512
        for _ in range(4):  # steady state: nothing changes, nothing is written
            agent.tick()
            time.sleep(0.1)
        assert len(rm.posts("/ws/v1/cluster/nodes/")) == 1

        Node.spike(primary)
        run_until(agent, lambda: not alive(containers[2].pid))
        run_until(agent, lambda: rm.node_resources[NODE_ID]["memory"] <= 2048 - 512 - 600)
        assert alive(containers[0].pid) and alive(containers[1].pid) and alive(primary.pid)
        assert rm.signals == [(CIDS[3], "FORCEFUL_SHUTDOWN")]  # no local process: asked the RM
        # The RM update runs on the executor's worker thread, which records it as applied once the
        # RM has answered: the RM can hold the new value a moment before the agent says so.
        run_until(agent, lambda: (agent.explain()["yarn"]["applied"] or {}).get("memory_mb")
                  == rm.node_resources[NODE_ID]["memory"])
        explained = agent.explain()
        assert [k["container"] for k in explained["recent_kills"]] == [CIDS[2]]
        assert explained["yarn"]["applied"]["memory_mb"] == rm.node_resources[NODE_ID]["memory"]
        xml = (tmp_path / "dynamic-resources.xml").read_text()
        assert f"<name>yarn.resource.dynamic.{NODE_ID}.memory</name>" in xml
        assert f"<value>{rm.node_resources[NODE_ID]['memory']}</value>" in xml
    finally:
        agent.close()


def test_rm_unreachable_local_protection_continues_error_logged_once(node, nm, tmp_path, caplog):
    primary = node.primary(spike_mb=600)
    containers = [node.container(cid, memory_mb=50) for cid in CIDS[:3]]
    for cid in CIDS[:3]:
        nm.add(cid, 1, 384)
    agent = make_agent(node, tmp_path, "http://127.0.0.1:1", nm.url)
    try:
        with caplog.at_level(logging.WARNING):
            run_until(agent, lambda: agent.metrics.get("errors_total", kind="yarn_node_resource") >= 1)
            Node.spike(primary)
            run_until(agent, lambda: not alive(containers[2].pid))
            run_until(agent, lambda: agent.metrics.get("errors_total", kind="yarn_node_resource") >= 3)
        assert alive(containers[0].pid) and alive(containers[1].pid) and alive(primary.pid)
        assert agent.metrics.get("kills_total") == 1
        rm_warnings = [r for r in caplog.records if "yarn_node_resource failed" in r.getMessage()]
        assert len(rm_warnings) == 1, [r.getMessage() for r in rm_warnings]
        assert agent.explain()["yarn"]["last_error"]
    finally:
        agent.close()


def test_cli_agent_on_hadoop_32_uses_rmadmin_from_path(node, nm, tmp_path):
    rm = FakeResourceManager(mode="404")
    _, log = fake_yarn_cli(str(tmp_path))
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    agent = AgentProcess(["--mode", "yarn", "--interval-s", "0.5", "--state-dir", str(tmp_path / "state"),
                          "--scope-root-pid", str(node.pid), "--capacity-cores", "4", "--reserve-cores", "1",
                          "--capacity-memory-mb", "4096", "--reserve-memory-mb", "1024", "--rm-url", rm.url,
                          "--nm-url", nm.url], str(tmp_path / "agent.log"), env=env)
    try:
        assert wait_until(lambda: read_calls(log), 30)
        (call, *_) = read_calls(log)
        assert call[:3] == ["rmadmin", "-updateNodeResource", NODE_ID]
        memory_mb, vcores, timeout_ms = int(call[3]), int(call[4]), int(call[5])
        assert vcores == 3 and 4096 - 1024 - 100 < memory_mb <= 4096 - 1024 and timeout_ms == -1
        assert len(rm.posts("/ws/v1/cluster/nodes/")) == 1  # REST answered 404 once, then the CLI only
        assert agent.explain()["yarn"]["resource_rest"] is False
    finally:
        agent.stop()
        rm.close()
