"""The agent in YARN mode on the real RM path (issue 36 point 3): a primary-tenant spike on one host
makes the ResourceManager preempt that host's youngest containers; the job's attempts end KILLED, none
FAILED, and the job succeeds. Reaction times are measured by benchmarks/bench_agent_rm_real.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.procs import wait_until
from tests.hadoop.agent_node import AgentNode, set_node_size, verbose_hadoop
from tests.hadoop.conftest import HadoopCluster

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]


def counter(output: str, name: str) -> int:
    """A job counter from the client's output (``Killed map tasks=2``); 0 when absent."""
    found = re.findall(rf"\b{re.escape(name)}=(\d+)", output)
    return int(found[-1]) if found else 0


def submit_sleep_job(cluster: HadoopCluster, maps: int, map_ms: int, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as handle:
        return subprocess.Popen([str(verbose_hadoop(cluster, log.parent)), "sleep", "-m", str(maps), "-r", "0",
                                 "-mt", str(map_ms)], stdout=handle, stderr=subprocess.STDOUT, text=True)


def explain_digest(node: AgentNode) -> str:
    """The numbers behind the agent's last decision, short enough for a failure message."""
    e = node.explain()
    return json.dumps({k: e.get(k) for k in ("primary", "decision", "yarn", "reclaim", "recent_kills")}
                      | {"containers": [(x["id"][-8:], x["memory_mb"], x["alloc_memory_mb"])
                                        for x in e.get("containers", [])]})[:6000]


def busy_enough(node: AgentNode, maps: int = 1) -> bool:
    """worker1 runs ``maps`` map containers: a 1,200 MB spike then takes the reserve below what it holds."""
    held = [c for c in node.explain().get("containers", [])
            if c.get("alloc_memory_mb") and not c["id"].endswith("_000001")]
    return len(held) >= maps


@pytest.mark.feature("agent: a primary spike makes the RM preempt (KILLED, 0 FAILED, job succeeds)")
def test_a_primary_spike_makes_the_rm_preempt_and_no_attempt_fails(hadoop_cluster: HadoopCluster,
                                                                   tmp_path: Path) -> None:
    c = hadoop_cluster
    node = AgentNode(c, "worker1", tmp_path, spike_mb=1200)
    job = None
    others = [h["name"] for h in c.info["hosts"] if h["nodemanager"] and h["name"] != "worker1"]
    sizes: dict[str, tuple[int, int]] = {}
    try:
        assert wait_until(lambda: node.explain().get("yarn", {}).get("applied") is not None, 60, step_s=0.5), (
            node.agent.log() if node.agent else "")
        explained = node.explain()
        assert explained["reclaim"]["path"] == "rm-preemption", explained["reclaim"]
        assert explained["yarn"]["hadoop_version"] == c.version
        for other in others:  # the job's containers go to worker1
            sizes[other] = set_node_size(c, other, 0, 0)
        job = submit_sleep_job(c, maps=4, map_ms=15_000, log=tmp_path / "job.log")
        assert wait_until(lambda: busy_enough(node), 300, step_s=1.0), ("no maps on worker1", explain_digest(node))
        t0 = node.spike()  # +1,200 MB: primary + containers above capacity - reserve
        reclaimed = wait_until(lambda: node.metric("rm_reclaimed_total") >= 1, 60, step_s=0.05)
        assert reclaimed, explain_digest(node)
        sys.stderr.write(f"\nHadoop {c.version}: spike -> container taken back by the RM in "
                         f"{time.monotonic() - t0:.2f} s (load {os.getloadavg()[0]:.1f}; not asserted, see "
                         f"benchmarks/bench_agent_rm_real.py)\n")
        time.sleep(5)
        node.calm()
        assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-4000:]
        output = (tmp_path / "job.log").read_text()
        assert "completed successfully" in output, output[-4000:]
        assert counter(output, "Failed map tasks") == 0, output[-4000:]
        assert counter(output, "Killed map tasks") >= 1, output[-4000:]
        assert node.metric("kills_total") == 0  # nothing killed on the node itself
        assert node.metric("reclaim_fallbacks_total") == 0
        kills = node.explain()["recent_kills"]
        assert kills and all(k["path"] == "rm-preemption" for k in kills), kills
        assert all(not k["container"].endswith("_000001") for k in kills)  # never an AM
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        for other, (memory_mb, vcores) in sizes.items():
            set_node_size(c, other, memory_mb, vcores)
        node.close()


@pytest.mark.feature("agent: a kill sent through the RM is logged, counted and listed (D3)")
def test_a_kill_through_the_rm_is_logged_counted_and_listed(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    """Issue 36 D3 on the real RM: the agent on the local-kill path sees worker1's containers through the
    NodeManager's REST API but none of their processes (the NodeManager is outside the tree it
    measures), so the primary spike's kill goes through the RM (``POST .../containers/{id}/signal``).
    Each such kill is in ``kills_total`` and ``recent_kills`` (path ``rm-signal``) and in the agent's
    log; MapReduce counts it as a failed attempt (exit 137), as the fake scheduler does."""
    c = hadoop_cluster
    others = [h["name"] for h in c.info["hosts"] if h["nodemanager"] and h["name"] != "worker1"]
    sizes: dict[str, tuple[int, int]] = {}
    # the NodeManager stays up: the size the agent writes would stay after the test (put back below)
    worker1 = next(n for n in c.rm_get("/ws/v1/cluster/nodes")["nodes"]["node"] if n["nodeHostName"] == c.ip_of("worker1"))
    sizes["worker1"] = (int(worker1["totalResource"]["memory"]), int(worker1["totalResource"]["vCores"]))
    node = AgentNode(c, "worker1", tmp_path, spike_mb=1000, nodemanager_in_tree=False, reclaim="local")
    job = None
    try:
        assert wait_until(lambda: node.explain().get("yarn", {}).get("applied") is not None, 60, step_s=0.5), (
            node.agent.log() if node.agent else "")
        assert node.explain()["reclaim"]["path"] == "local-kill", node.explain()["reclaim"]
        for other in others:
            sizes[other] = set_node_size(c, other, 0, 0)
        job = submit_sleep_job(c, maps=3, map_ms=15_000, log=tmp_path / "job.log")
        # two maps (and the AM) held: the spike then eats into the reserve whatever the third does
        assert wait_until(lambda: busy_enough(node, maps=2), 300, step_s=1.0), ("no maps on worker1",
                                                                               explain_digest(node))
        node.spike()
        assert wait_until(lambda: node.metric("kills_total") >= 1, 60, step_s=0.1), explain_digest(node)
        time.sleep(5)
        node.calm()
        assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-4000:]
        output = (tmp_path / "job.log").read_text()
        kills = node.explain()["recent_kills"]
        assert kills and all(k["path"] == "rm-signal" for k in kills), kills
        assert node.metric("kills_total") == len(kills), kills
        log = node.agent.log() if node.agent else ""
        for k in kills:
            assert any(k["container"] in line and "through the ResourceManager" in line
                       for line in log.splitlines()), (k, log[-4000:])
        assert all(not k["container"].endswith("_000001") for k in kills)  # never an AM
        assert "completed successfully" in output, output[-4000:]
        assert counter(output, "Failed map tasks") == len(kills), output[-4000:]
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        node.close()  # the agent first: it would write worker1's size again
        for other, (memory_mb, vcores) in sizes.items():
            set_node_size(c, other, memory_mb, vcores)
