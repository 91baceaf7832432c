"""The fake RM/NM answer as real 3.2.1 / 3.3.6 daemons did (issue 12); each case failed on the old fakes."""

from __future__ import annotations

import json
import urllib.request

from tests.agent.fake_scheduler import (
    DOMINANT_CALCULATOR,
    EXIT_SIGKILL,
    EXIT_SIGTERM,
    PREEMPTED,
    SUCCESS,
    FakeMapReduceJob,
    FakeScheduler,
)
from tests.agent.fakes import FakeResourceManager

NODE = "worker-1.example:8041"


def cluster(calculator: str | None = None, version: str = "3.3.6", clock=None) -> FakeScheduler:
    kwargs = {} if calculator is None else {"calculator": calculator}
    sched = FakeScheduler(version, clock=clock or (lambda: 0.0), **kwargs)
    sched.add_node(NODE, 8192, 3)
    return sched


def test_default_calculator_counts_memory_only_and_dominant_counts_vcores() -> None:
    for calculator, expected in ((None, 6), (DOMINANT_CALCULATOR, 3)):  # AM + maps
        sched = cluster(calculator)
        FakeMapReduceJob(sched, 1, maps=5, map_memory_mb=1024, am_memory_mb=1024)
        assert len(sched.node_heartbeat(NODE)) == expected, calculator


def test_overcommit_timeout_zero_preempts_newest_first_never_the_am() -> None:
    sched = cluster(DOMINANT_CALCULATOR)
    job = FakeMapReduceJob(sched, 1, maps=2, map_memory_mb=1024)
    granted = sched.node_heartbeat(NODE)
    am, first, second = granted
    assert am.is_am
    sched.update_node_resource(NODE, 2048, 3, 0)
    assert second.exit_status == PREEMPTED and first.state == "RUNNING" and am.state == "RUNNING"
    sched.update_node_resource(NODE, 0, 0, 0)
    assert first.exit_status == PREEMPTED and am.state == "RUNNING"  # the AM is never preempted
    assert job.killed_attempts == 2 and job.failed_attempts == 0 and job.state == "RUNNING"


def test_timeout_waits_then_kills_on_the_heartbeat_after_it() -> None:
    now = [0.0]
    sched = cluster(DOMINANT_CALCULATOR, clock=lambda: now[0])
    FakeMapReduceJob(sched, 1, maps=2)
    _, _, second = sched.node_heartbeat(NODE)
    sched.update_node_resource(NODE, 2048, 3, 2000)
    assert second.state == "RUNNING" and second.marked_for_preemption
    now[0] = 1.9
    sched.node_heartbeat(NODE)
    assert second.state == "RUNNING"
    now[0] = 2.0
    sched.node_heartbeat(NODE)
    assert second.exit_status == PREEMPTED


def test_timeout_sticks_and_an_equal_size_is_a_no_op() -> None:
    sched = cluster(DOMINANT_CALCULATOR)
    FakeMapReduceJob(sched, 1, maps=3)
    _, a, b = sched.node_heartbeat(NODE)[:3]
    sched.update_node_resource(NODE, 8192, 3, 0)  # equal to the current size: nothing changes
    assert sched.nodes[NODE].overcommit_timeout_ms == -1
    sched.update_node_resource(NODE, 8000, 3, 0)
    assert sched.nodes[NODE].overcommit_timeout_ms == 0
    sched.update_node_resource(NODE, 2048, 3, -1)  # a later -1 still kills: the 0 stuck
    assert b.exit_status == PREEMPTED and a.state == "RUNNING"
    sched.reregister(NODE)
    sched.update_node_resource(NODE, 1024, 3, -1)
    assert a.state == "RUNNING"  # after re-registration -1 means "never"


def test_hadoop_32_lets_the_node_sit_overcommitted() -> None:
    sched = cluster(DOMINANT_CALCULATOR, version="3.2.1")
    FakeMapReduceJob(sched, 1, maps=2)
    granted = sched.node_heartbeat(NODE)
    sched.update_node_resource(NODE, 1024, 1, 0)
    assert all(c.state == "RUNNING" for c in granted)


def test_mapreduce_counts_only_killed_statuses_as_killed_and_fails_at_maxattempts() -> None:
    sched = cluster(DOMINANT_CALCULATOR)
    job = FakeMapReduceJob(sched, 1, maps=1, maxattempts=4)
    sched.node_heartbeat(NODE)
    for status in (PREEMPTED, -100, -108):  # ABORTED, KILLED_BY_CONTAINER_SCHEDULER
        (c,) = [c for c in sched.running(NODE) if not c.is_am]
        sched.complete(c.container_id, status)
        sched.node_heartbeat(NODE)
    assert job.killed_attempts == 3 and job.failed_attempts == 0
    for status in (EXIT_SIGTERM, EXIT_SIGKILL, -105, EXIT_SIGTERM):  # local kill, signal, KILLED_BY_APPMASTER
        (c,) = [c for c in sched.running(NODE) if not c.is_am]
        sched.complete(c.container_id, status)
        sched.node_heartbeat(NODE)
    assert job.failed_attempts == 4 and job.state == "FAILED"
    ok = cluster()
    done = FakeMapReduceJob(ok, 2, maps=1)
    ok.node_heartbeat(NODE)
    ok.complete([c for c in ok.running(NODE) if not c.is_am][0].container_id, SUCCESS)
    assert done.state == "SUCCEEDED"


def _post(url: str, body: object) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return int(answer.status)


def test_rm_zeroes_a_node_for_a_wrapped_resource_body_and_reports_its_version() -> None:
    rm = FakeResourceManager(calculator=DOMINANT_CALCULATOR)
    try:
        rm.scheduler.add_node(NODE, 8192, 8)
        url = f"{rm.url}/ws/v1/cluster/nodes/{NODE.replace(':', '%3A')}/resource"
        wrapped = {"resourceOption": {"resource": {"memory": 4096, "vCores": 4}, "overCommitTimeout": -1}}
        assert _post(url, wrapped) == 200
        assert (rm.scheduler.nodes[NODE].memory_mb, rm.scheduler.nodes[NODE].vcores) == (0, 0)
        assert _post(url, {"resource": {"memory": 4096, "vCores": 4}, "overCommitTimeout": -1}) == 200
        assert (rm.scheduler.nodes[NODE].memory_mb, rm.scheduler.nodes[NODE].vcores) == (4096, 4)
        with urllib.request.urlopen(f"{rm.url}/ws/v1/cluster/info", timeout=5) as answer:
            info = json.load(answer)["clusterInfo"]
        assert info["hadoopVersion"] == "3.3.6" and info["resourceManagerVersion"] == "3.3.6"
    finally:
        rm.close()
    old = FakeResourceManager(mode="404")
    try:
        with urllib.request.urlopen(f"{old.url}/ws/v1/cluster/info", timeout=5) as answer:
            assert json.load(answer)["clusterInfo"]["hadoopVersion"] == "3.2.1"
    finally:
        old.close()


def test_an_am_death_starts_a_new_attempt_and_the_second_fails_the_job() -> None:
    # MapReduce's default mapreduce.am.max-attempts is 2 (the real 3.2.1 run of issue 36 D2: both AM
    # attempts killed on one node, job FAILED); a new attempt's AM is container 1 of attempt 2.
    sched = cluster(DOMINANT_CALCULATOR)
    job = FakeMapReduceJob(sched, 1, maps=2, map_memory_mb=512, am_memory_mb=512)
    first = sched.node_heartbeat(NODE)
    am = next(c for c in first if c.is_am)
    assert am.container_id.endswith("_01_000001")
    sched.complete(am.container_id, EXIT_SIGTERM)
    assert all(c.state == "COMPLETE" for c in first) and job.state == "RUNNING" and job.failed_attempts == 0
    second = sched.node_heartbeat(NODE)
    am2 = next(c for c in second if c.is_am)
    assert am2.container_id.endswith("_02_000001") and len(second) == 3  # the AM and both maps again
    sched.complete(am2.container_id, EXIT_SIGKILL)
    assert job.state == "FAILED"
