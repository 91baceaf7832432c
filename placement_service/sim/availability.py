"""Availability simulation: how often every replica of a block sits on a busy server.

A server is *busy* in a slot when its primary tenant's CPU is above ``busy_cpu`` (default
``1 - reserve_frac``: serving the access would eat into the primary's reserve; the paper's accesses
cannot proceed above 66%). A busy DataNode refuses reads and is not chosen for new replicas.

Procedure for one (system, replicas, level, run):

1. Blocks are created uniformly over the history window (writers uniform over the servers); before
   each slot's blocks the placer learns which servers turned busy or idle (``set_busy``), so both
   systems avoid busy targets, as HDFS with load-aware placement does. HDFS-H and its variants
   place a slot's blocks in one batch call (``ReplicaPlacer.place_many_indices``: same rules).
2. Accesses: ``accesses`` (block, time) pairs drawn uniformly over the blocks and over the ``days``
   that follow the history window. An access fails when every replica's server is busy in that
   slot (a missing replica counts as unavailable).
3. ``failed_access_pct = 100 * failed / accesses``; ``utilization`` is the core-weighted average
   primary CPU over the access window. A block the placer found no space for (fewer servers with
   a block of space left than replicas: a cluster too small for the blocks) is not a busy read: its reads are counted apart (``unplaced_accesses``, and the
   blocks in ``unplaced_blocks``), out of ``accesses``, ``failed`` and the expectation below.
4. ``expected_failed_per_million``: what the sampled count estimates, computed exactly: the share
   of (block, slot) pairs of the access window in which every replica's server is busy, times a
   million (the replicas as they are in each slot). A million sampled accesses tell 0 from 1 per
   million only by luck; this tells 0.04 from 0.3 (two placements that both sample 0 most runs).

With a ``mover`` (HDFS-H-cobusy-mover, ``sim.policy.CobusyMover``), every ``move_every_slots`` from
the start of the access window on, the placer first learns the busy servers of that slot, then
``mover(slot, replicas)`` may move replicas (``core.mover``); each access reads the replicas as they
are at its slot. ``moved_replicas`` counts the moves.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement_service.core.types import PlacementError
from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.policy import HdfsSystem, Placer

logger = logging.getLogger(__name__)

DAY_S = 86400.0


@dataclass(frozen=True)
class AvailabilityConfig:
    days: float = 30.0
    history_days: float = 7.0
    blocks: int = 200_000
    accesses: int = 1_000_000
    reserve_frac: float = 1.0 / 3.0
    busy_cpu: float | None = None
    block_size_mb: float = 256.0

    def __post_init__(self) -> None:
        if self.days <= 0 or self.blocks < 1 or self.accesses < 1 or self.history_days < 0:
            raise ValueError("days, blocks and accesses must be > 0; history_days >= 0")

    @property
    def busy_threshold(self) -> float:
        return 1.0 - self.reserve_frac if self.busy_cpu is None else float(self.busy_cpu)


@dataclass(frozen=True)
class AvailabilityResult:
    system: HdfsSystem
    replicas: int
    utilization: float
    failed_access_pct: float
    accesses: int
    failed_accesses: int
    blocks: int
    relaxed_placements: int
    wall_s: float
    moved_replicas: int = 0
    expected_failed_per_million: float = 0.0
    unplaced_blocks: int = 0
    """Blocks the placer found no space for (every server full): not in ``accesses`` nor the expectation."""
    unplaced_accesses: int = 0
    """Reads drawn for those blocks: left out of ``accesses`` and ``failed_accesses``."""
    moves_per_day: float = 0.0
    """Replicas moved per day of the access window (0 without a mover)."""


def _all_busy_slots(rep: np.ndarray, server_tenant: np.ndarray, busy_t: np.ndarray, slots: np.ndarray) -> int:
    """The (block, slot) pairs, over the given slots, in which every replica's server of a block is
    busy (a missing replica, ``-1``, counts as busy, as for an access). ``busy_t`` [tenant, slot].

    A few slots (the mover's hourly periods): each block's rows gathered directly. Many (the whole
    window without a mover): once per distinct tenant group, over bit-packed rows."""
    if rep.shape[0] == 0 or slots.size == 0:
        return 0
    # Row ``n_t`` of ``rows`` is all busy: the row of a missing replica.
    n_t = busy_t.shape[0]
    tenants = np.where(rep >= 0, server_tenant[np.maximum(rep, 0)], n_t)
    rows = np.concatenate([busy_t[:, slots], np.ones((1, slots.size), dtype=bool)])
    if slots.size <= 32:
        both = rows[tenants[:, 0]]
        for j in range(1, tenants.shape[1]):
            both = both & rows[tenants[:, j]]
        return int(both.sum())
    k = tenants.shape[1]
    if k * math.log2(n_t + 1) < 62:  # one int64 key per group: a 1-d unique, ~20x faster than axis=0
        key = np.zeros(tenants.shape[0], dtype=np.int64)
        for j in range(k):
            key = key * (n_t + 1) + tenants[:, j]
        _, first, counts = np.unique(key, return_index=True, return_counts=True)
        groups = tenants[first]
    else:
        groups, counts = np.unique(tenants, axis=0, return_counts=True)
    packed = np.packbits(rows, axis=1)
    total = 0
    chunk = max(1, (1 << 22) // max(1, packed.shape[1]))
    for lo in range(0, groups.shape[0], chunk):
        g = groups[lo: lo + chunk]
        both = packed[g[:, 0]]
        for j in range(1, g.shape[1]):
            both = both & packed[g[:, j]]
        per = np.unpackbits(both, axis=1, count=slots.size).sum(axis=1, dtype=np.int64)
        total += int((per * counts[lo: lo + chunk]).sum())
    return total


def simulate_availability(
    dc: SimDatacenter,
    cpu: np.ndarray,
    placer: Placer,
    system: HdfsSystem,
    replicas: int,
    config: AvailabilityConfig,
    *,
    create_rng: np.random.Generator,
    place_rng: np.random.Generator,
    access_rng: np.random.Generator,
    on_failed: Callable[[np.ndarray, np.ndarray], None] | None = None,
    mover: Callable[[int, np.ndarray], int] | None = None,
    move_every_slots: int = 0,
) -> AvailabilityResult:
    """One point of the procedure above; ``on_failed(holders, slots)``, when given, receives the
    replica servers (``-1``: missing) and the slot of every failed access, for analysis.
    ``mover(slot, replicas)``: called every ``move_every_slots`` (> 0) of the access window, may
    change ``replicas`` [block, replica] (inventory rows) in place and returns the replicas moved."""
    if mover is not None and move_every_slots < 1:
        raise ValueError("simulate_availability: a mover needs move_every_slots >= 1")
    wall0 = time.perf_counter()
    interval_s = dc.series.interval_s
    n_slots = cpu.shape[1]
    n = dc.n_servers
    names = dc.inventory.server
    index = dc.inventory.index()
    busy_t = cpu > np.float32(config.busy_threshold)  # [tenant, slot]
    hist_slots = int(round(config.history_days * DAY_S / interval_s))
    eval_slots = max(1, int(round(config.days * DAY_S / interval_s)))
    # 1. blocks over the history window (slot 0 only when there is no history).
    n_blocks = int(config.blocks)
    create_slot = np.sort(create_rng.integers(0, max(1, hist_slots), n_blocks)) % n_slots
    writer = create_rng.integers(0, n, n_blocks)
    rep = np.full((n_blocks, replicas), -1, dtype=np.int64)
    tenant_servers = [np.flatnonzero(dc.server_tenant == t) for t in range(dc.n_tenants)]
    state = np.zeros(dc.n_tenants, dtype=bool)
    relaxed = 0
    bounds = np.searchsorted(create_slot, np.arange(n_slots + 1), side="left")

    def learn_busy(slot: int) -> None:
        flip = np.flatnonzero(busy_t[:, slot] != state)
        for t in flip:
            for s in tenant_servers[t]:
                placer.set_busy(names[s], bool(busy_t[t, slot]))
        state[flip] = busy_t[flip, slot]

    batch = getattr(placer, "place_many_indices", None)  # ReplicaPlacer's batch placement
    # placed[b]: False only for a block that failed for want of space (fewer servers with a block
    # of space left than replicas); a block refused because the servers with space were busy is a
    # block nobody can read (its reads fail), as before.
    placed = np.ones(n_blocks, dtype=bool)
    for slot in np.unique(create_slot):
        learn_busy(int(slot))
        lo, hi = int(bounds[slot]), int(bounds[slot + 1])
        failed_b: list[int] = []
        if batch is not None:  # HDFS-H and its variants: the slot's blocks in one call (same rules)
            got = batch(writer[lo:hi], replicas, rng=place_rng)
            ok_b = ~got.failed
            rep[lo:hi][ok_b] = got.targets[ok_b]
            relaxed += int(got.relaxed.sum())
            failed_b = (lo + np.flatnonzero(got.failed)).tolist()
        else:
            for b in range(lo, hi):
                try:
                    res = placer.place(names[writer[b]], replicas, rng=place_rng)
                except PlacementError:
                    failed_b.append(b)
                    continue
                relaxed += res.relaxed
                rep[b, : len(res.targets)] = [index[x] for x in res.targets]
        if failed_b and sum(placer.has_space(x) for x in names) < replicas:
            placed[failed_b] = False
    # 2. accesses over the window after the history.
    a_block = access_rng.integers(0, n_blocks, config.accesses)
    a_off = access_rng.integers(0, eval_slots, config.accesses)
    a_slot = (hist_slots + a_off) % n_slots
    moved = 0
    all_placed = bool(placed.all())
    window = (hist_slots + np.arange(eval_slots)) % n_slots
    if mover is None:
        holders = rep[a_block]
        all_busy = _all_busy_slots(rep if all_placed else rep[placed], dc.server_tenant, busy_t, window)
    else:
        all_busy = 0
        # Accesses read the replicas as they are at their slot: evaluate one move period at a time.
        holders = np.empty((config.accesses, replicas), dtype=np.int64)
        for start in range(0, eval_slots, move_every_slots):
            slot = (hist_slots + start) % n_slots
            learn_busy(slot)
            moved += int(mover(hist_slots + start, rep))
            seg = (a_off >= start) & (a_off < start + move_every_slots)
            holders[seg] = rep[a_block[seg]]
            all_busy += _all_busy_slots(rep if all_placed else rep[placed], dc.server_tenant, busy_t, window[start: start + move_every_slots])
    server_busy = np.ones(holders.shape, dtype=bool)
    ok = holders >= 0
    server_busy[ok] = busy_t[dc.server_tenant[holders[ok]], np.broadcast_to(a_slot[:, None], holders.shape)[ok]]
    # Reads of a block that found no space anywhere are not busy reads: counted apart (step 3).
    read = placed[a_block]
    failed_mask = server_busy.all(axis=1) & read
    failed = int(failed_mask.sum())
    n_read = int(read.sum())
    if on_failed is not None:
        on_failed(holders[failed_mask], a_slot[failed_mask])
    # 3. utilization of the access window.
    w = dc.tenant_cores()
    util = float((cpu[:, window].mean(axis=1, dtype=np.float64) * w).sum() / w.sum())
    n_placed = int(placed.sum())
    if n_placed < n_blocks:
        logger.warning("%s %s x%d: %d of %d blocks found no space (not counted as failed reads)",
                       dc.name, system.value, replicas, n_blocks - n_placed, n_blocks)
    return AvailabilityResult(
        system=system,
        replicas=replicas,
        utilization=util,
        failed_access_pct=100.0 * failed / max(1, n_read),
        accesses=n_read,
        failed_accesses=failed,
        blocks=n_blocks,
        relaxed_placements=int(relaxed),
        wall_s=time.perf_counter() - wall0,
        moved_replicas=moved,
        expected_failed_per_million=1e6 * all_busy / (max(1, n_placed) * eval_slots),
        unplaced_blocks=n_blocks - n_placed,
        unplaced_accesses=config.accesses - n_read,
        moves_per_day=moved / config.days,
    )
