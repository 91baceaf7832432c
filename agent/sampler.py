"""Stage 1, sample: whole-node and per-process CPU and memory with psutil.

A process is *secondary* when its environment carries ``CONTAINER_ID`` (every process of a YARN
container does) or its cgroup path starts with a configured prefix. The DataNode and the other Hadoop
daemons (``daemon_patterns``: the NodeManager) are matched by command line and tracked apart. Reading a process's environment
is the expensive part, so it is read once per process: the cache is keyed by pid and checked
against the process's start time, and only secondary, DataNode and (in scope mode) in-scope
processes are read again on later ticks (one ``/proc/<pid>/stat`` + ``statm`` each).

The node is the whole host, a process tree (``scope_root_pid``), or a cgroup v2 directory
(``cgroup``: totals from its interface files, processes from its ``cgroup.procs``; see
``agent.cgroup``), so that an agent in a container or a systemd slice measures only that.

CPU figures are averages over the time since the previous sample:
``cpu_cores = delta(user + system CPU seconds) / delta(wall seconds)``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from agent.cgroup import cgroup_cpu_s, cgroup_memory_mb, cgroup_pids

logger = logging.getLogger(__name__)

_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class ProcessUsage:
    """One tracked process in one sample."""

    pid: int
    pgid: int
    create_time: float  # epoch seconds
    cpu_cores: float  # average over the sample window
    memory_mb: float  # resident set size
    container_id: str | None  # None: not a secondary process
    datanode: bool
    hadoop_daemon: bool = False  # another Hadoop daemon (the NodeManager): its CPU is not primary load


@dataclass(frozen=True)
class NodeSample:
    """Node totals and the tracked processes at one instant (the node may be a process-tree scope)."""

    timestamp: float  # epoch seconds
    window_s: float  # wall seconds the CPU averages cover
    node_cpu_cores: float  # everything on the node except the agent itself
    node_memory_mb: float
    processes: tuple[ProcessUsage, ...]
    agent_cpu_cores: float = 0.0
    agent_memory_mb: float = 0.0


@dataclass
class _Entry:
    proc: psutil.Process | None  # None: not tracked (checked once, nothing to read per tick)
    create_time: float
    ppid: int
    container_id: str | None
    datanode: bool
    pgid: int = 0
    daemon: bool = False
    last_cpu_s: float = 0.0
    last_t: float = 0.0


def _container_from_cgroups(pid: int, prefixes: tuple[str, ...]) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(":", 2)[-1]
        for prefix in prefixes:
            if path.startswith(prefix) and len(path) > len(prefix):
                leaf = path.rstrip("/").rsplit("/", 1)[-1]
                return leaf or path
    return None


class PsutilSampler:
    """Samples the node (or the process tree under ``scope_root_pid``) with a per-pid cache."""

    def __init__(
        self,
        *,
        datanode_pattern: str = "",
        daemon_patterns: Iterable[str] = (),
        secondary_cgroups: Iterable[str] = (),
        scope_root_pid: int | None = None,
        cgroup: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.datanode_pattern = datanode_pattern
        self.daemon_patterns = tuple(p for p in daemon_patterns if p)
        self.secondary_cgroups = tuple(secondary_cgroups)
        self.scope_root_pid = scope_root_pid
        self.cgroup = cgroup  # a cgroup v2 directory that is the node (see agent.cgroup)
        self._clock = clock
        self._cache: dict[int, _Entry] = {}
        self._self_pid = os.getpid()
        self._self = psutil.Process(self._self_pid)
        self.environ_reads = 0  # how many environments were read (the cache keeps this near 0/tick)
        self._last_node_busy_s, self._last_t = self._node_busy_s(), time.monotonic()
        if cgroup is not None:
            self._last_node_busy_s = cgroup_cpu_s(cgroup)
        self._last_self_cpu_s = self._cpu_s(self._self)
        if scope_root_pid is not None and not psutil.pid_exists(scope_root_pid):
            logger.warning("scope root pid %s does not exist", scope_root_pid)

    @staticmethod
    def _node_busy_s() -> float:
        t = psutil.cpu_times()
        return float(sum(t)) - t.idle - getattr(t, "iowait", 0.0)

    @staticmethod
    def _cpu_s(proc: psutil.Process) -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    def _first_sight(self, pid: int) -> _Entry | None:
        """A new pid: start time and parent only (one read of /proc/<pid>/stat)."""
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                return _Entry(proc, proc.create_time(), proc.ppid(), None, False)
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:
            return _Entry(None, 0.0, 0, None, False)

    def _classify(self, pid: int, entry: _Entry) -> None:
        """Is the new process secondary (environment / cgroup) or the DataNode (command line)? Once."""
        proc = entry.proc
        if proc is None:
            return
        try:
            try:
                self.environ_reads += 1
                entry.container_id = proc.environ().get("CONTAINER_ID") or None
            except (psutil.AccessDenied, psutil.ZombieProcess):
                entry.container_id = None
            if entry.container_id is None and self.secondary_cgroups:
                entry.container_id = _container_from_cgroups(pid, self.secondary_cgroups)
            if (self.datanode_pattern or self.daemon_patterns) and entry.container_id is None:
                try:
                    cmdline = " ".join(proc.cmdline())
                except (psutil.AccessDenied, psutil.ZombieProcess):
                    cmdline = ""
                entry.datanode = bool(self.datanode_pattern) and self.datanode_pattern in cmdline
                entry.daemon = not entry.datanode and any(p in cmdline for p in self.daemon_patterns)
        except psutil.NoSuchProcess:
            entry.proc = None

    def _in_scope(self, pids: set[int]) -> set[int]:
        """Pids whose parent chain (as first seen) reaches the scope root."""
        root = self.scope_root_pid
        inside: set[int] = set()
        outside: set[int] = set()
        for pid in pids:
            chain: list[int] = []
            cur = pid
            verdict = False
            while True:
                if cur == root:
                    verdict = True
                    break
                if cur in inside or cur in outside:
                    verdict = cur in inside
                    break
                entry = self._cache.get(cur)
                if entry is None or cur <= 1 or len(chain) > 64:
                    break
                chain.append(cur)
                cur = entry.ppid
            (inside if verdict else outside).update(chain)
            if verdict:
                inside.add(pid)
        return inside

    def sample(self) -> NodeSample:
        """Step plan: 1. list pids, classify new ones; 2. CPU/RSS of tracked ones; 3. node totals."""
        now_mono = time.monotonic()
        window_s = max(now_mono - self._last_t, 1e-6)
        pids = set(psutil.pids())
        for gone in set(self._cache) - pids:
            del self._cache[gone]
        new: list[int] = []
        for pid in pids - set(self._cache):
            if pid == self._self_pid:
                continue
            entry = self._first_sight(pid)
            if entry is not None:
                self._cache[pid] = entry
                new.append(pid)
        scope = self._in_scope(set(self._cache)) if self.scope_root_pid is not None else None
        if scope is not None and self.scope_root_pid is not None:
            scope.add(self.scope_root_pid)
        if self.cgroup is not None:  # the cgroup's processes are the node's
            members = cgroup_pids(self.cgroup)
            scope = members if scope is None else scope & members
        for pid in new:  # the environment only of new processes that belong to the node
            if scope is None or pid in scope:
                self._classify(pid, self._cache[pid])

        processes: list[ProcessUsage] = []
        scope_cpu = scope_mem = 0.0
        for pid, entry in list(self._cache.items()):
            in_scope = scope is not None and pid in scope
            tracked = entry.container_id is not None or entry.datanode or entry.daemon or in_scope
            if not tracked or entry.proc is None:
                continue
            try:
                with entry.proc.oneshot():
                    if entry.proc.status() == psutil.STATUS_ZOMBIE:  # exited, holds nothing
                        del self._cache[pid]
                        continue
                    cpu_s = self._cpu_s(entry.proc)
                    rss_mb = entry.proc.memory_info().rss / _MB
                if entry.last_t == 0.0:
                    entry.pgid = os.getpgid(pid)
                    age_s = max(self._clock() - entry.create_time, 1e-3)
                    # First sight: a young process's average since start; an old one counts 0 (the
                    # unseen part then lands on the primary: the safe side).
                    cpu_cores = cpu_s / age_s if age_s < 10.0 else 0.0
                else:
                    cpu_cores = max(cpu_s - entry.last_cpu_s, 0.0) / max(now_mono - entry.last_t, 1e-6)
                entry.last_cpu_s, entry.last_t = cpu_s, now_mono
            except (psutil.NoSuchProcess, psutil.ZombieProcess, ProcessLookupError):
                del self._cache[pid]
                continue
            except psutil.AccessDenied:
                continue
            if in_scope:
                scope_cpu += cpu_cores
                scope_mem += rss_mb
            if entry.container_id is not None or entry.datanode or entry.daemon:
                processes.append(ProcessUsage(pid, entry.pgid, entry.create_time, cpu_cores, rss_mb,
                                              entry.container_id, entry.datanode, entry.daemon))

        if self.cgroup is None:
            busy_s = self._node_busy_s()
            # /proc/stat counts in clock ticks and the window in wall time: over a short window the
            # quotient can exceed the cores by a tick or two; the node cannot, so clip to its cores.
            node_cpu = min(max(busy_s - self._last_node_busy_s, 0.0) / window_s, float(psutil.cpu_count() or 1))
        else:  # cgroup usage is in microseconds: exact, nothing to clip
            busy_s = cgroup_cpu_s(self.cgroup)
            node_cpu = max(busy_s - self._last_node_busy_s, 0.0) / window_s
        self._last_node_busy_s, self._last_t = busy_s, now_mono
        self_cpu_s = self._cpu_s(self._self)
        agent_cpu = max(self_cpu_s - self._last_self_cpu_s, 0.0) / window_s
        self._last_self_cpu_s = self_cpu_s
        agent_mem = self._self.memory_info().rss / _MB
        if self.cgroup is not None:
            inside = self._self_pid in (scope or set())
            node_cpu_cores = max(node_cpu - (agent_cpu if inside else 0.0), 0.0)
            node_memory_mb = max(cgroup_memory_mb(self.cgroup) - (agent_mem if inside else 0.0), 0.0)
        elif scope is not None:
            node_cpu_cores, node_memory_mb = scope_cpu, scope_mem
        else:
            vm = psutil.virtual_memory()
            node_cpu_cores = max(node_cpu - agent_cpu, 0.0)
            node_memory_mb = max((vm.total - vm.available) / _MB - agent_mem, 0.0)
        return NodeSample(
            timestamp=self._clock(),
            window_s=window_s,
            node_cpu_cores=node_cpu_cores,
            node_memory_mb=node_memory_mb,
            processes=tuple(processes),
            agent_cpu_cores=agent_cpu,
            agent_memory_mb=agent_mem,
        )

    def tracked_count(self) -> int:
        return sum(1 for e in self._cache.values() if e.container_id is not None or e.datanode)
