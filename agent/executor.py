"""Stage 4, act: the one component that touches processes, YARN and files.

Every write goes through here and is skipped when it would change nothing:

- kills (both modes, the fast path): SIGTERM to the container's process group when every member of
  the group belongs to the container (else to its processes one by one), SIGKILL to what is left
  after ``kill_grace_s``. A pid is signalled only if its start time still matches the sample, so a
  reused pid (a primary process!) is never hit. A container that already exited is not an error.
- YARN (yarn mode): the node resource (REST, else ``yarn rmadmin``), kept in ``dynamic-resources.xml``
  too; remote kill for containers with no local process. These run on a worker thread so an
  unreachable ResourceManager never delays local protection; failures are counted, logged at most
  once per ``error_log_interval_s``, and retried on the next tick.
- state files ``datanode-busy`` and ``node-label`` (atomic, heartbeat).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from agent.decide import Decision, Kill
from agent.metrics import Metrics
from agent.statefiles import StateFile, Throttle, atomic_write
from agent.yarn import YarnClient, YarnError, dynamic_resources_xml, parse_dynamic_resources

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
    remote: tuple[str, ...] = ()  # no local process: asked YARN to kill them
    escalated: tuple[str, ...] = ()  # SIGKILL after the grace period


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


@dataclass
class _YarnWork:
    desired: tuple[int, int] | None = None  # (memory MB, vcores)
    applied: tuple[int, int] | None = None
    remote_kills: list[str] = field(default_factory=list)


class YarnSync:
    """Worker thread that keeps the RM's node resource at the desired value (latest wins)."""

    def __init__(self, client: YarnClient, node_id: Callable[[], str], overcommit_timeout_ms: int,
                 dynamic_xml: str | None, metrics: Metrics, throttle: Throttle) -> None:
        self.client = client
        self._node_id = node_id
        self.overcommit_timeout_ms = overcommit_timeout_ms
        self.dynamic_xml = dynamic_xml
        self.metrics = metrics
        self.throttle = throttle
        self._work = _YarnWork()
        self._cond = threading.Condition()
        self._stop = False
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="agent-yarn", daemon=True)
        self._thread.start()

    def want(self, memory_mb: int, vcores: int) -> None:
        with self._cond:
            if self._work.applied == (memory_mb, vcores) and self._work.desired is None:
                self.metrics.inc("yarn_writes_skipped_total")
                return
            self._work.desired = (memory_mb, vcores)
            self._cond.notify()

    def remote_kill(self, container_id: str) -> None:
        with self._cond:
            self._work.remote_kills.append(container_id)
            self._cond.notify()

    def applied(self) -> tuple[int, int] | None:
        with self._cond:
            return self._work.applied

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _error(self, kind: str, exc: Exception) -> None:
        self.metrics.inc("errors_total", kind=kind)
        self.last_error = str(exc)
        log_now, suppressed = self.throttle.should_log(kind)
        if log_now:
            extra = f" ({suppressed} more since the last report)" if suppressed else ""
            logger.warning("%s failed: %s%s", kind, exc, extra)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and self._work.desired is None and not self._work.remote_kills:
                    self._cond.wait()
                if self._stop:
                    return
                desired, kills = self._work.desired, self._work.remote_kills
                self._work.desired, self._work.remote_kills = None, []
            for cid in kills:
                try:
                    self.client.signal_container(cid, "FORCEFUL_SHUTDOWN")
                except YarnError as exc:
                    self._error("yarn_signal", exc)
            if desired is None or desired == self.applied():
                continue
            try:
                node = self._node_id()
                path = self.client.update_node_resource(node, desired[0], desired[1], self.overcommit_timeout_ms)
                self.metrics.inc("yarn_writes_total", path=path)
                if self.dynamic_xml:
                    self._write_dynamic(node, desired)
                with self._cond:
                    self._work.applied = desired
                self.last_error = None
            except (YarnError, OSError) as exc:
                self._error("yarn_node_resource", exc)  # desired is offered again on the next tick

    def _write_dynamic(self, node: str, desired: tuple[int, int]) -> None:
        assert self.dynamic_xml is not None
        entries: dict[str, tuple[int, int]] = {}
        try:
            with open(self.dynamic_xml, encoding="utf-8") as handle:
                entries = parse_dynamic_resources(handle.read())
        except (OSError, ValueError, SyntaxError):
            entries = {}
        if entries.get(node) == desired:
            return
        entries[node] = desired
        atomic_write(self.dynamic_xml, dynamic_resources_xml(entries))


class Executor:
    def __init__(self, state_dir: str, metrics: Metrics, *, kill_grace_s: float = 2.0, heartbeat_s: float = 30.0,
                 yarn: YarnSync | None = None, kill_memory_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
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

    def dying(self) -> frozenset[str]:
        now = self._clock()
        self._killed = {cid: until for cid, until in self._killed.items() if until > now}
        return self.killer.dying() | frozenset(self._killed)

    def set_label(self, label: str) -> None:
        if label:
            self.label = label

    def apply(self, decision: Decision) -> ActResult:
        """Step plan: 1. kills; 2. escalate old kills; 3. YARN node resource; 4. state files."""
        signalled, gone, remote = [], [], []
        for kill in decision.kills:
            if not kill.processes:
                if self.yarn is not None and kill.container_id not in self._killed:
                    self.yarn.remote_kill(kill.container_id)
                    self._killed[kill.container_id] = self._clock() + self.kill_memory_s
                    remote.append(kill.container_id)
                continue
            try:
                if self.killer.kill(kill):
                    signalled.append(kill.container_id)
                else:
                    gone.append(kill.container_id)
            except Exception as exc:  # a kill must never take the loop down
                self.metrics.inc("errors_total", kind="kill")
                logger.warning("killing %s failed: %s", kill.container_id, exc)
                continue
            if kill.container_id in signalled:
                self._killed[kill.container_id] = self._clock() + self.kill_memory_s
                self.metrics.inc("kills_total")
            self.kill_log.append({"container": kill.container_id, "at": decision.timestamp,
                                  "reason": kill.reason, "exited_by_itself": kill.container_id in gone})
            del self.kill_log[:-20]
        escalated = self.killer.poll()
        if self.yarn is not None:
            self.yarn.want(decision.advertise_memory_mb, decision.advertise_cores)
        healthy = not decision.stale
        self.busy_file.set("busy" if decision.busy else "idle", healthy=healthy)
        if self.label:
            self.label_file.set(self.label, healthy=healthy)
        return ActResult(tuple(signalled), tuple(gone), tuple(remote), tuple(escalated))

    def stop(self) -> None:
        if self.yarn is not None:
            self.yarn.stop()
