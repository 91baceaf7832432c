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


def test_yarn_mode_shrinks_node_kills_locally_and_remotely(node, rm, nm, tmp_path, caplog):
    primary = node.primary(spike_mb=600)
    containers = [node.container(cid, memory_mb=50) for cid in CIDS[:3]]
    for cid in CIDS[:3]:
        nm.add(cid, 1, 384)
    nm.add(CIDS[3], 1, 128, state="LOCALIZING")  # launched, no process yet: the youngest
    node.settle()  # else the children's start-up can be charged as a core of primary load
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
        with caplog.at_level(logging.WARNING, logger="agent.runtime"):
            run_until(agent, lambda: not alive(containers[2].pid))
        run_until(agent, lambda: rm.node_resources[NODE_ID]["memory"] <= 2048 - 512 - 600)
        assert alive(containers[0].pid) and alive(containers[1].pid) and alive(primary.pid)
        assert rm.signals == [(CIDS[3], "FORCEFUL_SHUTDOWN")]  # no local process: asked the RM
        # The RM update runs on the executor's worker thread, which records it as applied once the
        # RM has answered: the RM can hold the new value a moment before the agent says so.
        run_until(agent, lambda: (agent.explain()["yarn"]["applied"] or {}).get("memory_mb")
                  == rm.node_resources[NODE_ID]["memory"])
        explained = agent.explain()
        # Both kills are visible (issue 36 D3: the one sent through the RM was neither logged, counted
        # nor listed): the youngest (no local process) through the RM, then the next one on the node.
        assert [(k["container"], k["path"]) for k in explained["recent_kills"]] == [
            (CIDS[3], "rm-signal"), (CIDS[2], "local-kill")]
        assert agent.metrics.get("kills_total") == 2
        logged = [r.getMessage() for r in caplog.records if r.name == "agent.runtime"]
        assert any(CIDS[3] in m and "through the ResourceManager" in m for m in logged), logged
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


NODEMANAGER = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
# A NodeManager stand-in: about 0.3 core in short bursts, as a real 3.3.6 NodeManager showed while it
# launched containers (0.10-0.22 core per second, measured with psutil).
NM_DAEMON_CODE = r"""
import sys, time
print("ready", flush=True)
while True:
    end = time.monotonic() + 0.03
    while time.monotonic() < end:
        pass
    time.sleep(0.07)
"""


def _full_node_with_busy_nodemanager(node, nm):
    env = {k: v for k, v in os.environ.items() if k != "CONTAINER_ID"}
    daemon = node._spawn(NM_DAEMON_CODE, [NODEMANAGER], env)
    node.primary()  # idle primary tenant
    cids = [f"container_1700000000000_0003_01_00000{i}" for i in range(2, 5)]
    for cid in cids:
        node.container(cid, memory_mb=10)
        nm.add(cid, 1, 128)  # 3 vcores allocated: the node's whole budget (4 cores - 1 reserved)
    node.settle(exclude={daemon.pid})  # the start-up of the others is not the load under test
    return cids


def test_nodemanager_cpu_is_not_primary_load(node, rm, nm, tmp_path):
    """On a real 3.3.6 node the NodeManager's own CPU at each container launch (0.1-0.2 core) counted
    as primary, rounded up to a whole core, and the agent took back the container just started, at
    every launch. The NodeManager is matched by command line and its CPU kept out of the primary's."""
    cids = _full_node_with_busy_nodemanager(node, nm)
    agent = make_agent(node, tmp_path, rm.url, nm.url, capacity_cores="4", reclaim="local",
                       primary_cpu_noise_cores="0.1")
    try:
        run_until(agent, lambda: agent.explain().get("hadoop_daemons", {}).get("cores", 0) > 0.1)
        for _ in range(12):
            agent.tick()
            time.sleep(agent.config.interval_s)
        explained = agent.explain()
        assert explained["primary"]["cores"] == 0
        assert explained["recent_kills"] == []
        assert all(alive(c.pid) for c in node.children)
        assert explained["settings"]["hadoop_daemon_patterns"] == [NODEMANAGER]
    finally:
        agent.close()
    assert len(cids) == 3


def test_without_the_nodemanager_pattern_its_cpu_kills_a_container(node, rm, nm, tmp_path):
    """The behaviour before the fix (no daemon pattern): the NodeManager's bursts are primary load."""
    cids = _full_node_with_busy_nodemanager(node, nm)
    agent = make_agent(node, tmp_path, rm.url, nm.url, capacity_cores="4", reclaim="local",
                       primary_cpu_noise_cores="0.1", hadoop_daemon_patterns="")
    chosen: list[str] = []

    def took_one_back() -> bool:
        # The decision to take a container back is what is under test. On the local-kill path the
        # kill itself may be held until the node's shrink is in force, and once held, a loaded
        # machine (the daemon's bursts starved of CPU) may end the deficit before it is carried out:
        # seen in CI at load 20. So every decided kill counts, carried out or held.
        explained = agent.explain()
        chosen.extend(k["container"] for k in explained["decision"]["kills"])
        chosen.extend(k["container"] for k in explained["recent_kills"])
        return bool(chosen)

    try:
        run_until(agent, took_one_back)
        assert chosen[0] == cids[-1]  # the youngest
    finally:
        agent.close()
