"""HDFS-H-cobusy-mover in the service: the watch (and, with co-busy estimates, the daily pass) over
a real HDFS. The policy is ``core/mover.py``, the same code the simulator runs
(``sim.policy.CobusyMover``); this module is its adapter: where the replicas are, which tenants are
busy, and how a replica moves.

Every ``mover_watch_every_s`` (default ``core.mover.WATCH_EVERY_HOURS``, one hour):

1. Replica map: every block under ``mover_paths`` with its replicas' DataNodes, from the NameNode
   (``hdfs_blocks.WebHdfs``; why the NameNode and not the shim's reports: that module).
2. Busy now: a tenant is busy when any of its nodes' last report says busy (the agents' flag).
3. The core's passes on a placer of the pass's own (``PolicyView.private_placer``: the one serving
   ``ChooseTargets`` is never locked by a pass): ``move_busy_now`` for blocks with every replica
   live and all but one on a busy tenant; once a day, when the view has co-busy estimates,
   ``move_at_risk`` first. Caps: ``core.mover.MoveBudget`` with ``mover_mb_per_server_hour`` per
   server of each primary tenant, its period the hour, and at most ``mover_max_moves_per_hour``
   moves started in any trailing hour; a planned move over a cap is deferred to a later pass.
4. Each planned move (mode ``on``; ``dry-run`` only records it), one at a time:

   a. journal it (``<data-dir>/mover-journal.json``, written atomically) *before* touching HDFS;
   b. raise the file's replication by one (``SETREPLICATION``). The NameNode asks the shim's
      ``chooseTarget`` for the new replica with the block's holders as ``chosen``; the service
      answers the planned target (:meth:`ServiceMover.steer`);
   c. wait until the NameNode lists the new replica (``mover_move_timeout_s``; else go to d and
      count the move as rolled back);
   d. lower the replication back. The NameNode drops one excess replica and asks the shim's
      ``chooseReplicaToDelete``, which asks ``POST /v1/blocks/drop``: the busy replica
      (:meth:`ServiceMover.drop_for`);
   e. wait until the old replica is gone, then remove the journal entry.

   A metric (``harvest_mover_moves_total{outcome}``) and an entry of ``GET /v1/explain/moves`` per
   move, ``GET /v1/mover`` for the state.

Never below the replication factor: HDFS itself deletes only replicas beyond a file's factor, and
the factor is only ever raised above the original and set back to it; a crash between b and d
leaves a file one replica *over* its factor, never under. On start, every journal entry is
finished first: its file's replication set back to the recorded factor (the drop still steered to
the old replica), whether the new replica arrived or not. A DataNode killed mid-move: its replica
is re-replicated by HDFS as for any dead node; the move either sees the new replica or times out
and lowers the factor again.

Moves are per file (``SETREPLICATION`` is a file's): the other blocks of a multi-block file get a
temporary extra replica too (placed by the service as any re-replication, dropped by the stock
choice when lowered); the byte budget charges the moved block only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json
from placement_service.core.mover import (
    MOVE_EVERY_DAYS,
    MOVE_MAX_FRAC_PER_DAY,
    MoveBudget,
    MoveReport,
    blocks_one_idle,
    move_at_risk,
    move_busy_now,
    mover_config,
)
from placement_service.core.placement import ReplicaPlacer
from placement_service.server.hdfs_blocks import MAX_WIDTH, BlockReplicas, HdfsError, ReplicaMap
from placement_service.server.metrics import Metrics
from placement_service.server.reports import NodeReport
from placement_service.server.throttle import duty_cycle

logger = logging.getLogger(__name__)

MOVER_MODES = ("off", "dry-run", "on")
DEFAULT_MOVER_MODE = "off"
"""Off until an operator turns it on: a move costs a block's copy on two primary tenants' servers."""
MOVE_MB_PER_SERVER_HOUR = 512.0
"""Default byte cap: each primary tenant sends and receives at most this many MB of moved replicas
per hour per server it has (two 256 MB blocks; the simulator's daily ``MOVE_BUDGET_MB_PER_SERVER_DAY``
spread over 24 hours would be under one block, and the watch's moves come in bursts when a tenant
turns busy)."""
PLAN_SLACK = 4
"""The core's watch sees at most this many times the moves the hour has left (some are refused)."""
BACKGROUND_DUTY_CYCLE = (0.001, 0.003)
"""Scan and plan: 1 ms slices with 3 ms rests (the service's ``REBUILD_DUTY_CYCLE``)."""
EXPLAIN_MOVES = 200
"""Moves kept for ``GET /v1/explain/moves`` (newest last)."""


class NameNode(Protocol):
    """What the mover needs from HDFS (``hdfs_blocks.WebHdfs``; an in-memory one in benchmarks)."""

    def scan_into(self, roots: Sequence[str], out: ReplicaMap) -> None: ...

    def blocks(self, path: str, replication: int | None = None) -> list[BlockReplicas]: ...

    def set_replication(self, path: str, replication: int) -> None: ...


@dataclass(frozen=True)
class MoverSettings:
    mode: str = DEFAULT_MOVER_MODE
    watch_every_s: float = 3600.0
    roots: tuple[str, ...] = ("/",)
    max_moves_per_hour: int = 600
    mb_per_server_hour: float | None = MOVE_MB_PER_SERVER_HOUR
    move_timeout_s: float = 300.0
    poll_s: float = 1.0
    seed: int = 0
    scan_in_child: bool = True
    """Scan the NameNode in a worker process (``ServiceMover._scan``); False: in the mover's thread."""


@dataclass
class MoveJob:
    path: str
    block_id: int
    replication: int
    """The file's factor before the move (what it is set back to)."""
    holders: list[str]
    """The block's replicas before the move."""
    old: str
    new: str
    old_tenant: str
    new_tenant: str
    reason: str
    started_s: float
    phase: str = "raise"
    """``raise``: the factor may be one over (step b); ``lower``: being set back (step d)."""


class ServiceMover:
    """The loop of the module docstring. ``node_reports``: the service's last report per node;
    ``view``: the current policy view (``PlacementService.policy``)."""

    def __init__(self, settings: MoverSettings, namenode: NameNode | None, journal: Path,
                 node_reports: Callable[[], Mapping[str, NodeReport]], view: Callable[[], Any],
                 metrics: Metrics, clock: Callable[[], float] = time.time) -> None:
        if settings.mode not in MOVER_MODES:
            raise HarvestError(f"mover: mode must be one of {', '.join(MOVER_MODES)}, got {settings.mode!r}")
        if settings.mode != "off" and namenode is None:
            raise HarvestError("mover: --mover dry-run/on needs mover_namenode_url (the NameNode's WebHDFS address)")
        self.settings = settings
        self.mode = settings.mode
        self.namenode = namenode
        self.journal_path = journal
        self._node_reports = node_reports
        self._view = view
        self.metrics = metrics
        self.clock = clock
        self._lock = threading.Lock()
        self._in_flight: list[MoveJob] = self._load_journal()
        self._started: deque[float] = deque()  # start times of the moves of the trailing hour
        self._used_mb: dict[str, float] = {}  # tenant -> MB moved in the current hour
        self._hour = -1
        self._last_daily_s = -float("inf")
        self.moves_total = 0
        self.blocks_at_risk = 0
        self.last_pass: dict[str, Any] | None = None
        self.explained: deque[dict[str, Any]] = deque(maxlen=EXPLAIN_MOVES)
        self._rng = np.random.default_rng(settings.seed)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mover", daemon=True)
        self._scanner: Any = None  # the scan's worker process (``_scan``), started on first use

    # -- the loop ---------------------------------------------------------------------------------
    def start(self) -> ServiceMover:
        if self.namenode is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)
        if self._scanner is not None:
            self._scanner.terminate()  # a scan in progress is only reading

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.recover()
                if self.mode != "off":
                    self.run_pass()
            except Exception as exc:  # noqa: BLE001 (a periodic loop logs and tries again next period)
                logger.warning("mover pass failed, next in %.0f s: %s", self.settings.watch_every_s, exc)
                self.metrics.inc("harvest_mover_pass_failures_total")
            self._wake.wait(self.settings.watch_every_s)
            self._wake.clear()

    def set_mode(self, mode: str) -> None:
        """The kill switch (``PUT /v1/mover``): ``off`` stops before the next move (one in flight
        finishes or rolls back)."""
        if mode not in MOVER_MODES:
            raise HarvestError(f"mode must be one of {', '.join(MOVER_MODES)}, got {mode!r}")
        if mode != "off" and self.namenode is None:
            raise HarvestError("the mover has no NameNode address (mover_namenode_url): it can only be off")
        self.mode = mode
        logger.info("mover: mode %s", mode)
        if mode != "off" and self._thread.ident is None:
            self._thread.start()
        self._wake.set()

    # -- what the shim asks ------------------------------------------------------------------------
    def steer(self, chosen: Sequence[str], replicas: int, excluded: Sequence[str]) -> str | None:
        """The planned target when ``chosen`` is the holder set of a block being moved (step b)."""
        if not self._in_flight or replicas < 1:
            return None
        held = set(chosen)
        with self._lock:
            for job in self._in_flight:
                if job.phase == "raise" and set(job.holders) == held and job.new not in excluded:
                    return job.new
        return None

    def drop_for(self, replicas: Sequence[str]) -> str | None:
        """The replica to drop when the NameNode deletes an excess one of a block holding
        ``replicas``: the old replica of a move whose block this is (step d), else None."""
        if not self._in_flight:
            return None
        have = set(replicas)
        with self._lock:
            for job in self._in_flight:
                if job.old in have and have <= {*job.holders, job.new} and len(have) > job.replication:
                    return job.old
        return None

    # -- state -------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """``GET /v1/mover``."""
        now = self.clock()
        with self._lock:
            in_flight = [asdict(j) for j in self._in_flight]
        return {"mode": self.mode, "moves_total": self.moves_total, "blocks_at_risk": self.blocks_at_risk,
                "last_pass": self.last_pass, "in_flight": in_flight,
                "moves_last_hour": sum(1 for t in self._started if t > now - 3600.0),
                "settings": {"watch_every_s": self.settings.watch_every_s, "roots": list(self.settings.roots),
                             "max_moves_per_hour": self.settings.max_moves_per_hour,
                             "mb_per_server_hour": self.settings.mb_per_server_hour,
                             "move_timeout_s": self.settings.move_timeout_s}}

    def _load_journal(self) -> list[MoveJob]:
        if not self.journal_path.exists():
            return []
        import json

        try:
            doc = json.loads(self.journal_path.read_text())
            return [MoveJob(**entry) for entry in doc.get("in_flight", [])]
        except (OSError, ValueError, TypeError) as exc:
            raise HarvestError(f"mover journal {self.journal_path}: {exc} (files in it may be one replica over "
                               "their factor: check them, then remove the file)") from None

    def _save_journal(self) -> None:
        with self._lock:
            doc = {"in_flight": [asdict(j) for j in self._in_flight]}
        atomic_write_json(self.journal_path, doc)

    def recover(self) -> None:
        """Finish the moves a previous run left in the journal: each file's factor back to the
        recorded one (the drop steered to the old replica), then the entry removed."""
        with self._lock:
            left = list(self._in_flight)
        for job in left:
            logger.info("mover: finishing the move of block %d of %s left by a previous run (factor back to %d)",
                        job.block_id, job.path, job.replication)
            outcome = self._lower(job, arrived=None)
            self._finish(job, f"recovered: {outcome}")

    # -- one pass ------------------------------------------------------------------------------------
    def run_pass(self) -> dict[str, Any]:
        """Steps 1-4 of the module docstring; returns (and keeps as ``last_pass``) its summary."""
        started, cpu0 = self.clock(), time.thread_time()
        view = self._view()
        placer = view.private_placer()
        if placer is None:
            return self._pass_done(started, cpu0, 0, 0, 0, "no placer yet (no harvestable node has reported)")
        assert self.namenode is not None
        blocks, scan_cpu_s = self._scan()
        # The plan is Python work in the serving process: duty-cycled like a view rebuild
        # (throttle.py), so ChooseTargets keeps its tail while a pass runs.
        with duty_cycle(*BACKGROUND_DUTY_CYCLE):
            tenant_busy = self._tenant_busy(placer)
            plans, at_risk, refused = self.plan(placer, blocks, tenant_busy, started,
                                                daily=view.cobusy.estimates is not None)
        self.blocks_at_risk = at_risk
        self.metrics.set("harvest_mover_blocks_at_risk", float(at_risk))
        done = 0
        for job in plans:
            if self.mode == "off" or self._stopping.is_set():
                break
            if self.mode == "dry-run":
                self._explain(job, "dry-run: not moved")
                self.metrics.inc("harvest_mover_moves_total", outcome="dry_run")
                continue
            if not self._admit(job, placer):
                self._explain(job, "deferred: a cap (moves per hour or a tenant's bytes per hour) is spent")
                self.metrics.inc("harvest_mover_moves_total", outcome="deferred")
                continue
            done += self.execute(job)
        return self._pass_done(started, cpu0, len(blocks), at_risk, len(plans), "", moved=done, refused=refused,
                               scan_cpu_s=scan_cpu_s)

    def _pass_done(self, started: float, cpu0: float, blocks: int, at_risk: int, planned: int, note: str,
                   moved: int = 0, refused: Mapping[str, int] | None = None, scan_cpu_s: float = 0.0,
                   ) -> dict[str, Any]:
        cpu_s = time.thread_time() - cpu0  # the mover thread only, not the request threads
        self.last_pass = {"at": started, "seconds": round(self.clock() - started, 3), "cpu_s": round(cpu_s, 3),
                          "scan_cpu_s": round(scan_cpu_s, 3),
                          "blocks": blocks, "blocks_at_risk": at_risk, "planned": planned, "moved": moved,
                          "refused": dict(refused or {}), "mode": self.mode, **({"note": note} if note else {})}
        self.metrics.observe("harvest_mover_pass_seconds", self.clock() - started)
        return self.last_pass

    def _scan(self) -> tuple[ReplicaMap, float]:
        """Step 1, and the CPU seconds it took. With ``scan_in_child`` in a worker process of its own
        (kept between passes): parsing a million blocks' JSON is ~40 s of Python that would otherwise
        share the interpreter lock with the request threads (ChooseTargets p99 x3-5 at 1M blocks,
        docs/benchmarks.md); only the finished arrays come back."""
        assert self.namenode is not None
        if not self.settings.scan_in_child:
            cpu0 = time.thread_time()
            blocks = ReplicaMap()
            with duty_cycle(*BACKGROUND_DUTY_CYCLE):
                self.namenode.scan_into(self.settings.roots, blocks)
            return blocks, time.thread_time() - cpu0
        if self._scanner is None:
            import multiprocessing
            import os

            self._scanner = multiprocessing.get_context("spawn").Pool(1, initializer=_exit_with_parent,
                                                                      initargs=(os.getpid(),))
        result: tuple[ReplicaMap, float] = self._scanner.apply(_scan_in_child, (self.namenode,
                                                                               tuple(self.settings.roots)))
        return result

    def _tenant_busy(self, placer: ReplicaPlacer) -> np.ndarray:
        busy_tenants = {r.tenant for r in self._node_reports().values() if r.busy}
        return np.array([t in busy_tenants for t in placer.tenant_names], dtype=bool)

    def plan(self, placer: ReplicaPlacer, blocks: ReplicaMap, tenant_busy: np.ndarray, now_s: float,
             daily: bool = False) -> tuple[list[MoveJob], int, dict[str, int]]:
        """Step 3: the moves the core's passes make on ``placer`` (at most one per block), the
        blocks at risk (every replica live, all but one on a busy tenant, plus the daily pass's) and
        the moves the core refused (``budget``, ``exposure``). The core sees at most
        ``PLAN_SLACK`` times the moves the hour has left (``mover_max_moves_per_hour``): a pass's
        cost is bounded by the cap, not by how many blocks a busy tenant holds."""
        names = placer.inventory.server
        tenant_names = placer.tenant_names
        index = {name: i for i, name in enumerate(names)}
        lut = np.array([index.get(n, -1) for n in blocks.nodes] + [-1], dtype=np.int64)  # [-1] -> -1
        _file, _block, _size, factor, count, hosts = blocks.arrays()
        server_busy = tenant_busy[placer.tenant_of(np.arange(len(names)))]
        budget = self._budget(placer, now_s)
        limit = PLAN_SLACK * self._moves_left(now_s)
        run_daily = daily and placer.cobusy is not None and now_s - self._last_daily_s >= MOVE_EVERY_DAYS * 86400.0
        if run_daily:
            self._last_daily_s = now_s
        plans: list[MoveJob] = []
        at_risk = 0
        refused = {"budget": 0, "exposure": 0}
        for k in range(2, MAX_WIDTH + 1):
            rows = np.flatnonzero((count == k) & (factor == k))
            if rows.size == 0:
                continue
            rep = lut[hosts[rows, :k]]
            passes: list[tuple[str, np.ndarray, MoveReport]] = []
            if run_daily and limit > 0:
                config = mover_config(MOVE_EVERY_DAYS, max_frac_per_day=min(MOVE_MAX_FRAC_PER_DAY, limit / rows.size))
                before = rep.copy()
                report = move_at_risk(placer, rep, config, self._rng, budget=budget)
                at_risk += report.at_risk
                passes.append(("daily: the tenants' co-busy estimate above the risk limit", before, report))
            hot = blocks_one_idle(rep, server_busy)
            at_risk += int(hot.size)
            sub = rep[hot[:limit]]
            sub_before = sub.copy()
            watched = move_busy_now(placer, sub, tenant_busy, self._rng, budget=budget)
            passes.append(("watch: every replica but one on a tenant busy now (one burst from unreadable)",
                           sub_before, watched))
            seen: set[int] = set()
            for reason, before_rep, report in passes:
                refused["budget"] += report.refused_budget
                refused["exposure"] += report.refused_exposure
                daily_pass = before_rep is not sub_before
                for b, col in zip(report.moved_blocks.tolist(), report.moved_columns.tolist(), strict=True):
                    row = int(rows[b]) if daily_pass else int(rows[hot[b]])
                    if row in seen:
                        continue
                    seen.add(row)
                    blk = blocks.block(row)
                    old_i = int(before_rep[b, col])
                    new_i = int(rep[b, col]) if daily_pass else int(sub[b, col])
                    plans.append(MoveJob(
                        blk.path, blk.block_id, blk.replication, list(blk.hosts), names[old_i], names[new_i],
                        tenant_names[int(placer.tenant_of(np.array([old_i]))[0])],
                        tenant_names[int(placer.tenant_of(np.array([new_i]))[0])], reason, now_s))
        return plans, at_risk, refused

    def _moves_left(self, now_s: float) -> int:
        """Moves the trailing hour still allows (``mover_max_moves_per_hour``)."""
        while self._started and self._started[0] <= now_s - 3600.0:
            self._started.popleft()
        return max(0, self.settings.max_moves_per_hour - len(self._started))

    def _budget(self, placer: ReplicaPlacer, now_s: float) -> MoveBudget | None:
        """The hour's byte budget on this pass's placer, with what earlier passes of the hour moved."""
        hour = int(now_s // 3600)
        if hour != self._hour:
            self._hour, self._used_mb = hour, {}
        if self.settings.mb_per_server_hour is None:
            return None
        budget = MoveBudget(placer, self.settings.mb_per_server_hour)
        budget.at_day(hour)  # the period is the hour here (module docstring, step 3)
        for t, name in enumerate(placer.tenant_names):
            budget.used_mb[t] = self._used_mb.get(name, 0.0)
        return budget

    def _admit(self, job: MoveJob, placer: ReplicaPlacer) -> bool:
        """The moves-per-hour cap; charges the tenants' bytes of the hour when admitted."""
        now = self.clock()
        if self._moves_left(now) <= 0:
            return False
        self._started.append(now)
        mb = placer.config.block_size_mb
        for tenant in {job.old_tenant, job.new_tenant}:
            self._used_mb[tenant] = self._used_mb.get(tenant, 0.0) + mb
        return True

    # -- one move --------------------------------------------------------------------------------
    def execute(self, job: MoveJob) -> int:
        """Steps a-e for one planned move; 1 when the replica moved, else 0 (rolled back)."""
        assert self.namenode is not None
        with self._lock:
            self._in_flight.append(job)
        self._save_journal()
        self.metrics.set("harvest_mover_in_flight", float(len(self._in_flight)))
        arrived = False
        try:
            self.namenode.set_replication(job.path, job.replication + 1)
            arrived = self._wait(job, lambda hosts: job.new in hosts or len(hosts) > job.replication)
        except HdfsError as exc:
            logger.warning("mover: raising the factor of %s failed: %s", job.path, exc)
        outcome = self._lower(job, arrived)
        return self._finish(job, outcome)

    def _lower(self, job: MoveJob, arrived: bool | None) -> str:
        """Step d-e: the factor back to the recorded one, then wait for the old replica to go
        (``arrived`` None, a journal entry of a previous run: wait until the block is back to its
        factor, whichever replica the NameNode dropped)."""
        assert self.namenode is not None
        job.phase = "lower"
        self._save_journal()
        try:
            self.namenode.set_replication(job.path, job.replication)
        except HdfsError as exc:
            raise HarvestError(f"mover: lowering the factor of {job.path} back to {job.replication} failed "
                               f"(kept in the journal, retried next pass): {exc}") from None
        if arrived is False:
            return "rolled back: the new replica did not arrive"
        # Until the block is back to its factor without the old replica, or without the new one (the
        # NameNode dropped the new replica instead: seen on 3.3.6 under load; safe, the next pass
        # tries again): the count alone can read as the factor for a moment before the excess
        # replica the NameNode chose is removed.
        self._wait(job, lambda hosts: len(hosts) <= job.replication and (job.old not in hosts or job.new not in hosts))
        hosts = self._hosts(job) or ()
        if len(hosts) > job.replication:
            return "lowered: the block still over its factor at the timeout"
        if job.new in hosts and job.old not in hosts:
            return "moved"
        if job.old in hosts:
            return "rolled back: the block keeps its old replicas (the new one never arrived or was dropped)"
        return "rolled back"

    def _wait(self, job: MoveJob, done: Callable[[tuple[str, ...]], bool]) -> bool:
        assert self.namenode is not None
        deadline = time.monotonic() + self.settings.move_timeout_s
        while not self._stopping.is_set():
            hosts = self._hosts(job)
            if hosts is None:
                return False  # the file or block is gone (deleted, appended): nothing to move
            if done(hosts):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.settings.poll_s)
        return False

    def _hosts(self, job: MoveJob) -> tuple[str, ...] | None:
        assert self.namenode is not None
        try:
            return next((b.hosts for b in self.namenode.blocks(job.path) if b.block_id == job.block_id), None)
        except HdfsError as exc:
            if "FileNotFoundException" in str(exc):
                return None
            raise

    def _finish(self, job: MoveJob, outcome: str) -> int:
        with self._lock:
            self._in_flight = [j for j in self._in_flight if j is not job]
        self._save_journal()
        self.metrics.set("harvest_mover_in_flight", float(len(self._in_flight)))
        moved = outcome.endswith("moved")
        if moved:
            self.moves_total += 1
        key = "moved" if moved else ("recovered" if outcome.startswith("recovered") else "rolled_back")
        self.metrics.inc("harvest_mover_moves_total", outcome=key)
        self._explain(job, outcome)
        logger.info("mover: block %d of %s: %s -> %s (%s): %s", job.block_id, job.path, job.old, job.new,
                    job.reason, outcome)
        return int(moved)

    def _explain(self, job: MoveJob, outcome: str) -> None:
        self.explained.append({"at": self.clock(), "path": job.path, "block_id": job.block_id,
                               "replication": job.replication, "holders": job.holders,
                               "from": {"node": job.old, "tenant": job.old_tenant},
                               "to": {"node": job.new, "tenant": job.new_tenant},
                               "reason": job.reason, "outcome": outcome,
                               "seconds": round(self.clock() - job.started_s, 3)})


def _scan_in_child(namenode: NameNode, roots: tuple[str, ...]) -> tuple[ReplicaMap, float]:
    """The scan in the worker process: the map and the process's CPU seconds for it."""
    cpu0 = time.process_time()
    blocks = ReplicaMap()
    namenode.scan_into(roots, blocks)
    return blocks, time.process_time() - cpu0


def _exit_with_parent(parent_pid: int) -> None:
    """The scan worker's initializer: exit when the service is gone (killed with SIGKILL, its worker
    would otherwise live on, orphaned)."""
    import os
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
