"""The agent run for real (``harvest agent`` subprocess, real psutil sampler) against real processes.

The node is a process tree (``--scope-root-pid``) so that other work on this shared machine does not
count as primary load; containers are processes with ``CONTAINER_ID`` set that burn CPU and hold
memory; a separate primary process then spikes. Assertions are on behaviour (which processes die,
what ``/explain`` says), never on tight timings.
"""

from __future__ import annotations

import psutil
import pytest

from tests.agent.agent_proc import AgentProcess
from tests.agent.procs import Node, wait_until

CIDS = [f"container_1700000000000_0001_01_00000{i}" for i in range(1, 5)]


@pytest.fixture
def agents():
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.stop()


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / (1024 * 1024)


def test_memory_spike_kills_youngest_containers_never_more_than_needed(node, agents, tmp_path):
    primary = node.primary(spike_mb=400)
    containers = [node.container(cid, memory_mb=150, burn=i < 2) for i, cid in enumerate(CIDS)]
    primary_mb = rss_mb(node.pid) + rss_mb(primary.pid)
    secondary_mb = sum(rss_mb(c.pid) for c in containers)
    reserve_mb, slack_mb = 300, 150
    capacity_mb = int(primary_mb + secondary_mb + reserve_mb + slack_mb)
    agent = AgentProcess(["--mode", "local", "--interval-s", "0.5", "--state-dir", str(tmp_path / "state"),
                          "--scope-root-pid", str(node.pid), "--capacity-cores", "64", "--reserve-cores", "1",
                          "--capacity-memory-mb", str(capacity_mb), "--reserve-memory-mb", str(reserve_mb)],
                         str(tmp_path / "agent.log"))
    agents.append(agent)
    assert wait_until(lambda: len(agent.explain().get("containers", [])) == 4, 30)
    before = agent.explain()
    assert before["decision"]["kills"] == [] and before["recent_kills"] == []
    assert before["decision"]["deficit"]["memory_mb"] <= 0
    footprint = {c["id"]: c["footprint_memory_mb"] for c in before["containers"]}

    Node.spike(primary)
    # the spike needs about 250 MB more than the slack: two 150 MB containers, not one, not three
    assert wait_until(lambda: not containers[3].alive() and not containers[2].alive(), 30)
    assert wait_until(lambda: agent.explain()["decision"]["deficit"]["memory_mb"] <= 0
                      and not agent.explain()["dying"], 30)
    for _ in range(3):  # a few more ticks: nothing else dies
        wait_until(lambda: False, 0.5)
    after = agent.explain()
    assert containers[0].alive() and containers[1].alive(), "older containers must survive"
    assert primary.alive() and psutil.pid_exists(node.pid), "never a primary process"
    killed = [k["container"] for k in after["recent_kills"]]
    assert killed == [CIDS[3], CIDS[2]]  # youngest first
    assert all("youngest" in k["reason"] for k in after["recent_kills"])
    deficit = after["decision"]["deficit"]["memory_mb"]
    assert deficit <= 0  # the reserve is whole again ...
    assert deficit + min(footprint[c] for c in killed) > 0  # ... and one kill fewer would not do
    assert agent.metric("kills_total") == 2
    # the kill shrank what YARN may hand out at once, to below what the spiking primary leaves
    assert agent.metric("harvestable_memory_mb") <= capacity_mb - reserve_mb - 400


def test_cpu_spike_kills_the_youngest_container_and_spares_the_primary(node, agents, tmp_path):
    primary = node.primary(spike_threads=1)  # one GIL-bound thread: about one core at most
    containers = [node.container(cid, burn=True) for cid in CIDS[:3]]
    node.settle()  # the primary's start-up would count as a core of primary load (a kill before the spike)
    # capacity 3 cores, reserve 1: budget 2 cores; three containers charged 0.5 core each fit, and a
    # primary at one core overflows the budget by 0.5 core: exactly one (the youngest) must go.
    agent = AgentProcess(["--mode", "local", "--interval-s", "0.5", "--state-dir", str(tmp_path / "state"),
                          "--scope-root-pid", str(node.pid), "--capacity-cores", "3", "--reserve-cores", "1",
                          "--container-cores", "0.5", "--capacity-memory-mb", "100000",
                          "--reserve-memory-mb", "1000", "--cooldown-s", "5"], str(tmp_path / "agent.log"))
    agents.append(agent)
    assert wait_until(lambda: len(agent.explain().get("containers", [])) == 3, 30)
    assert agent.explain()["recent_kills"] == []
    Node.spike(primary)
    assert wait_until(lambda: not containers[2].alive(), 30)
    wait_until(lambda: False, 2.0)  # four more ticks
    after = agent.explain()
    assert containers[0].alive() and containers[1].alive() and primary.alive()
    assert [k["container"] for k in after["recent_kills"]] == [CIDS[2]]
    assert after["primary"]["cores"] == 1
    assert after["decision"]["deficit"]["cores"] <= 0
    assert after["decision"]["advertised"]["cores"] == 1  # 3 - 1 primary - 1 reserve


def test_agent_writes_state_files_and_reports_to_buffer_without_a_service(node, agents, tmp_path):
    state = tmp_path / "state"
    agent = AgentProcess(["--mode", "local", "--interval-s", "0.3", "--state-dir", str(state), "--report-interval-s",
                          "0.3", "--scope-root-pid", str(node.pid), "--capacity-cores", "4",
                          "--capacity-memory-mb", "8000"], str(tmp_path / "agent.log"))
    agents.append(agent)
    assert wait_until(lambda: (state / "datanode-busy").exists() and (state / "seq").exists()
                      and len(list((state / "report-buffer").iterdir())) >= 3, 30)
    assert (state / "datanode-busy").read_text() == "idle\n"
    assert int((state / "seq").read_text()) >= 3
    text = agent.metrics()
    for name in ("samples_total", "kills_total", "reserve_cores", "report_buffer_depth", "harvestable_cores"):
        assert f"harvest_agent_{name}" in text
    assert agent.stop() == 0
