"""Durability simulation: a year of reimages against HDFS-Stock and HDFS-H replica placement.

State: ``rep[b, k]`` = server holding replica ``k`` of block ``b`` (-1: none). Time advances in steps
of ``step_s`` (default one hour); in each step, in order:

1. **Creations**: the blocks created in the step (creation times uniform over the simulated span,
   writers uniform over the servers) get their replicas from the placer (the policy core's
   ``ReplicaPlacer`` or ``StockPlacer``: same code as the service); HDFS-H places the step's blocks
   in one ``place_many_indices`` call (the core's vectorized batch placement, same rules), and
   its re-replications of a step in one ``place_one_more_indices`` call. With
   ``place_every_s`` (``harvest whatif``: a day), HDFS-H places the blocks of that many seconds in
   one call at the period's first step and writes each at its own step (a server reimaged in
   between gets the replica after its reimage, as a write would; the placer's space is taken at
   the call).
2. **Reimages**: a reimaged server loses every replica on its disk (``rep`` entries set to -1) and
   its space is free again (``reset_server``). A block with no replica left is lost for good;
   the others join the re-replication queue. A block the step's reimages take from two or more
   replicas down to one or none counts in ``one_left``: every lost block was counted there once,
   and the count is far more frequent than losses (~1,200 a year at 1M blocks on the generated
   datacenter, where losses are 0-2), so it measures a placement's exposure with power.
   ``one_left_block_hours`` adds up the hours blocks spend with one replica (after re-replication).
3. **Re-replication**: each server can act as the source of ``repair_blocks_per_hour`` (30, the
   HDFS rate the paper uses) copies per hour (a token bucket refilled every step, holding at most
   one step's worth). Queued blocks are served fewest-replicas-first, then oldest-first; each picks
   a random surviving replica among those whose server still has a token (as HDFS's
   ``BlockManager.chooseSourceDatanodes`` skips nodes at their replication limit; ``_repair_sources``)
   and asks the placer for one more target given the surviving holders (``existing=``). One replica
   per block per step. Before 2026-11-27 the pick came first and a block whose pick had no token
   waited, although another survivor had one: placements that put many blocks' replicas on the same
   tenants then left blocks at two replicas for days (``one_left`` 1,444 against HDFS-H's 1,191 a
   year at 1M blocks for HDFS-H-cobusy; with the HDFS choice 1,171 against 1,208).

With a ``PresenceSchedule`` (elastic servers, ``sim/elastic.py``), servers also come and go: at the
start of each step, before the creations, the step's presence changes are applied through the
placer's busy flag, so an absent server takes no new replica (first, re-replicated or written from
it) until it is present again; its replicas stay until a reimage (revocation) wipes them.

With a ``mover`` (HDFS-H-cobusy-mover), after the re-replication of every step that ends a
``move_every_s`` period, ``mover(t, rep[:created])`` may move one replica of blocks at risk
(``core.mover``: copy to the new server, then delete the old one, so a move never lowers a block's
replica count); the moved replicas are written through the index's log like any other.

Finding the replicas of a reimaged server is a lookup in a server-sorted index of ``rep`` (rebuilt
when more than ``rebuild_every`` replicas were written since the last build) plus a scan of the
replicas written since. Every write goes through that log, so no replica is missed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement_service.core.mover import MoveReport
from placement_service.core.placement_batch import BatchPlacement
from placement_service.core.types import PlacementError
from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.policy import HdfsSystem, Placer
from placement_service.sim.reimages import ReimageSchedule

logger = logging.getLogger(__name__)

DAY_S = 86400.0


@dataclass(frozen=True)
class DurabilityConfig:
    days: float = 365.0
    blocks: int = 4_000_000
    step_s: float = 3600.0
    repair_blocks_per_hour: float = 30.0
    block_size_mb: float = 256.0
    rebuild_every: int = 2_000_000
    place_every_s: float | None = None
    """HDFS-H's new blocks placed in one batch call per this many seconds (a multiple of ``step_s``;
    each block still written at its own step); None: one call per step. Each call has a fixed cost,
    so a year of hourly calls on a small cluster is dominated by it (module docstring, step 1)."""

    def __post_init__(self) -> None:
        if self.days <= 0 or self.blocks < 1 or self.step_s <= 0 or self.repair_blocks_per_hour <= 0:
            raise ValueError("days, blocks, step_s and repair_blocks_per_hour must be > 0")
        if self.place_every_s is not None and not self.place_every_s >= self.step_s:
            raise ValueError(f"place_every_s must be >= step_s ({self.step_s:g} s), got {self.place_every_s:g}")


@dataclass(frozen=True)
class PresenceSchedule:
    """Servers entering (``present``) or leaving the harvestable set, seconds from the simulation start."""

    time_s: np.ndarray  # float64, ascending
    server: np.ndarray  # int64 inventory index
    present: np.ndarray  # bool


@dataclass(frozen=True)
class DurabilityResult:
    system: HdfsSystem
    replicas: int
    blocks: int
    lost_blocks: int
    lost_pct: float
    reimages: int
    repairs: int
    relaxed_placements: int
    failed_placements: int
    max_queue: int
    wall_s: float
    moved_replicas: int = 0
    one_left: int = 0
    """Times a step's reimages took a block from two or more live replicas to one or none (module
    docstring): every lost block that ever held two replicas passed through one of these."""
    one_left_block_hours: float = 0.0
    """Block-hours spent with exactly one live replica, counted after each step's re-replication."""
    one_left_moved: int = 0
    """The ``one_left`` events of blocks the mover had moved before (0 without a mover)."""


class _ReplicaIndex:
    """Server -> flat positions of ``rep`` (sorted base + append-only log since the last rebuild)."""

    def __init__(self, rep: np.ndarray, n_servers: int, rebuild_every: int) -> None:
        self.rep = rep
        self.flat = rep.reshape(-1)
        self.n = n_servers
        self.rebuild_every = rebuild_every
        self.log_pos = np.zeros(1 << 16, dtype=np.int64)
        self.log_srv = np.zeros(1 << 16, dtype=np.int32)
        self.m = 0
        self.rebuild()

    def rebuild(self) -> None:
        pos = np.flatnonzero(self.flat >= 0)
        srv = self.flat[pos]
        order = np.argsort(srv, kind="stable")
        self.base = pos[order]
        self.ptr = np.concatenate([[0], np.cumsum(np.bincount(srv, minlength=self.n))])
        self.m = 0

    def log(self, pos: np.ndarray, srv: np.ndarray) -> None:
        k = pos.shape[0]
        if self.m + k > self.log_pos.shape[0]:
            size = max(2 * self.log_pos.shape[0], self.m + k)
            self.log_pos = np.resize(self.log_pos, size)
            self.log_srv = np.resize(self.log_srv, size)
        self.log_pos[self.m : self.m + k] = pos
        self.log_srv[self.m : self.m + k] = srv
        self.m += k
        if self.m >= self.rebuild_every:
            self.rebuild()

    def on_servers(self, servers: np.ndarray) -> np.ndarray:
        """Flat positions of every current replica on ``servers``."""
        parts = [self.base[self.ptr[s] : self.ptr[s + 1]] for s in servers]
        if self.m:
            parts.append(self.log_pos[: self.m][np.isin(self.log_srv[: self.m], servers)])
        cand = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        return cand[np.isin(self.flat[cand], servers)]


def _repair_sources(rows: np.ndarray, capacity: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The source server of each queued block's copy this step (``rows``: the blocks' replica
    servers, -1 for none, in queue order), and whether it has one: as HDFS's
    ``BlockManager.chooseSourceDatanodes``, a random surviving replica among those whose server has
    not reached its limit (``capacity``: copies each server may still source this step). In queue
    order each source serves as many blocks as its capacity; a block whose pick was taken by blocks
    ahead of it tries its other survivors with capacity left (one pass per replica column)."""
    n = rows.shape[0]
    left = capacity.astype(np.int64)
    keys = rng.random(rows.shape)
    keys[rows < 0] = -1.0
    src = np.full(n, -1, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    pending = np.arange(n)
    for _ in range(rows.shape[1]):
        if pending.size == 0:
            break
        k = keys[pending]
        r = rows[pending]
        k[(r >= 0) & (left[np.maximum(r, 0)] <= 0)] = -1.0  # survivors at their limit are not sources
        pick = np.argmax(k, axis=1)
        has = k[np.arange(pending.size), pick] >= 0.0
        pending = pending[has]
        s = r[has, pick[has]].astype(np.int64)
        order = np.argsort(s, kind="stable")
        ss = s[order]
        rank = np.empty(s.size, dtype=np.int64)
        rank[order] = np.arange(s.size) - np.searchsorted(ss, ss, side="left")
        take = rank < left[s]
        src[pending[take]] = s[take]
        ok[pending[take]] = True
        np.subtract.at(left, s[take], 1)
        pending = pending[~take]
    return src, ok


def simulate_durability(
    dc: SimDatacenter,
    placer_factory: Callable[[], Placer],
    system: HdfsSystem,
    replicas: int,
    reimages: ReimageSchedule,
    config: DurabilityConfig,
    *,
    create_rng: np.random.Generator,
    place_rng: np.random.Generator,
    repair_rng: np.random.Generator,
    on_wipe: Callable[[float, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    presence: PresenceSchedule | None = None,
    mover: Callable[[float, np.ndarray], MoveReport] | None = None,
    move_every_s: float = DAY_S,
) -> DurabilityResult:
    """One (system, replicas) run; ``placer_factory()`` returns a fresh core placer for ``system``.

    ``on_wipe(time_s, blocks, servers, lost)``: called at each step with reimages, with every replica
    they wiped (block and server, one entry per replica) and the blocks lost by it (for analysis).
    ``presence``: servers that leave and rejoin the placeable set (module docstring).
    ``mover(t_s, replicas)``: called every ``move_every_s`` with the created blocks' rows of ``rep``
    (a view: moves are made in place) and returns its ``MoveReport`` (module docstring)."""
    if mover is not None and move_every_s <= 0:
        raise ValueError(f"simulate_durability: move_every_s must be > 0, got {move_every_s}")
    wall0 = time.perf_counter()
    placer = placer_factory()
    batch = getattr(placer, "place_many_indices", None)  # ReplicaPlacer's batch placement
    repair_batch = getattr(placer, "place_one_more_indices", None)  # and its batch re-replication
    n = dc.n_servers
    names = dc.inventory.server
    index = dc.inventory.index()
    total_s = config.days * DAY_S
    n_blocks = int(config.blocks)
    create_t = np.sort(create_rng.uniform(0.0, total_s, n_blocks))
    writer = create_rng.integers(0, n, n_blocks)
    rep = np.full((n_blocks, replicas), -1, dtype=np.int32)
    alive = np.zeros(n_blocks, dtype=np.int8)
    lost = np.zeros(n_blocks, dtype=bool)
    queued = np.zeros(n_blocks, dtype=bool)
    queue = np.zeros(0, dtype=np.int64)
    idx = _ReplicaIndex(rep, n, config.rebuild_every)
    rate_per_step = config.repair_blocks_per_hour * config.step_s / 3600.0
    tokens = np.full(n, rate_per_step)
    relaxed = failed = repairs = max_queue = moved = one_left = one_left_moved = 0
    was_moved = np.zeros(n_blocks, dtype=bool)
    one_left_hours = 0.0
    step_h = config.step_s / 3600.0
    next_move_s = move_every_s
    next_block = next_reimage = next_presence = 0
    n_steps = int(np.ceil(total_s / config.step_s))
    place_every = max(1, int(round((config.place_every_s or config.step_s) / config.step_s)))
    pend_targets = np.zeros((0, replicas), dtype=np.int64)
    pend_failed = pend_relaxed = np.zeros(0, dtype=bool)
    if batch is not None and place_every > 1:
        pend_targets = np.full((n_blocks, replicas), -1, dtype=np.int64)
        pend_failed = np.zeros(n_blocks, dtype=bool)
        pend_relaxed = np.zeros(n_blocks, dtype=bool)
    p_start = 0
    progress_every = max(1, n_steps // 12)
    for step in range(n_steps):
        t1 = min(total_s, (step + 1) * config.step_s)
        # 0. servers leaving or rejoining the placeable set (elastic servers).
        if presence is not None:
            stop_p = int(np.searchsorted(presence.time_s, t1, side="left"))
            for s, here in zip(presence.server[next_presence:stop_p].tolist(),
                               presence.present[next_presence:stop_p].tolist(), strict=True):  # fmt: skip
                placer.set_busy(names[s], not here)
            next_presence = max(next_presence, stop_p)
        # 1. creations.
        stop = int(np.searchsorted(create_t, t1, side="left"))
        if batch is not None and place_every > 1 and step % place_every == 0:
            # HDFS-H, batched over several steps: the period's blocks placed now, written at their steps.
            p_stop = int(np.searchsorted(create_t, min(total_s, (step + place_every) * config.step_s), side="left"))
            if p_stop > p_start:
                got = batch(writer[p_start:p_stop], replicas, rng=place_rng)
                pend_targets[p_start:p_stop] = got.targets
                pend_failed[p_start:p_stop] = got.failed
                pend_relaxed[p_start:p_stop] = got.relaxed
                p_start = p_stop
        if stop > next_block:
            if batch is not None:  # HDFS-H: the whole step's blocks in one vectorized call
                if place_every > 1:
                    placed = BatchPlacement(pend_targets[next_block:stop], pend_relaxed[next_block:stop],
                                            pend_failed[next_block:stop], [])
                else:
                    placed = batch(writer[next_block:stop], replicas, rng=place_rng)
                ok = ~placed.failed
                failed += int(placed.failed.sum())
                relaxed += int(placed.relaxed.sum())
                m = int(ok.sum())
                bb = np.repeat(np.arange(next_block, stop)[ok], replicas)
                kk = np.tile(np.arange(replicas, dtype=np.int64), m)
                ss = placed.targets[ok].reshape(-1).astype(np.int32)
            else:
                done_b: list[int] = []
                done_k: list[int] = []
                done_s: list[int] = []
                for b, w in zip(range(next_block, stop), writer[next_block:stop].tolist(), strict=True):
                    try:
                        res = placer.place(names[w], replicas, rng=place_rng)
                    except PlacementError:
                        failed += 1
                        continue
                    relaxed += res.relaxed
                    for k, name in enumerate(res.targets):
                        done_b.append(b)
                        done_k.append(k)
                        done_s.append(index[name])
                bb = np.array(done_b, dtype=np.int64)
                kk = np.array(done_k, dtype=np.int64)
                ss = np.array(done_s, dtype=np.int32)
            rep[bb, kk] = ss
            created = np.arange(next_block, stop)
            alive[created] = (rep[created] >= 0).sum(axis=1)
            short = created[(alive[created] > 0) & (alive[created] < replicas)]
            queued[short] = True
            queue = np.concatenate([queue, short])
            idx.log(bb * replicas + kk, ss)
            next_block = stop
        # 2. reimages.
        stop_r = int(np.searchsorted(reimages.time_s, t1, side="left"))
        if stop_r > next_reimage:
            hit = np.unique(reimages.server[next_reimage:stop_r])
            next_reimage = stop_r
            for s in hit:
                placer.reset_server(names[s])
            pos = idx.on_servers(hit)
            if pos.size:
                wiped = idx.flat[pos].copy()
                idx.flat[pos] = -1
                blocks, counts = np.unique(pos // replicas, return_counts=True)
                down = (alive[blocks] > 1) & (alive[blocks] - counts <= 1)
                one_left += int(down.sum())
                one_left_moved += int((down & was_moved[blocks]).sum())
                alive[blocks] -= counts.astype(np.int8)
                dead = blocks[(alive[blocks] == 0) & ~lost[blocks]]
                lost[dead] = True
                if on_wipe is not None:
                    on_wipe(t1, pos // replicas, wiped.astype(np.int64), dead)
                hurt = blocks[(alive[blocks] > 0) & ~queued[blocks]]
                queued[hurt] = True
                queue = np.concatenate([queue, hurt])
        # 3. re-replication.
        tokens = np.minimum(tokens + rate_per_step, rate_per_step)
        if queue.size:
            keep = ~lost[queue] & (alive[queue] < replicas)
            queued[queue[~keep]] = False
            queue = queue[keep]
        if queue.size:
            max_queue = max(max_queue, int(queue.size))
            q = queue[np.argsort(alive[queue], kind="stable")]
            src, ok = _repair_sources(rep[q], np.floor(tokens), repair_rng)
            sel = q[ok]
            got_b: list[int] = []
            got_k: list[int] = []
            got_s: list[int] = []
            if repair_batch is not None and sel.size:  # HDFS-H: the step's repairs in one call
                rows_sel = rep[sel]
                placed = repair_batch(rows_sel, rng=place_rng)
                ok_r = ~placed.failed
                failed += int(placed.failed.sum())
                got_b = sel[ok_r].tolist()
                got_k = np.argmax(rows_sel[ok_r] < 0, axis=1).tolist()
                got_s = placed.targets[ok_r, 0].tolist()
            else:
                for b, row in zip(sel.tolist(), rep[sel].tolist(), strict=True):
                    holders = [names[x] for x in row if x >= 0]
                    try:
                        res = placer.place(None, 1, existing=holders, rng=place_rng)
                    except PlacementError:
                        failed += 1
                        continue
                    got_b.append(b)
                    got_k.append(row.index(-1))
                    got_s.append(index[res.targets[0]])
            if got_b:
                gb = np.array(got_b, dtype=np.int64)
                gk = np.array(got_k, dtype=np.int64)
                gs = np.array(got_s, dtype=np.int32)
                rep[gb, gk] = gs
                alive[gb] += 1
                repairs += len(got_b)
                idx.log(gb * replicas + gk, gs)
            np.subtract.at(tokens, src[ok], 1.0)
            done = alive[q] >= replicas
            queued[q[done]] = False
            queue = q[~done]
            one_left_hours += step_h * int((alive[queue] == 1).sum())
        # 4. moves of blocks at risk (HDFS-H-cobusy-mover).
        if mover is not None and t1 >= next_move_s:
            while next_move_s <= t1:
                next_move_s += move_every_s
            report = mover(t1, rep[:next_block])
            if report.moved:
                pos = report.moved_blocks * replicas + report.moved_columns
                idx.log(pos, idx.flat[pos].copy())
                moved += report.moved
                was_moved[report.moved_blocks] = True
        if (step + 1) % progress_every == 0:
            logger.info(
                "%s x%d: day %.0f, %d blocks, %d lost, %d queued, %d repairs, %d moved",
                system.value, replicas, t1 / DAY_S, next_block, int(lost.sum()), queue.size, repairs, moved,
            )
    n_lost = int(lost.sum())
    return DurabilityResult(
        system=system,
        replicas=replicas,
        blocks=n_blocks,
        lost_blocks=n_lost,
        lost_pct=100.0 * n_lost / n_blocks,
        reimages=int(reimages.time_s.shape[0]),
        repairs=repairs,
        relaxed_placements=int(relaxed),
        failed_placements=failed,
        max_queue=max_queue,
        wall_s=time.perf_counter() - wall0,
        moved_replicas=moved,
        one_left=one_left,
        one_left_block_hours=one_left_hours,
        one_left_moved=one_left_moved,
    )
