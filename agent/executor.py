"""Stage 4, act: the one component that touches processes, YARN and files.

Every write goes through here and is skipped when it would change nothing:

- kills (both modes, the fast path): SIGTERM to the container's process group when every member of
  the group belongs to the container (else to its processes one by one), SIGKILL to what is left
  after ``kill_grace_s``. A pid is signalled only if its start time still matches the sample, so a
  reused pid (a primary process!) is never hit. A container that already exited is not an error.
- YARN (yarn mode): the node resource (REST, else ``yarn rmadmin``), kept in ``dynamic-resources.xml``
  too; remote kill for containers with no local process. These run on a worker thread
  (``agent.yarn_sync``) so an unreachable ResourceManager never delays local protection; failures are
  counted, logged at most once per ``error_log_interval_s``, and retried on the next tick.
- RM reclaims (yarn mode on Hadoop 3.3+, see ``agent.reclaim``): a kill the plan leaves to the RM is
  remembered with a deadline; if the container's processes are still alive then (or the RM write
  failed), it is killed locally after all.
- local kills in yarn mode: the node's shrink goes to the RM first and the kills wait until it is in
  force (at most ``shrink_wait_s``; not at all when the memory reserve is used up). On a real 3.2.1
  each ``yarn rmadmin`` took 1-3 s; killing before it landed let the RM refill the freed room with new
  containers, which were killed in turn (7 kills in 9 s, both AM attempts, job failed).
- state files ``datanode-busy`` and ``node-label`` (atomic, heartbeat).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

from agent.decide import Decision, Kill
from agent.metrics import Metrics
from agent.reclaim import ReclaimPath, ReclaimPlan
from agent.statefiles import StateFile
from agent.yarn_sync import YarnSync

logger = logging.getLogger(__name__)


@dataclass
class _Dying:
    kill: Kill
    deadline_s: float
    killed_hard: bool = False


@dataclass(frozen=True)
class ActResult:
    signalled: tuple[str, ...] = ()  # containers sent SIGTERM this tick
    already_gone: tuple[str, ...] = ()  # chosen, but every process had exited by itself
    remote: tuple[str, ...] = ()  # no local process: asked YARN to kill them (counted as kills too)
    escalated: tuple[str, ...] = ()  # SIGKILL after the grace period
    reclaimed: tuple[str, ...] = ()  # left to the RM's over-commit preemption this tick
    fallback: tuple[str, ...] = ()  # the RM did not kill in time (or failed): killed locally
    held: tuple[str, ...] = ()  # chosen, but waiting for the node's shrink to be in force in the RM


@dataclass
class _Reclaim:
    kill: Kill
    deadline_s: float
    failures_at_start: int
    listed: dict[str, tuple[float, float]]  # the NM's containers (cores, MB) when the RM was asked


def _alive_matching(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _container_of(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get("CONTAINER_ID")
    except (psutil.Error, OSError):
        return None


def _group_members(pgid: int) -> set[int]:
    members = set()
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                members.add(pid)
        except OSError:
            continue
    return members


class ProcessKiller:
    def __init__(self, grace_s: float, metrics: Metrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self.metrics = metrics
        self._clock = clock
        self._dying: dict[str, _Dying] = {}
        self._own = {os.getpid(), os.getpgid(0)}

    def _signal(self, kill: Kill, sig: signal.Signals) -> int:
        """Signal the container's live processes; returns how many were alive."""
        alive = [pid for pid, ctime in kill.processes if _alive_matching(pid, ctime)]
        if not alive:
            return 0
        pids = set(alive)
        mine = {pid for pid, _ in kill.processes}
        done: set[int] = set()
        for pgid in kill.pgids:
            if pgid in self._own or pgid <= 1:
                continue
            members = _group_members(pgid)
            # the group holds nothing but this container (newcomers since the sample must carry its id)
            if members and all(pid in mine or _container_of(pid) == kill.container_id for pid in members):
                try:
                    os.killpg(pgid, sig)
                    done |= members
                except OSError:
                    pass
        for pid in pids - done:
            if pid in self._own:
                continue
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        self.metrics.inc("kill_signals_total", signal=sig.name)
        return len(alive)

    def kill(self, kill: Kill) -> bool:
        """SIGTERM now, SIGKILL later; False when the container had already exited."""
        if kill.container_id in self._dying:
            return True
        if self._signal(kill, signal.SIGTERM) == 0:
            return False
        self._dying[kill.container_id] = _Dying(kill, self._clock() + self.grace_s)
        return True

    def poll(self) -> list[str]:
        """Escalate to SIGKILL past the grace period; forget containers whose processes are gone."""
        escalated = []
        now = self._clock()
        for cid, entry in list(self._dying.items()):
            if not any(_alive_matching(pid, ct) for pid, ct in entry.kill.processes):
                del self._dying[cid]
            elif now >= entry.deadline_s and not entry.killed_hard:
                self._signal(entry.kill, signal.SIGKILL)
                entry.killed_hard = True
                escalated.append(cid)
        return escalated

    def dying(self) -> frozenset[str]:
        return frozenset(self._dying)


class Executor:
    def __init__(self, state_dir: str, metrics: Metrics, *, kill_grace_s: float = 2.0, heartbeat_s: float = 30.0,
                 yarn: YarnSync | None = None, kill_memory_s: float = 30.0, rm_reclaim_wait_s: float = 3.0,
                 shrink_wait_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        os.makedirs(state_dir, exist_ok=True)
        self.metrics = metrics
        self.killer = ProcessKiller(kill_grace_s, metrics)
        # The NodeManager keeps listing a killed container until its next heartbeat (a container killed
        # through YARN, with no local process, until the RM acts: a JVM start plus a heartbeat). So every
        # container we kill, locally or through YARN, counts as dying for ``kill_memory_s``: the next
        # rounds count it as freed, and neither kill it again nor kill another one in its place.
        self.kill_memory_s = kill_memory_s
        self._clock = clock
        self._killed: dict[str, float] = {}  # container id -> time until which it counts as dying
        self.yarn = yarn
        self.busy_file = StateFile(os.path.join(state_dir, "datanode-busy"), heartbeat_s)
        self.label_file = StateFile(os.path.join(state_dir, "node-label"), heartbeat_s)
        self.label: str | None = (self.label_file.content or "").strip() or None
        self.kill_log: list[dict[str, object]] = []  # recent kills with reasons, for /explain
        self.rm_reclaim_wait_s = rm_reclaim_wait_s
        self._reclaiming: dict[str, _Reclaim] = {}  # left to the RM: container id -> local-kill deadline
        self.shrink_wait_s = shrink_wait_s
        self._shrink_since: float | None = None  # kills held since then for the node's shrink
        self._killed_unshrunk = False  # killed before the shrink was in force: the next kill waits for it

    def dying(self) -> frozenset[str]:
        now = self._clock()
        self._killed = {cid: until for cid, until in self._killed.items() if until > now}
        return self.killer.dying() | frozenset(self._killed) | frozenset(self._reclaiming)

    def reclaiming(self) -> dict[str, float]:
        """Containers left to the RM, with the seconds left before the agent kills them itself."""
        now = self._clock()
        return {cid: round(r.deadline_s - now, 3) for cid, r in self._reclaiming.items()}

    def _kill_locally(self, kill: Kill, decision: Decision, signalled: list[str], gone: list[str]) -> None:
        try:
            if self.killer.kill(kill):
                signalled.append(kill.container_id)
            else:
                gone.append(kill.container_id)
        except Exception as exc:  # a kill must never take the loop down
            self.metrics.inc("errors_total", kind="kill")
            logger.warning("killing %s failed: %s", kill.container_id, exc)
            return
        if kill.container_id in signalled:
            self._killed[kill.container_id] = self._clock() + self.kill_memory_s
            self.metrics.inc("kills_total")
        self._log_kill(kill, decision, "local-kill", exited_by_itself=kill.container_id in gone)

    def _kill_remotely(self, kill: Kill, decision: Decision, remote: list[str]) -> None:
        """No local process to signal: ask the RM to kill the container (``yarn container -signal`` on
        3.2). A kill like the others: counted, listed in ``kill_log`` and reported by the loop."""
        assert self.yarn is not None
        self.yarn.remote_kill(kill.container_id)
        self._killed[kill.container_id] = self._clock() + self.kill_memory_s
        self.metrics.inc("kills_total")
        self._log_kill(kill, decision, "rm-signal")
        remote.append(kill.container_id)

    def _log_kill(self, kill: Kill, decision: Decision, path: str, *, exited_by_itself: bool = False) -> None:
        self.kill_log.append({"container": kill.container_id, "at": decision.timestamp, "reason": kill.reason,
                              "exited_by_itself": exited_by_itself, "path": path})
        del self.kill_log[:-20]

    def _follow_reclaims(self, decision: Decision, signalled: list[str], gone: list[str], remote: list[str],
                         listed: Mapping[str, tuple[float, float]] | None) -> list[str]:
        """Forget reclaims the RM carried out; kill locally what it did not in time (or could not).

        The RM picks its own victims (newest first); when it took other containers than the agent
        chose, the allocation they freed counts for the agent's choice (``listed``: the NM's
        containers now, id -> (cores, MB)), so the agent does not kill a second container for one need.
        """
        fallback = []
        now = self._clock()
        failures = self.yarn.reclaim_failures if self.yarn is not None else 0
        credit: dict[int, list[float]] = {}  # per reclaim round: allocation the RM freed elsewhere
        for cid, entry in list(self._reclaiming.items()):
            procs = entry.kill.processes
            took_it = (listed is not None and cid not in listed) or (
                bool(procs) and not any(_alive_matching(pid, ct) for pid, ct in procs))
            if not took_it and listed is not None:
                avail = credit.setdefault(id(entry.listed), [
                    sum(a[0] for o, a in entry.listed.items() if o not in listed and o not in self._reclaiming),
                    sum(a[1] for o, a in entry.listed.items() if o not in listed and o not in self._reclaiming)])
                need = entry.listed.get(cid, (0.0, 0.0))
                if avail[0] >= need[0] - 1e-9 and avail[1] >= need[1] - 1e-9 and (avail[0] > 0 or avail[1] > 0):
                    avail[0] -= need[0]
                    avail[1] -= need[1]
                    took_it = True  # the RM freed as much by preempting another container
            if took_it:
                del self._reclaiming[cid]
                self._killed[cid] = now + self.kill_memory_s
                self.metrics.inc("rm_reclaimed_total")
                continue
            if now >= entry.deadline_s or failures > entry.failures_at_start:
                del self._reclaiming[cid]
                why = "rm_error" if failures > entry.failures_at_start else "rm_slow"
                self.metrics.inc("reclaim_fallbacks_total", why=why)
                logger.warning("the RM did not take container %s back (%s): killing it locally", cid, why)
                if procs:
                    self._kill_locally(entry.kill, decision, signalled, gone)
                elif self.yarn is not None:  # no local process to kill: ask the RM for this one
                    self._kill_remotely(entry.kill, decision, remote)
                fallback.append(cid)
        return fallback

    def set_label(self, label: str) -> None:
        if label:
            self.label = label

    def apply(self, decision: Decision, plan: ReclaimPlan | None = None,
              listed: Mapping[str, tuple[float, float]] | None = None) -> ActResult:
        """Step plan: 1. follow earlier RM reclaims (local fallback); 2. new RM reclaims; 3. local
        kills; 4. escalate old kills; 5. YARN node resource; 6. state files.

        ``plan`` (yarn mode, RM path) says which kills go to the RM; without one every kill is local.
        ``listed``: the NodeManager's containers this tick, id -> allocated (cores, MB).
        """
        signalled: list[str] = []
        gone: list[str] = []
        remote: list[str] = []
        fallback = self._follow_reclaims(decision, signalled, gone, remote, listed)
        local = decision.kills if plan is None or self.yarn is None else plan.local
        held: tuple[str, ...] = ()
        if local and plan is not None and plan.path is ReclaimPath.LOCAL_KILL and self.yarn is not None:
            local, held = self._shrink_first(decision, plan, local)
        reclaimed = []
        if plan is not None and self.yarn is not None and plan.via_rm:
            deadline = self._clock() + self.rm_reclaim_wait_s
            for kill in plan.via_rm:
                if kill.container_id in self._reclaiming or kill.container_id in self._killed:
                    continue
                self._reclaiming[kill.container_id] = _Reclaim(kill, deadline, self.yarn.reclaim_failures,
                                                               dict(listed or {}))
                reclaimed.append(kill.container_id)
                self.kill_log.append({"container": kill.container_id, "at": decision.timestamp,
                                      "reason": kill.reason, "exited_by_itself": False, "path": "rm-preemption"})
                del self.kill_log[:-20]
            if reclaimed:
                self.yarn.reclaim(plan.node_memory_mb, plan.node_vcores)
        for kill in local:
            if not kill.processes:
                if self.yarn is not None and kill.container_id not in self._killed:
                    self._kill_remotely(kill, decision, remote)
                continue
            self._kill_locally(kill, decision, signalled, gone)
        escalated = self.killer.poll()
        if self.yarn is not None:
            self.yarn.want(decision.advertise_memory_mb, decision.advertise_cores)
        healthy = not decision.stale
        self.busy_file.set("busy" if decision.busy else "idle", healthy=healthy)
        if self.label:
            self.label_file.set(self.label, healthy=healthy)
        return ActResult(tuple(signalled), tuple(gone), tuple(remote), tuple(escalated), tuple(reclaimed),
                         tuple(fallback), held)

    def _shrink_first(self, decision: Decision, plan: ReclaimPlan,
                      local: tuple[Kill, ...]) -> tuple[tuple[Kill, ...], tuple[str, ...]]:
        """Send the node's shrink before killing; hold the kills until the RM holds it (a freed room the
        RM still counts as free is refilled at its next heartbeat, and the newcomers are killed in
        turn). Returns (kills to carry out now, container ids held). No wait while RM calls fail, past
        ``shrink_wait_s`` (a slow RM), or when the memory reserve is used up (``plan.urgent``), but
        then only once: the next kill waits for the shrink again."""
        assert self.yarn is not None
        self.yarn.want(decision.advertise_memory_mb, decision.advertise_cores)  # queued before any signal
        now = self._clock()
        if self.yarn.in_force(decision.advertise_memory_mb, decision.advertise_cores):
            self._shrink_since, self._killed_unshrunk = None, False
            return local, ()
        if self.yarn.last_error is not None or (plan.urgent and not self._killed_unshrunk):
            # RM calls failing: nothing to wait for. Reserve used up: kill now, but only once before
            # the shrink lands (what the RM refills meanwhile waits for it, or it loops).
            self._killed_unshrunk = True
            return local, ()
        if self._shrink_since is None:
            self._shrink_since = now
        if now - self._shrink_since >= self.shrink_wait_s:
            logger.warning("the node's shrink to %d MB / %d vcores is not in force in the ResourceManager "
                           "after %.1f s: killing anyway", decision.advertise_memory_mb, decision.advertise_cores,
                           now - self._shrink_since)
            self._shrink_since, self._killed_unshrunk = None, True
            return local, ()
        return (), tuple(k.container_id for k in local)

    def stop(self) -> None:
        if self.yarn is not None:
            self.yarn.stop()
