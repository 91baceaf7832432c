"""A model of the ResourceManager's Capacity Scheduler and of a MapReduce job, as the real ones behave.

What it reproduces (each checked on a real Hadoop, see docs/hadoop.md "YARN"):

- allocation on a node heartbeat, FIFO over the applications' asks; the default calculator
  (``DefaultResourceCalculator``) counts **memory only**, so it places containers beyond the node's
  vcores; ``DominantResourceCalculator`` counts both;
- node resource updates: an update equal to the node's current size is a no-op (it does not re-arm
  the over-commit timeout); on 3.3+ a timeout >= 0 is remembered for the node and **sticks** (a later
  ``-1`` does not clear it); when the node is over-committed and its timeout has passed, the
  scheduler kills containers newest-first, never an ApplicationMaster, with exit status PREEMPTED
  (-102) until the allocation fits. On 3.2 nothing is killed: the node sits over-committed;
- MapReduce counts a finished attempt as *killed* only for the exit statuses ABORTED, PREEMPTED and
  KILLED_BY_CONTAINER_SCHEDULER; every other non-zero status is a *failed* attempt, and a task whose
  failed attempts reach ``maxattempts`` fails the job;
- an ApplicationMaster that dies ends its application attempt: the RM kills the attempt's other
  containers, and a new attempt (container ids ``..._<attempt>_000001`` on) re-runs the unfinished
  tasks, up to ``mapreduce.am.max-attempts`` (default 2; the job fails after that many AM deaths).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# org.apache.hadoop.yarn.api.records.ContainerExitStatus
SUCCESS = 0
ABORTED = -100
PREEMPTED = -102
KILLED_BY_RESOURCEMANAGER = -106
KILLED_BY_CONTAINER_SCHEDULER = -108
EXIT_SIGTERM = 143  # a container whose process group got SIGTERM on the node
EXIT_SIGKILL = 137
# RMContainerAllocator: only these become TA_KILL (a killed attempt); others TA_CONTAINER_COMPLETED.
KILLED_EXIT_STATUSES = frozenset({ABORTED, PREEMPTED, KILLED_BY_CONTAINER_SCHEDULER})

DEFAULT_CALCULATOR = "org.apache.hadoop.yarn.util.resource.DefaultResourceCalculator"
DOMINANT_CALCULATOR = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"


def version_tuple(version: str) -> tuple[int, int]:
    major, minor = (version.split(".") + ["0", "0"])[:2]
    return int(major), int(minor)


@dataclass
class SimContainer:
    container_id: str
    app_id: str
    node_id: str
    memory_mb: int
    vcores: int
    is_am: bool
    allocated_s: float
    seq: int
    task: str | None = None
    attempt: int = 1  # the application attempt
    state: str = "RUNNING"  # RUNNING | COMPLETE
    exit_status: int | None = None
    marked_for_preemption: bool = False


@dataclass
class SimNode:
    node_id: str
    memory_mb: int
    vcores: int
    overcommit_timeout_ms: int = -1  # sticky once >= 0 (3.3+)
    overcommit_deadline_s: float | None = None
    containers: dict[str, SimContainer] = field(default_factory=dict)
    registered: tuple[int, int] = (0, 0)  # the NodeManager's configured total (memory MB, vcores)

    def used(self) -> tuple[int, int]:
        live = [c for c in self.containers.values() if c.state == "RUNNING"]
        return sum(c.memory_mb for c in live), sum(c.vcores for c in live)


@dataclass
class Ask:
    app_id: str
    memory_mb: int
    vcores: int
    task: str | None
    is_am: bool = False
    attempt: int = 1


class FakeScheduler:
    """The scheduler side of a fake RM; ``listeners`` hear of every finished container."""

    def __init__(self, version: str = "3.3.6", calculator: str = DEFAULT_CALCULATOR,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.version = version
        self.calculator = calculator
        self._clock = clock
        self.lock = threading.RLock()
        self.nodes: dict[str, SimNode] = {}
        self.asks: list[Ask] = []
        self.listeners: dict[str, Callable[[SimContainer], None]] = {}
        self.finished: list[SimContainer] = []
        self._seq: dict[str, int] = {}
        self.cluster_ts = 1700000000000

    @property
    def preempts(self) -> bool:
        return version_tuple(self.version) >= (3, 3)

    # -- nodes -----------------------------------------------------------------------------------
    def add_node(self, node_id: str, memory_mb: int, vcores: int) -> SimNode:
        with self.lock:
            node = self.nodes[node_id] = SimNode(node_id, memory_mb, vcores, registered=(memory_mb, vcores))
            return node

    def update_node_resource(self, node_id: str, memory_mb: int, vcores: int, timeout_ms: int) -> None:
        with self.lock:
            node = self.nodes[node_id]
            if (node.memory_mb, node.vcores) == (memory_mb, vcores):
                return  # no-op: does not re-arm the over-commit timeout
            node.memory_mb, node.vcores = memory_mb, vcores
            if self.preempts and timeout_ms >= 0:
                node.overcommit_timeout_ms = timeout_ms  # sticks until the node re-registers
            if self.preempts and node.overcommit_timeout_ms >= 0 and self._overcommitted(node):
                node.overcommit_deadline_s = self._clock() + node.overcommit_timeout_ms / 1000.0
                for c in self._victims(node):  # the AM hears first (MARK_CONTAINER_FOR_PREEMPTION)
                    c.marked_for_preemption = True
                self._preempt_due(node)
            else:
                node.overcommit_deadline_s = None

    def reregister(self, node_id: str) -> None:
        """A NodeManager restart: the sticky timeout is gone and the node is back at the NodeManager's
        configured total (a real 3.3.6 forgot the size written through the RM)."""
        with self.lock:
            node = self.nodes[node_id]
            node.overcommit_timeout_ms = -1
            node.overcommit_deadline_s = None
            node.memory_mb, node.vcores = node.registered

    def _overcommitted(self, node: SimNode) -> bool:
        used_mb, used_vcores = node.used()
        if used_mb > node.memory_mb:
            return True
        return self.calculator == DOMINANT_CALCULATOR and used_vcores > node.vcores

    def _victims(self, node: SimNode) -> list[SimContainer]:
        """Newest first, never an ApplicationMaster, until the allocation would fit."""
        used_mb, used_vcores = node.used()
        out = []
        for c in sorted((c for c in node.containers.values() if c.state == "RUNNING" and not c.is_am),
                        key=lambda c: (c.allocated_s, c.seq), reverse=True):
            over_mb = used_mb > node.memory_mb
            over_vcores = self.calculator == DOMINANT_CALCULATOR and used_vcores > node.vcores
            if not (over_mb or over_vcores):
                break
            out.append(c)
            used_mb -= c.memory_mb
            used_vcores -= c.vcores
        return out

    def _preempt_due(self, node: SimNode) -> None:
        if node.overcommit_deadline_s is None or self._clock() < node.overcommit_deadline_s:
            return
        for c in self._victims(node):
            self.complete(c.container_id, PREEMPTED)
        node.overcommit_deadline_s = None

    # -- applications ----------------------------------------------------------------------------
    def ask(self, app_id: str, memory_mb: int, vcores: int, task: str | None, is_am: bool = False,
            attempt: int = 1) -> None:
        with self.lock:
            self.asks.append(Ask(app_id, memory_mb, vcores, task, is_am, attempt))

    def end_attempt(self, app_id: str, attempt: int, exit_status: int = KILLED_BY_RESOURCEMANAGER) -> None:
        """The AM of ``attempt`` died: its pending asks are dropped and its containers killed."""
        with self.lock:
            self.asks = [a for a in self.asks if not (a.app_id == app_id and a.attempt == attempt)]
            doomed = [c for n in self.nodes.values() for c in n.containers.values()
                      if c.app_id == app_id and c.attempt == attempt and c.state == "RUNNING"]
        for c in doomed:
            self.complete(c.container_id, exit_status)

    def _fits(self, node: SimNode, ask: Ask) -> bool:
        used_mb, used_vcores = node.used()
        if used_mb + ask.memory_mb > node.memory_mb:
            return False
        return self.calculator != DOMINANT_CALCULATOR or used_vcores + ask.vcores <= node.vcores

    def node_heartbeat(self, node_id: str) -> list[SimContainer]:
        """Preempt what is due, then allocate asks that fit (FIFO); returns the new containers."""
        with self.lock:
            node = self.nodes[node_id]
            self._preempt_due(node)
            if node.overcommit_deadline_s is not None:
                return []
            new = []
            for ask in list(self.asks):
                if not self._fits(node, ask):
                    continue
                self.asks.remove(ask)
                key = f"{ask.app_id}/{ask.attempt}"
                seq = self._seq[key] = self._seq.get(key, 0) + 1
                app_num = int(ask.app_id.rsplit("_", 1)[-1])
                cid = f"container_{self.cluster_ts}_{app_num:04d}_{ask.attempt:02d}_{seq:06d}"
                c = SimContainer(cid, ask.app_id, node_id, ask.memory_mb, ask.vcores, ask.is_am,
                                 self._clock(), seq, ask.task, ask.attempt)
                node.containers[cid] = c
                new.append(c)
            return new

    def container(self, container_id: str) -> SimContainer | None:
        with self.lock:
            for node in self.nodes.values():
                if container_id in node.containers:
                    return node.containers[container_id]
            return None

    def running(self, node_id: str) -> list[SimContainer]:
        with self.lock:
            return [c for c in self.nodes[node_id].containers.values() if c.state == "RUNNING"]

    def complete(self, container_id: str, exit_status: int) -> None:
        with self.lock:
            c = self.container(container_id)
            if c is None or c.state != "RUNNING":
                return
            c.state, c.exit_status = "COMPLETE", exit_status
            self.finished.append(c)
            listener = self.listeners.get(c.app_id)
        if listener is not None:
            listener(c)


@dataclass
class TaskState:
    done: bool = False
    failed_attempts: int = 0
    killed_attempts: int = 0


class FakeMapReduceJob:
    """A MapReduce job's ApplicationMaster as far as attempts go: asks, re-runs, counts, fails."""

    def __init__(self, scheduler: FakeScheduler, app_num: int, maps: int, *, map_memory_mb: int = 1024,
                 map_vcores: int = 1, am_memory_mb: int = 1024, maxattempts: int = 4,
                 am_maxattempts: int = 2) -> None:
        self.scheduler = scheduler
        self.app_id = f"application_{scheduler.cluster_ts}_{app_num:04d}"
        self.map_memory_mb, self.map_vcores, self.maxattempts = map_memory_mb, map_vcores, maxattempts
        self.am_memory_mb, self.am_maxattempts = am_memory_mb, am_maxattempts
        self.tasks = {f"m_{i:06d}": TaskState() for i in range(maps)}
        self.state = "RUNNING"
        self.attempt = 1
        self.am_failures = 0
        self.lock = threading.Lock()
        scheduler.listeners[self.app_id] = self.on_finished
        self._start_attempt()

    def _start_attempt(self) -> None:
        self.scheduler.ask(self.app_id, self.am_memory_mb, 1, None, is_am=True, attempt=self.attempt)
        for task, st in self.tasks.items():
            if not st.done:
                self.scheduler.ask(self.app_id, self.map_memory_mb, self.map_vcores, task, attempt=self.attempt)

    def _am_finished(self, c: SimContainer) -> None:
        with self.lock:
            if c.exit_status == SUCCESS or self.state != "RUNNING":
                return
            self.am_failures += 1
            ended = self.attempt
            if self.am_failures >= self.am_maxattempts:
                self.state = "FAILED"
            else:
                self.attempt += 1
        self.scheduler.end_attempt(self.app_id, ended)
        if self.state == "RUNNING":
            self._start_attempt()

    def on_finished(self, c: SimContainer) -> None:
        if c.attempt != self.attempt:
            return  # a container of an attempt that already ended (the RM killed it with its AM)
        if c.is_am:
            self._am_finished(c)
            return
        if c.task is None:
            return
        with self.lock:
            task = self.tasks[c.task]
            if c.exit_status == SUCCESS:
                task.done = True
                if all(t.done for t in self.tasks.values()) and self.state == "RUNNING":
                    self.state = "SUCCEEDED"
                return
            if c.exit_status in KILLED_EXIT_STATUSES:
                task.killed_attempts += 1
            else:
                task.failed_attempts += 1
                if task.failed_attempts >= self.maxattempts:
                    self.state = "FAILED"
                    return
            if self.state == "RUNNING":
                self.scheduler.ask(self.app_id, self.map_memory_mb, self.map_vcores, c.task, attempt=self.attempt)

    @property
    def failed_attempts(self) -> int:
        with self.lock:
            return sum(t.failed_attempts for t in self.tasks.values())

    @property
    def killed_attempts(self) -> int:
        with self.lock:
            return sum(t.killed_attempts for t in self.tasks.values())
