"""The executor with real processes: group kills, SIGKILL escalation, exits mid-decision, pid safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from agent.attribute import attribute
from agent.decide import DecideState, Decision, Kill, Policy, decide
from agent.executor import Executor
from agent.metrics import Metrics
from agent.reclaim import ReclaimPath, ReclaimPlan
from agent.sampler import PsutilSampler
from tests.agent.procs import wait_until

IGNORE_TERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n" \
              "time.sleep(3600)\n"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def decision_with(kills: tuple[Kill, ...], busy: bool = False) -> Decision:
    return Decision(time.time(), False, kills, 1, 100, 1, 100, busy, 1.0, 0.0, 0.0, 0.0, ())


def kill_for(pid: int, cid: str = "container_1_0001_01_000001") -> Kill:
    proc = psutil.Process(pid)
    return Kill(cid, ((pid, proc.create_time()),), (os.getpgid(pid),), 1.0, 0.0, "test")


def test_container_that_exits_by_itself_mid_decision_is_no_crash(node, tmp_path):
    containers = [node.container(f"container_1_0001_01_00000{i}", memory_mb=20) for i in (2, 3)]
    sampler = PsutilSampler(scope_root_pid=node.pid)
    view = attribute(sampler.sample())
    policy = Policy(capacity_cores=64, capacity_memory_mb=1, reserve_cores=1, reserve_memory_mb=0,
                    stale_after_s=60)
    decision = decide(view, time.time(), policy, DecideState())
    assert {k.container_id for k in decision.kills} == {"container_1_0001_01_000003",
                                                        "container_1_0001_01_000002"}
    os.killpg(containers[1].pid, signal.SIGKILL)  # the youngest exits between decide and act
    assert wait_until(lambda: not alive(containers[1].pid), 10)
    executor = Executor(str(tmp_path), Metrics(), kill_grace_s=5)
    result = executor.apply(decision)
    assert result.already_gone == ("container_1_0001_01_000003",)
    assert result.signalled == ("container_1_0001_01_000002",)
    assert wait_until(lambda: not alive(containers[0].pid), 10)
    assert executor.metrics.get("kills_total") == 1


def test_sigkill_after_grace_when_sigterm_is_ignored(node, tmp_path):
    env = dict(os.environ, CONTAINER_ID="container_1_0001_01_000009")
    child = node._spawn(IGNORE_TERM, [], env)
    executor = Executor(str(tmp_path), Metrics(), kill_grace_s=0.3)
    result = executor.apply(decision_with((kill_for(child.pid, "container_1_0001_01_000009"),)))
    assert result.signalled == ("container_1_0001_01_000009",)
    time.sleep(0.2)
    assert alive(child.pid) and executor.dying() == {"container_1_0001_01_000009"}
    time.sleep(0.3)
    assert executor.apply(decision_with(())).escalated == ("container_1_0001_01_000009",)
    assert wait_until(lambda: not alive(child.pid), 10)
    executor.apply(decision_with(()))
    assert executor.killer.dying() == frozenset()  # its processes are gone: nothing left to signal
    # ...but the kill is remembered (the NM may still list the container), see kill_memory_s
    assert executor.dying() == {"container_1_0001_01_000009"}
    assert executor.metrics.get("kill_signals_total", signal="SIGKILL") == 1


def test_shared_process_group_is_not_killed_as_a_group(tmp_path):
    """A container process that shares its group with a non-container process: only it is signalled."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        container = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                     process_group=bystander.pid,
                                     env=dict(os.environ, CONTAINER_ID="container_1_0001_01_000007"))
        assert os.getpgid(container.pid) == bystander.pid
        executor = Executor(str(tmp_path), Metrics(), kill_grace_s=5)
        executor.apply(decision_with((kill_for(container.pid, "container_1_0001_01_000007"),)))
        assert container.wait(timeout=10) == -signal.SIGTERM
        time.sleep(0.2)
        assert bystander.poll() is None, "the bystander in the same group must live"
    finally:
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait(timeout=10)


def test_reused_pid_is_never_signalled(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        stale = Kill("container_1_0001_01_000008", ((victim.pid, psutil.Process(victim.pid).create_time() - 100),),
                     (victim.pid,), 1.0, 0.0, "test")  # same pid, different start time: another process
        result = Executor(str(tmp_path), Metrics()).apply(decision_with((stale,)))
        assert result.already_gone == ("container_1_0001_01_000008",)
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_state_files_written_atomically_only_on_change_with_heartbeat(tmp_path):
    executor = Executor(str(tmp_path), Metrics(), heartbeat_s=0.2)
    executor.apply(decision_with((), busy=True))
    assert (tmp_path / "datanode-busy").read_text() == "busy\n"
    assert not (tmp_path / "node-label").exists()  # no label learnt yet: nothing to say
    executor.set_label("constant-2")
    executor.apply(decision_with((), busy=False))
    assert (tmp_path / "datanode-busy").read_text() == "idle\n"
    assert (tmp_path / "node-label").read_text() == "constant-2\n"
    writes = executor.busy_file.writes
    mtime = os.stat(tmp_path / "datanode-busy").st_mtime_ns
    executor.apply(decision_with((), busy=False))
    assert executor.busy_file.writes == writes  # unchanged: no write
    time.sleep(0.3)
    executor.apply(decision_with((), busy=False))
    assert executor.busy_file.writes == writes
    assert os.stat(tmp_path / "datanode-busy").st_mtime_ns > mtime  # ... but the heartbeat touched it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_child_forked_after_the_sample_dies_with_its_container(node, tmp_path):
    """The container forks after it was sampled: the group kill still takes the newcomer along."""
    code = ("import subprocess, sys, time\nprint('ready', flush=True)\n"
            "sys.stdin = open('/dev/null')\n"
            "time.sleep(0.5)\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
            "open(sys.argv[1], 'w').write(str(child.pid))\n"
            "time.sleep(3600)\n")
    pid_file = tmp_path / "grandchild.pid"
    env = dict(os.environ, CONTAINER_ID="container_1_0001_01_000011")
    parent = node._spawn(code, [str(pid_file)], env)
    kill = kill_for(parent.pid, "container_1_0001_01_000011")  # sampled before the fork
    assert wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 10)
    grandchild = int(pid_file.read_text())
    Executor(str(tmp_path / "state"), Metrics(), kill_grace_s=5).apply(decision_with((kill,)))
    assert wait_until(lambda: not alive(grandchild) and not alive(parent.pid), 10)


class _RecordingYarn:
    """Stands in for ``YarnSync`` (the YARN adapter; its HTTP side is tested in test_yarn.py)."""

    def __init__(self) -> None:
        self.remote_kills: list[str] = []
        self.reclaims: list[tuple[int, int]] = []
        self.reclaim_failures = 0
        self.wants: list[tuple[int, int]] = []
        self.applied: tuple[int, int] | None = (4096, 4)
        self.last_error: str | None = None

    def in_force(self, memory_mb: int, vcores: int) -> bool:
        return self.applied is not None and self.applied[0] <= memory_mb and self.applied[1] <= vcores

    def reclaim(self, memory_mb: int, vcores: int) -> None:
        self.reclaims.append((memory_mb, vcores))

    def remote_kill(self, container_id: str) -> None:
        self.remote_kills.append(container_id)

    def want(self, memory_mb: int, cores: int) -> None:
        self.wants.append((memory_mb, cores))

    def stop(self) -> None:
        pass


def test_remote_kill_is_sent_once_and_counts_as_dying_for_the_kill_memory(tmp_path):
    # A container YARN launched but with no local process yet can only be killed through the RM; the NM
    # keeps listing it until the RM acts, so later rounds must not ask again (no kill loop).
    now = [1000.0]
    yarn = _RecordingYarn()
    executor = Executor(str(tmp_path), Metrics(), yarn=yarn, kill_memory_s=30.0,  # type: ignore[arg-type]
                        clock=lambda: now[0])
    cid = "container_1_0001_01_000004"
    remote = Kill(cid, (), (), 1.0, 128.0, "test")
    assert executor.apply(decision_with((remote,))).remote == (cid,)
    assert cid in executor.dying()
    # A kill through the RM is a kill like any other (issue 36 D3): counted and listed with its path.
    assert executor.metrics.get("kills_total") == 1
    assert [(k["container"], k["path"]) for k in executor.kill_log] == [(cid, "rm-signal")]
    now[0] += 10.0
    assert executor.apply(decision_with((remote,))).remote == ()
    assert yarn.remote_kills == [cid]
    now[0] += 25.0  # past the grace period: the RM never acted, so it may be asked again
    assert cid not in executor.dying()
    assert executor.apply(decision_with((remote,))).remote == (cid,)
    assert yarn.remote_kills == [cid, cid]
    assert executor.metrics.get("kills_total") == 2 and len(executor.kill_log) == 2


def test_locally_killed_container_stays_dying_after_its_processes_are_gone(node, tmp_path):
    # The NM lists a killed container until its next heartbeat; the agent must not count it as live
    # again (and kill it a second time through YARN) once its processes have exited.
    now = [0.0]
    executor = Executor(str(tmp_path), Metrics(), kill_grace_s=5, kill_memory_s=30.0, clock=lambda: now[0])
    container = node.container("container_1_0001_01_000007", memory_mb=10)
    cid = "container_1_0001_01_000007"
    assert executor.apply(decision_with((kill_for(container.pid, cid),))).signalled == (cid,)
    assert wait_until(lambda: not alive(container.pid), 10)
    executor.apply(decision_with(()))  # the killer notices the processes are gone
    assert cid in executor.dying()
    now[0] += 31.0
    assert cid not in executor.dying()


CHOSEN = "container_1_0001_01_000003"


def _reclaim_left_to_the_rm(node, tmp_path, now: list[float], listed: dict[str, tuple[float, float]]):
    """An executor on the RM path that has just asked the RM to take ``CHOSEN`` back (wait 1 s)."""
    yarn = _RecordingYarn()
    executor = Executor(str(tmp_path), Metrics(), yarn=yarn, rm_reclaim_wait_s=1.0,  # type: ignore[arg-type]
                        clock=lambda: now[0])
    chosen = node.container(CHOSEN, memory_mb=5)
    plan = ReclaimPlan((kill_for(chosen.pid, CHOSEN),), (), 512, 1, False)
    assert executor.apply(decision_with(plan.via_rm), plan, listed).reclaimed == (CHOSEN,)
    assert yarn.reclaims == [(512, 1)]
    return executor, chosen


def test_rm_preempting_another_container_than_chosen_counts_and_nothing_more_is_killed(node, tmp_path):
    # The agent chose c3 (youngest process); the RM preempted c4 (newest allocation) instead, freeing
    # as much. Past the wait the agent must not kill c3 as well: one need, one kill.
    now = [0.0]
    listed = {CHOSEN: (1.0, 512.0), "container_1_0001_01_000004": (1.0, 512.0),
              "container_1_0001_01_000002": (1.0, 512.0)}
    executor, chosen = _reclaim_left_to_the_rm(node, tmp_path, now, listed)
    now[0] += 2.0
    del listed["container_1_0001_01_000004"]  # the RM's pick
    result = executor.apply(decision_with(()), None, listed)
    assert result.fallback == () and result.signalled == ()
    assert executor.metrics.get("rm_reclaimed_total") == 1 and alive(chosen.pid)


def test_rm_that_does_not_act_in_time_is_overtaken_by_a_local_kill(node, tmp_path):
    now = [0.0]
    listed = {CHOSEN: (1.0, 512.0)}
    executor, chosen = _reclaim_left_to_the_rm(node, tmp_path, now, listed)
    assert executor.apply(decision_with(()), None, listed).fallback == ()  # still within the wait
    now[0] += 1.5
    assert executor.apply(decision_with(()), None, listed).fallback == (CHOSEN,)
    assert wait_until(lambda: not alive(chosen.pid), 10)
    assert executor.metrics.get("reclaim_fallbacks_total", why="rm_slow") == 1


def _local_plan(kills: tuple[Kill, ...], urgent: bool = False) -> ReclaimPlan:
    return ReclaimPlan((), kills, 0, 0, urgent, ReclaimPath.LOCAL_KILL)


def test_local_path_shrinks_the_node_first_and_kills_once_the_shrink_is_in_force(node, tmp_path):
    """Issue 36 D2: killing before the RM held the smaller size let it refill the freed room (a real
    3.2.1 took 1-3 s per ``yarn rmadmin``), and the newcomers were killed in turn: a kill loop."""
    now = [0.0]
    yarn = _RecordingYarn()
    executor = Executor(str(tmp_path), Metrics(), yarn=yarn, shrink_wait_s=3.0,  # type: ignore[arg-type]
                        clock=lambda: now[0])
    cid = "container_1_0001_01_000005"
    victim = node.container(cid, memory_mb=5)
    kill = kill_for(victim.pid, cid)
    decision = decision_with((kill,))  # advertises 100 MB / 1 vcore
    result = executor.apply(decision, _local_plan((kill,)))
    assert yarn.wants[0] == (100, 1) and result.held == (cid,) and result.signalled == ()
    assert alive(victim.pid) and executor.metrics.get("kills_total") == 0
    now[0] += 1.0
    yarn.applied = (100, 1)  # the shrink landed
    assert executor.apply(decision, _local_plan((kill,))).signalled == (cid,)
    assert wait_until(lambda: not alive(victim.pid), 10)


def test_urgent_kills_go_at_once_but_only_once_before_the_shrink_lands(node, tmp_path):
    now = [0.0]
    yarn = _RecordingYarn()
    executor = Executor(str(tmp_path), Metrics(), yarn=yarn, shrink_wait_s=3.0,  # type: ignore[arg-type]
                        clock=lambda: now[0])
    first, refill = "container_1_0001_01_000005", "container_1_0001_01_000006"
    a = kill_for(node.container(first, memory_mb=5).pid, first)
    assert executor.apply(decision_with((a,)), _local_plan((a,), urgent=True)).signalled == (first,)
    # the RM refilled the room before the shrink landed: that one waits for the shrink, urgent or not
    b_proc = node.container(refill, memory_mb=5)
    b = kill_for(b_proc.pid, refill)
    now[0] += 1.0
    assert executor.apply(decision_with((b,)), _local_plan((b,), urgent=True)).held == (refill,)
    now[0] += 3.0  # the RM never took the shrink: past shrink_wait_s the kill goes anyway
    assert executor.apply(decision_with((b,)), _local_plan((b,), urgent=True)).signalled == (refill,)


def test_no_wait_for_a_shrink_while_the_rm_fails(node, tmp_path):
    yarn = _RecordingYarn()
    yarn.last_error = "connection refused"
    executor = Executor(str(tmp_path), Metrics(), yarn=yarn)  # type: ignore[arg-type]
    cid = "container_1_0001_01_000005"
    kill = kill_for(node.container(cid, memory_mb=5).pid, cid)
    assert executor.apply(decision_with((kill,)), _local_plan((kill,))).signalled == (cid,)
