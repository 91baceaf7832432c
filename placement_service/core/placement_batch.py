"""Batch replica placement: many blocks' replicas at once, vectorized over the blocks (numpy).

``place_many(placer, writers, replicas)`` places a batch of new blocks on a ``ReplicaPlacer`` under
the same rules as ``ReplicaPlacer.place`` (module ``core.placement``); it is what a NameNode-side
caller or the simulator uses for the blocks created in one step.

Vectorized path (3 or fewer replicas, one round, the writer usable and in the grid): the writer's
cell leaves a 2x2 sub-grid of free rows and columns, whose two diagonals are the only cell pairs
for replicas 2 and 3. Per block: a random diagonal (the other one when a cell has no usable
tenant), a random order of its two cells, in each cell a random usable tenant (redrawn a few times
while its environment repeats the writer's or the other replica's), in each tenant a random usable
server. Space: the chosen servers' uses are ranked in block order and a block keeps its servers
only when each one still has a block of space at its rank (ranks of blocks dropped later still
count, which only sends more blocks to the exact path). Each kept block's space is then allocated.

Every other block (writer unknown, busy, full or outside the grid, an empty cell pair, repeated
environments after the redraws, no space at its rank, more replicas than one round) goes through
``ReplicaPlacer.place`` one by one, after the vectorized blocks are committed: that path chooses
jointly and relaxes only when no assignment exists, so the batch does too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from placement_service.core.types import PlacementError, PolicyError

if TYPE_CHECKING:
    from placement_service.core.placement import BatchView, ReplicaPlacer
    from placement_service.core.placement_base import _Pool

_REDRAWS = 4
# The two rows (or columns) other than row (column) i of the 3x3 grid.
_OTHER = np.array([[1, 2], [0, 2], [0, 1]], dtype=np.int64)


@dataclass(frozen=True)
class BatchPlacement:
    """Servers chosen for a batch of blocks: ``targets[b, k]`` = server index (inventory row) of
    replica ``k`` of block ``b`` (-1 when the block failed); ``reasons[b]``: what was relaxed or
    why the block failed ("" otherwise)."""

    targets: np.ndarray
    relaxed: np.ndarray
    failed: np.ndarray
    reasons: list[str]

    def names(self, servers: Sequence[str], block: int) -> tuple[str, ...]:
        """Server names of one block's replicas (empty when it failed)."""
        return tuple(servers[s] for s in self.targets[block] if s >= 0)


def _flat(pools: list[_Pool], ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Active members of each pool, concatenated, and each pool's offset."""
    flat: list[int] = []
    for p in pools:
        flat.extend(p.items[: p.n])
    off = np.zeros(len(pools) + 1, dtype=np.int64)
    np.cumsum(ns, out=off[1:])
    return np.asarray(flat, dtype=np.int64), off


@dataclass(frozen=True)
class _Snapshot:
    """The placer's usable tenants per cell and usable servers per tenant, flattened for numpy."""

    view: BatchView
    usable: np.ndarray
    slots: np.ndarray  # blocks of free space per server
    cell_n: np.ndarray
    cell_t: np.ndarray
    cell_off: np.ndarray
    ten_n: np.ndarray
    ten_s: np.ndarray
    ten_off: np.ndarray


def _snapshot(placer: ReplicaPlacer) -> _Snapshot | None:
    """The current state, or None when no grid tenant has a usable server."""
    st = placer.batch_view()
    cell_n = np.array([p.n for p in st.cell_pools], dtype=np.int64)
    ten_n = np.array([p.n for p in st.tenant_pools], dtype=np.int64)
    cell_t, cell_off = _flat(st.cell_pools, cell_n)
    ten_s, ten_off = _flat(st.tenant_pools, ten_n)
    if len(cell_t) == 0 or len(ten_s) == 0:
        return None
    usable = np.asarray(st.usable, dtype=bool)
    slots = np.floor(np.asarray(st.free_mb) / placer.config.block_size_mb).astype(np.int64)
    return _Snapshot(st, usable, slots, cell_n, cell_t, cell_off, ten_n, ten_s, ten_off)


def _use_rank(servers: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries name the same server (0 for the first use)."""
    order = np.argsort(servers, kind="stable")
    srt = servers[order]
    pos = np.arange(len(srt))
    first = np.ones(len(srt), dtype=bool)
    first[1:] = srt[1:] != srt[:-1]
    rank = np.empty_like(pos)
    rank[order] = pos - np.maximum.accumulate(np.where(first, pos, 0))
    return rank


def place_many(
    placer: ReplicaPlacer,
    writer_idx: np.ndarray,
    replicas: int,
    rng: np.random.Generator,
) -> BatchPlacement:
    """Place one block per entry of ``writer_idx`` (inventory rows; -1: no writer), in order."""
    w = np.asarray(writer_idx, dtype=np.int64)
    n = len(w)
    targets = np.full((n, replicas), -1, dtype=np.int64)
    relaxed = np.zeros(n, dtype=bool)
    failed = np.zeros(n, dtype=bool)
    reasons = [""] * n
    if replicas < 1:
        raise PolicyError(f"place_many: replicas must be >= 1, got {replicas}")
    if np.any(w >= len(placer.inventory)):
        raise PolicyError(
            f"place_many: writer index out of range (inventory has {len(placer.inventory)} servers)"
        )
    done = np.zeros(n, dtype=bool)
    if n and replicas <= 3 and placer.config.forget_every >= replicas and not placer.uses_busy_hours:
        done = _vectorized(placer, w, replicas, rng, targets)
    names = placer.inventory.server
    for b in np.flatnonzero(~done).tolist():
        wb = int(w[b])
        try:
            res = placer.place(names[wb] if wb >= 0 else None, replicas, rng=rng)
        except PlacementError as exc:
            failed[b] = True
            reasons[b] = str(exc)
            continue
        targets[b] = [placer.server_index(s) for s in res.targets]
        relaxed[b] = res.relaxed
        reasons[b] = res.reason
    return BatchPlacement(targets, relaxed, failed, reasons)


def _vectorized(
    placer: ReplicaPlacer, w: np.ndarray, replicas: int, rng: np.random.Generator, targets: np.ndarray
) -> np.ndarray:
    """Place the blocks the vectorized path can take; return which ones it placed."""
    snap = _snapshot(placer)
    if snap is None:
        return np.zeros(len(w), dtype=bool)
    st, usable, slots = snap.view, snap.usable, snap.slots
    cell_n, cell_t, cell_off = snap.cell_n, snap.cell_t, snap.cell_off
    ten_n, ten_s, ten_off = snap.ten_n, snap.ten_s, snap.ten_off

    ok = w >= 0
    wc = np.where(ok, w, 0)
    ok &= usable[wc] & (st.server_cell[wc] >= 0)
    blocks = np.flatnonzero(ok)
    wb = w[blocks]
    m = len(blocks)
    if replicas == 1:
        cols = [wb]
    else:
        cw = st.server_cell[wb]
        ro, co = _OTHER[cw // 3], _OTHER[cw % 3]
        a = (rng.random(m) < 0.5).astype(np.int64)
        d = (rng.random(m) < 0.5).astype(np.int64)
        i = np.arange(m)
        c2 = ro[i, a] * 3 + co[i, d]
        c3 = ro[i, 1 - a] * 3 + co[i, 1 - d]
        empty = (cell_n[c2] == 0) | (cell_n[c3] == 0)
        if replicas == 2:
            empty = cell_n[c2] == 0
        d = np.where(empty, 1 - d, d)  # the other diagonal
        c2 = ro[i, a] * 3 + co[i, d]
        c3 = ro[i, 1 - a] * 3 + co[i, 1 - d]
        good = cell_n[c2] > 0
        if replicas == 3:
            good &= cell_n[c3] > 0
        ew = st.tenant_env[st.server_tenant[wb]]
        n2 = np.maximum(cell_n[c2], 1)
        t2 = cell_t[np.minimum(cell_off[c2] + (rng.random(m) * n2).astype(np.int64), len(cell_t) - 1)]
        e2 = st.tenant_env[t2]
        if replicas == 3:
            n3 = np.maximum(cell_n[c3], 1)
            t3 = cell_t[np.minimum(cell_off[c3] + (rng.random(m) * n3).astype(np.int64), len(cell_t) - 1)]
            e3 = st.tenant_env[t3]
        for _ in range(_REDRAWS):
            bad2 = good & (e2 == ew)
            if bad2.any():
                j = np.flatnonzero(bad2)
                t2[j] = cell_t[cell_off[c2[j]] + (rng.random(len(j)) * n2[j]).astype(np.int64)]
                e2[j] = st.tenant_env[t2[j]]
            if replicas == 3:
                bad3 = good & ((e3 == ew) | (e3 == e2))
                if bad3.any():
                    j = np.flatnonzero(bad3)
                    t3[j] = cell_t[cell_off[c3[j]] + (rng.random(len(j)) * n3[j]).astype(np.int64)]
                    e3[j] = st.tenant_env[t3[j]]
        good &= e2 != ew
        s2 = ten_s[np.minimum(ten_off[t2] + (rng.random(m) * ten_n[t2]).astype(np.int64), len(ten_s) - 1)]
        cols = [wb, s2]
        if replicas == 3:
            good &= (e3 != ew) & (e3 != e2)
            s3 = ten_s[np.minimum(ten_off[t3] + (rng.random(m) * ten_n[t3]).astype(np.int64), len(ten_s) - 1)]
            cols.append(s3)
        keep = np.flatnonzero(good)
        blocks, cols = blocks[keep], [col[keep] for col in cols]
        m = len(blocks)

    # Space: rank each server's uses in block order; keep a block when all of its ranks fit.
    flat = np.stack(cols, axis=1).reshape(-1)
    fits = (_use_rank(flat) < slots[flat]).reshape(m, replicas).all(axis=1)
    blocks = blocks[fits]
    chosen = np.stack(cols, axis=1)[fits]
    targets[blocks] = chosen
    placer.allocate_blocks(chosen.reshape(-1))
    placed = np.zeros(len(w), dtype=bool)
    placed[blocks] = True
    return placed


def place_one_more(placer: ReplicaPlacer, holders: np.ndarray, rng: np.random.Generator) -> BatchPlacement:
    """Re-replication in a batch: one new replica for each row of ``holders`` (inventory rows of
    the block's surviving replicas, -1 padded), under the rules of ``place(None, 1, existing=...)``.

    Vectorized when a block's two survivors sit in grid cells of distinct rows and columns (the
    third cell of the round is then fixed: the remaining row and column) and the round has room:
    a random usable tenant of that cell whose environment is not a survivor's (redrawn a few
    times), a random usable server of it, space ranked as in ``place_many``. Every other block goes
    through ``place`` after the vectorized ones are committed.
    """
    h = np.asarray(holders, dtype=np.int64)
    n = h.shape[0]
    targets = np.full((n, 1), -1, dtype=np.int64)
    relaxed = np.zeros(n, dtype=bool)
    failed = np.zeros(n, dtype=bool)
    reasons = [""] * n
    done = np.zeros(n, dtype=bool)
    if n and h.shape[1] >= 2 and placer.config.forget_every == 3 and not placer.uses_busy_hours:
        done = _vectorized_one_more(placer, h, rng, targets)
    names = placer.inventory.server
    for b in np.flatnonzero(~done).tolist():
        existing = [names[x] for x in h[b].tolist() if x >= 0]
        try:
            res = placer.place(None, 1, existing=existing, rng=rng)
        except PlacementError as exc:
            failed[b] = True
            reasons[b] = str(exc)
            continue
        targets[b, 0] = placer.server_index(res.targets[0])
        relaxed[b] = res.relaxed
        reasons[b] = res.reason
    return BatchPlacement(targets, relaxed, failed, reasons)


def _vectorized_one_more(
    placer: ReplicaPlacer, h: np.ndarray, rng: np.random.Generator, targets: np.ndarray
) -> np.ndarray:
    placed = np.zeros(h.shape[0], dtype=bool)
    snap = _snapshot(placer)
    if snap is None:
        return placed
    st, usable, slots = snap.view, snap.usable, snap.slots
    cell_n, cell_t, cell_off = snap.cell_n, snap.cell_t, snap.cell_off
    ten_n, ten_s, ten_off = snap.ten_n, snap.ten_s, snap.ten_off
    alive = (h >= 0).sum(axis=1)
    first_two = np.sort(np.where(h >= 0, h, np.iinfo(np.int64).max), axis=1)[:, :2]
    ok = alive == 2
    a = np.where(ok, first_two[:, 0], 0)
    b = np.where(ok, first_two[:, 1], 0)
    ca, cb = st.server_cell[a], st.server_cell[b]
    ok &= (ca >= 0) & (cb >= 0)
    ra, rb, ka, kb = ca // 3, cb // 3, ca % 3, cb % 3
    ok &= (ra != rb) & (ka != kb)
    cell = (3 - ra - rb) * 3 + (3 - ka - kb)
    cell = np.where(ok, cell, 0)
    ok &= cell_n[cell] > 0
    blocks = np.flatnonzero(ok)
    m = len(blocks)
    if m == 0:
        return placed
    c = cell[blocks]
    ea = st.tenant_env[st.server_tenant[a[blocks]]]
    eb = st.tenant_env[st.server_tenant[b[blocks]]]
    nc = np.maximum(cell_n[c], 1)
    t = cell_t[np.minimum(cell_off[c] + (rng.random(m) * nc).astype(np.int64), len(cell_t) - 1)]
    e = st.tenant_env[t]
    for _ in range(_REDRAWS):
        bad = (e == ea) | (e == eb)
        if not bad.any():
            break
        j = np.flatnonzero(bad)
        t[j] = cell_t[cell_off[c[j]] + (rng.random(len(j)) * nc[j]).astype(np.int64)]
        e[j] = st.tenant_env[t[j]]
    good = (e != ea) & (e != eb)
    srv = ten_s[np.minimum(ten_off[t] + (rng.random(m) * ten_n[t]).astype(np.int64), len(ten_s) - 1)]
    good &= usable[srv]
    blocks, srv = blocks[good], srv[good]
    fits = _use_rank(srv) < slots[srv]
    blocks, srv = blocks[fits], srv[fits]
    targets[blocks, 0] = srv
    placer.allocate_blocks(srv)
    placed[blocks] = True
    return placed
