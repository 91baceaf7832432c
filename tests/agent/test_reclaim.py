"""Reclaim through the RM's over-commit preemption (Hadoop 3.3+) vs local kills, on a fake YARN cluster
running real container processes and a MapReduce job model (issue 12 items 5 and 6)."""

from __future__ import annotations

import time

import pytest

from agent.attribute import ContainerView, NodeView
from agent.decide import Decision, Kill
from agent.reclaim import ReclaimPath, choose_path, ignored_resources, parse_version, plan_reclaim
from tests.agent.fake_scheduler import DEFAULT_CALCULATOR, PREEMPTED
from tests.agent.fakes import FakeYarnCluster, fake_yarn_cli
from tests.agent.procs import Node
from tests.agent.test_runtime_yarn import make_agent, run_until


def test_version_picks_the_path() -> None:
    assert parse_version("3.3.6") == (3, 3) and parse_version("3.4.0-SNAPSHOT") == (3, 4)
    assert parse_version(None) is None and parse_version("x") is None
    assert choose_path("auto", "3.3.6", True)[0] is ReclaimPath.RM_PREEMPTION
    assert choose_path("auto", "3.2.1", True)[0] is ReclaimPath.LOCAL_KILL
    assert choose_path("auto", None, True)[0] is ReclaimPath.LOCAL_KILL  # unknown: the safe side
    assert choose_path("auto", "3.3.6", False)[0] is ReclaimPath.LOCAL_KILL  # REST answered 404
    assert choose_path("local", "3.3.6", True)[0] is ReclaimPath.LOCAL_KILL
    assert choose_path("rm", None, True)[0] is ReclaimPath.RM_PREEMPTION


def _view(*containers: ContainerView) -> NodeView:
    return NodeView(0.0, 1.0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, tuple(containers))


def _c(cid: str, cores: float, mb: float, listed: bool = True) -> ContainerView:
    return ContainerView(cid, 0.0, 10.0, 1.0, ((1, 1.0),), (1,), cores if listed else None,
                         mb if listed else None)


def _decision(kills: tuple[Kill, ...], deficit_cores: float, deficit_mb: float) -> Decision:
    return Decision(0.0, False, kills, 4, 4096, 4, 4096, False, deficit_cores, deficit_mb, 0.0, 0.0, ())


def test_plan_sizes_the_node_to_the_survivors_and_keeps_unlisted_and_urgent_kills_local() -> None:
    view = _view(_c("c1", 1, 1024), _c("c2", 1, 1024), _c("c3", 2, 2048), _c("c4", 1, 0, listed=False))
    k3 = Kill("c3", ((1, 1.0),), (1,), 2, 2048, "r")
    k4 = Kill("c4", ((1, 1.0),), (1,), 0.1, 10, "r")
    plan = plan_reclaim(_decision((k3, k4), 1.0, 100.0), view, 1.0, 1024.0, {"c2"}, ReclaimPath.RM_PREEMPTION)
    assert plan.via_rm == (k3,) and plan.local == (k4,) and not plan.urgent  # the NM does not list c4: only a local kill
    assert (plan.node_memory_mb, plan.node_vcores) == (1024, 1)  # c1 stays (c2 is already dying)
    urgent = plan_reclaim(_decision((k3,), 1.0, 2000.0), view, 1.0, 1024.0, (), ReclaimPath.RM_PREEMPTION)
    assert urgent.urgent and urgent.via_rm == () and urgent.local == (k3,)  # memory reserve used up
    cpu = plan_reclaim(_decision((k3,), 5.0, 0.0), view, 1.0, 1024.0, (), ReclaimPath.RM_PREEMPTION)
    assert not cpu.urgent and cpu.via_rm == (k3,)  # CPU is elastic: waiting for the RM is fine
    local = plan_reclaim(_decision((k3,), 1.0, 100.0), view, 1.0, 1024.0, (), ReclaimPath.LOCAL_KILL)
    assert local.via_rm == () and local.local == (k3,)


def test_scheduler_check_needs_a_container_granted_well_after_the_size_and_latches() -> None:
    view = _view(_c("c1", 1, 100), _c("c2", 1, 100), _c("c3", 1, 100))
    seen = {"c1": 10.0, "c2": 10.0, "c3": 10.0}
    sizes = [(9.0, (4096, 2))]
    assert ignored_resources(view, sizes, seen, 5.0) == frozenset()  # granted before the size held 5 s
    assert ignored_resources(view, [(1.0, (4096, 8)), (9.0, (4096, 2))], seen, 5.0) == frozenset()
    seen["c3"] = 20.0
    assert ignored_resources(view, sizes, seen, 5.0) == {"cores"}
    later = [*sizes, (30.0, (4000, 2))]  # a resize does not clear it while the allocation stays above
    assert ignored_resources(view, later, seen, 5.0, previously={"cores"}) == {"cores"}
    assert ignored_resources(view, [*later, (40.0, (4000, 3))], seen, 5.0, previously={"cores"}) == frozenset()


def _alive_maps(cluster: FakeYarnCluster) -> int:
    return sum(1 for c in cluster.rm.scheduler.running(cluster.nm.node_id) if not c.is_am)


def _agent_flags(**extra: str) -> dict[str, str]:
    # CPU is left roomy (launches of real processes burst), memory is what the primary's spike takes
    return {"capacity_cores": "16", "reserve_cores": "4", "capacity_memory_mb": "2048", "reserve_memory_mb": "600",
            "cooldown_s": "2", "advertise_hold_s": "0.5", **extra}


@pytest.fixture
def spiky(node: Node):
    return node.primary(spike_mb=500)


def test_hadoop_33_reclaims_through_rm_preemption_and_the_job_loses_no_attempt(node, spiky, tmp_path):
    cluster = FakeYarnCluster(node, memory_mb=2048, vcores=8)
    agent = make_agent(node, tmp_path, cluster.rm.url, cluster.nm.url, **_agent_flags())
    try:
        run_until(agent, lambda: agent.explain().get("reclaim", {}).get("path") == "rm-preemption")
        assert agent.explain()["yarn"]["hadoop_version"] == "3.3.6"
        job = cluster.submit(maps=6, map_memory_mb=200, am_memory_mb=200)
        run_until(agent, lambda: _alive_maps(cluster) == 6 and len(cluster.nm.processes) == 7)
        Node.spike(spiky)  # +500 MB: the reserve (600 MB) is eaten into, not used up
        run_until(agent, lambda: job.killed_attempts >= 1)
        run_until(agent, lambda: agent.metrics.get("rm_reclaimed_total") >= 1)
        assert job.failed_attempts == 0 and job.state == "RUNNING", (agent.explain()["recent_kills"], [(c.container_id, c.exit_status) for c in cluster.rm.scheduler.finished], agent.metrics.render() if hasattr(agent.metrics, "render") else "")
        assert agent.metrics.get("kills_total") == 0  # nothing was killed on the node itself
        preempted = [c for c in cluster.rm.scheduler.finished if c.exit_status == PREEMPTED]
        newest = max((c for c in preempted + cluster.rm.scheduler.running(cluster.nm.node_id) if not c.is_am),
                     key=lambda c: c.seq)
        assert newest in preempted and all(not c.is_am for c in preempted)
        posts = cluster.rm.posts("/ws/v1/cluster/nodes/")
        assert posts and all(p["body"]["overCommitTimeout"] == 0 for p in posts)  # one timeout, deliberately
        assert [k["path"] for k in agent.explain()["recent_kills"]][:1] == ["rm-preemption"]
    finally:
        agent.close()
        cluster.close()


def test_local_path_fails_attempts_which_is_why_33_uses_the_rm(node, spiky, tmp_path):
    cluster = FakeYarnCluster(node, memory_mb=2048, vcores=8)
    agent = make_agent(node, tmp_path, cluster.rm.url, cluster.nm.url, **_agent_flags(reclaim="local"))
    try:
        job = cluster.submit(maps=6, map_memory_mb=200, am_memory_mb=200)
        run_until(agent, lambda: _alive_maps(cluster) == 6 and len(cluster.nm.processes) == 7)
        assert agent.explain()["reclaim"]["path"] == "local-kill"
        Node.spike(spiky)
        run_until(agent, lambda: job.failed_attempts >= 1)
        assert job.killed_attempts == 0 and agent.metrics.get("kills_total") >= 1
    finally:
        agent.close()
        cluster.close()


def test_rm_too_slow_for_the_reserve_falls_back_to_a_local_kill(node, spiky, tmp_path):
    cluster = FakeYarnCluster(node, memory_mb=2048, vcores=8)
    # the RM would wait a minute before preempting: the agent waits 0.5 s, then kills on the node
    agent = make_agent(node, tmp_path, cluster.rm.url, cluster.nm.url,
                       **_agent_flags(rm_reclaim_timeout_ms="60000", rm_reclaim_wait_s="0.5"))
    try:
        job = cluster.submit(maps=6, map_memory_mb=200, am_memory_mb=200)
        run_until(agent, lambda: _alive_maps(cluster) == 6 and len(cluster.nm.processes) == 7)
        Node.spike(spiky)
        run_until(agent, lambda: agent.metrics.get("reclaim_fallbacks_total", why="rm_slow") >= 1)
        run_until(agent, lambda: agent.metrics.get("kills_total") >= 1)
        run_until(agent, lambda: job.failed_attempts >= 1)
    finally:
        agent.close()
        cluster.close()


def test_memory_only_calculator_kill_loop_fails_the_job_and_the_scheduler_check_stops_it(node, tmp_path):
    """A real 3.2.1 with the default calculator: five 1-vcore maps on a node advertised at 3 vcores, the
    agent killed each in turn, and the job failed. The check notices instead, alarms and kills nothing."""
    flags = {"capacity_cores": "4", "reserve_cores": "1", "capacity_memory_mb": "8192",
             "reserve_memory_mb": "1024", "cooldown_s": "0", "advertise_hold_s": "0.5", "reclaim": "local"}
    # 1. the loop: the check is off (a grace no container ever outlives)
    loop = FakeYarnCluster(node, memory_mb=8192, vcores=4, calculator=DEFAULT_CALCULATOR)
    agent = make_agent(node, tmp_path / "loop", loop.rm.url, loop.nm.url, scheduler_check_grace_s="1e9", **flags)
    try:
        run_until(agent, lambda: agent.explain()["yarn"]["applied"] is not None)
        job = loop.submit(maps=5, map_memory_mb=512, am_memory_mb=512, maxattempts=2)
        run_until(agent, lambda: job.state == "FAILED", timeout_s=40)
        assert agent.metrics.get("kills_total") >= 2
    finally:
        agent.close()
        loop.close()
    # 2. the same with the check on: no kill, an alarm, an explanation
    node.cleanup()
    fresh = Node()
    cluster = FakeYarnCluster(fresh, memory_mb=8192, vcores=4, calculator=DEFAULT_CALCULATOR)
    agent = make_agent(fresh, tmp_path / "check", cluster.rm.url, cluster.nm.url, scheduler_check_grace_s="0.5",
                       **flags)
    try:
        run_until(agent, lambda: agent.explain()["yarn"]["applied"] is not None)
        time.sleep(0.6)
        job = cluster.submit(maps=5, map_memory_mb=512, am_memory_mb=512, maxattempts=2)
        run_until(agent, lambda: len(cluster.nm.processes) == 6)
        run_until(agent, lambda: agent.metrics.get("scheduler_ignores_advertised", resource="cores") == 1)
        for _ in range(8):
            agent.tick()
            time.sleep(0.1)
        assert agent.metrics.get("kills_total") == 0 and job.failed_attempts == 0
        explained = agent.explain()
        assert explained["scheduler"]["ignores_advertised"] == ["cores"]
        assert "DominantResourceCalculator" in explained["scheduler"]["explanation"]
    finally:
        agent.close()
        cluster.close()
        fresh.cleanup()


def test_hadoop_321_local_path_shrinks_before_killing_and_never_kills_an_am(node, tmp_path):
    """Issue 36 D2, a real 3.2.1 with the agent on the local-kill path: a primary load ramping up, each
    ``yarn rmadmin -updateNodeResource`` a 1-3 s JVM start, run one after the other: the RM refilled
    the freed room before the shrink landed, 7 kills in 9.2 s, both AM attempts among them, job
    FAILED. The agent must shrink the node first and kill only once the shrink is in force."""
    cluster = FakeYarnCluster(node, memory_mb=2048, vcores=8, version="3.2.1")
    yarn_bin, _ = fake_yarn_cli(str(tmp_path), rm_url=cluster.rm.url, delay_s=1.5)  # the JVM start
    primary = node.primary(spike_mb=150)
    node.settle()
    agent = make_agent(node, tmp_path, cluster.rm.url, cluster.nm.url,
                       **_agent_flags(yarn_bin=yarn_bin, cooldown_s="5", shrink_wait_s="10", interval_s="0.5",
                                     http_timeout_s="2"))
    try:
        run_until(agent, lambda: agent.explain()["yarn"]["applied"] is not None)
        assert agent.explain()["reclaim"]["path"] == "local-kill"
        job = cluster.submit(maps=16, map_memory_mb=200, am_memory_mb=200)
        run_until(agent, lambda: _alive_maps(cluster) >= 6)
        for _ in range(3):  # +450 MB over ~2 s (the reserve is 600): three 200 MB maps must go, not the AM
            Node.spike(primary)
            for _ in range(3):
                agent.tick()
                time.sleep(0.25)
        run_until(agent, lambda: agent.explain()["decision"]["deficit"]["memory_mb"] <= 0
                  and not agent.executor.dying(), timeout_s=40)
        for _ in range(8):  # settled: no more kills
            agent.tick()
            time.sleep(0.25)
        ams = [c for c in cluster.rm.scheduler.finished if c.is_am]
        assert ams == [] and job.attempt == 1 and job.state == "RUNNING"
        kills = agent.metrics.get("kills_total")
        sched = cluster.rm.scheduler
        timeline = sorted(  # for the failure message: the node sizes the RM took and the grants
            [(round(t, 2), " ".join(a[2:])) for t, a in zip(cluster.rm.cli_times, cluster.rm.cli_calls, strict=True)]
            + [(round(c.allocated_s, 2), c.container_id[-6:]) for n in sched.nodes.values()
               for c in n.containers.values()])
        assert 2 <= kills <= 3, (timeline, agent.explain()["recent_kills"])  # per 200 MB needed, no refill
        assert sum(1 for c in sched.finished if not c.is_am) == kills  # nothing refilled was killed
        assert job.failed_attempts == kills
    finally:
        agent.close()
        cluster.close()
