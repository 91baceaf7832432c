"""HDFS-H-cobusy one block at a time (``ReplicaPlacer._place_fast_cobusy``): a new block of 2 or 3
replicas with nothing excluded or held, placed with exactly the general path's draws and choices
(``_pick_by_cobusy`` in ``core/placement_cobusy.py``) from sorted candidate lists kept per tenant.

Why it is fast. The general path scores every tenant of the candidate cells against the block's
tenants for every replica (a gather from the pair matrix, several array passes, a partition) and
walks its generic per-call state. Here:

1. Scores do not depend on the servers' state, only on the tenants: kept per scoring group over
   every tenant the choice may read (replica 2, against the first replica's tenant ``a``: every
   grid tenant; replica 3, the one open cell ``p`` against ``a`` and ``b``: every tenant of ``p``).
   Replica 3's come from pair rows kept per (tenant, cell), combined with ``CobusyModel.scores``'s
   operations in its order (the same floating-point results).
2. A replica's choice (``_Choice``) is read from them for the current state: the good-enough
   tenants active in the candidate cells, in the general path's order (one gather of the kept
   scores over the cells' active lists), and the walk's tenants within ``rel_tol`` of the lowest
   allowed score (built on first use, as the general path walks). It is kept, stamped with the
   version of the cells it read, and rebuilt when a tenant of one of them gains or loses its last
   usable server. The candidate cells hold no server of the block, so only environments decide
   what is allowed; a block reads its choice with the general path's draws.
3. Everything is dropped on ``set_cobusy`` and when the kept scores take more than about
   ``_CACHE_BYTES``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from placement_service.core.cobusy import CobusyModel
from placement_service.core.placement_base import _Uniforms
from placement_service.core.placement_cobusy import _COBUSY_HEAD, _ascending, _CobusyChoices
from placement_service.core.placement_fast import _FastPath, _index, _pick_from_rest
from placement_service.core.placement_grid import _PARTNER, _SUB, _TRIES, N_CELLS

_CACHE_BYTES = 64 << 20
"""About how much the kept scores and choices may take before all are dropped."""
_LIST_BYTES, _FLOAT_BYTES = 36, 8  # a tenant in a list, a number in an array


class _Choice:
    """One replica's choice in one state of its cells (``stamp``) over the tenants ``arr`` (the
    general path's concatenation of the cells' active lists) with their ``scores``: ``safe``, the
    tenants at most the target in that order (allowed or not); ``forbid``, per candidate cell the
    environments not allowed (the block's and the cell's rule's); the walk's tenants (``walk``,
    built on first use: most blocks draw among ``safe`` or share an earlier block's walk)."""

    __slots__ = ("stamp", "target", "safe", "forbid", "_walk", "_pending")

    def __init__(
        self, stamp: int, target: float, arr: np.ndarray, scores: np.ndarray, forbid: dict[int, frozenset[int]]
    ) -> None:
        self.stamp = stamp
        self.target = target
        self.safe: list[int] = arr[scores <= target].tolist() if target > 0.0 else []
        self.forbid = forbid
        self._walk: list[int] | None = None
        self._pending: tuple[np.ndarray, np.ndarray] | None = (arr, scores)

    def walk(self, placer: _CobusyFastPath) -> list[int]:
        """Step 3 of ``_pick_by_cobusy``, as it walks: the allowed tenants from the lowest score up
        to the larger of ``(1 + rel_tol)`` times the first one's and the target, ascending (ties:
        the order of ``arr``)."""
        if self._walk is not None:
            return self._walk
        assert self._pending is not None
        arr, scores = self._pending
        forbid, tenv, tcell, tol = self.forbid, placer._tenant_env, placer._tenant_cell, placer._cobusy_rel_tol
        bound = np.inf
        ok: list[int] = []
        for j in _ascending(scores, _COBUSY_HEAD):
            if scores[j] > bound:
                break
            t = int(arr[j])
            if tenv[t] in forbid[tcell[t]]:
                continue
            if not ok:
                bound = max(float(scores[j]) * (1.0 + tol), self.target)
            ok.append(t)
        self._walk = ok
        self._pending = None
        return ok


class _CobusyFastPath(_FastPath, _CobusyChoices):
    """The co-busy fast path and its kept lists (see the module docstring)."""

    _cob_ver: list[int]  # per cell: changes of its active tenants
    _cob_sub_ver: list[int]  # per cell: changes of the cells of its sub-grid
    _cob_rows: list[dict[int, np.ndarray]]  # per cell: pair(t, every tenant of the cell)
    _cob_one: dict[int, np.ndarray]  # per tenant a: every grid tenant scored against a
    _cob_two: list[dict[tuple[int, int], np.ndarray]]  # per cell p: its tenants against (a, b)
    _cob_second: list[dict[tuple[int, int], _Choice]]  # per writer's cell: per (a, replicas)
    _cob_third: list[dict[tuple[int, int], _Choice]]  # per open cell: per (a, b)
    _cob_bytes: int
    _cob_cell_all: list[np.ndarray]  # per cell: every tenant of it (static)
    _cob_grid_all: np.ndarray  # every grid tenant (static)
    _cob_at: np.ndarray  # per tenant: its index in _cob_grid_all and in its cell's _cob_cell_all

    def _cob_init(self) -> None:
        """Build the static tenant lists and the (empty) kept lists; once, with the placer."""
        cells = np.asarray(self._tenant_cell, dtype=np.int64)
        self._cob_cell_all = [np.flatnonzero(cells == c) for c in range(N_CELLS)]
        self._cob_grid_all = np.flatnonzero(cells >= 0)
        at = np.full((2, len(cells)), -1, dtype=np.int64)
        at[0, self._cob_grid_all] = np.arange(self._cob_grid_all.size)
        for c in range(N_CELLS):
            at[1, self._cob_cell_all[c]] = np.arange(self._cob_cell_all[c].size)
        self._cob_at = at
        self._cob_ver = [0] * N_CELLS
        self._cob_sub_ver = [0] * N_CELLS
        self._cob_reset()

    def _cob_reset(self) -> None:
        """Drop everything kept."""
        self._cob_rows = [{} for _ in range(N_CELLS)]
        self._cob_one = {}
        self._cob_two = [{} for _ in range(N_CELLS)]
        self._cob_second = [{} for _ in range(N_CELLS)]
        self._cob_third = [{} for _ in range(N_CELLS)]
        self._cob_bytes = 0

    def set_cobusy(self, cobusy: CobusyModel) -> None:
        super().set_cobusy(cobusy)
        self._cob_reset()

    def _cell_changed(self, c: int) -> None:
        super()._cell_changed(c)
        self._cob_ver[c] += 1
        for x in _SUB[c]:  # the writers' cells whose replica 2 reads c (the relation is symmetric)
            self._cob_sub_ver[x] += 1

    def _cob_spend(self, nbytes: int) -> None:
        self._cob_bytes += nbytes
        if self._cob_bytes > _CACHE_BYTES:
            self._cob_reset()

    def _cob_scores(self, group: Sequence[int], arr: np.ndarray) -> np.ndarray:
        """``_pick_by_cobusy``'s scores of the tenants ``arr``: ``CobusyModel.scores`` times the
        penalty factor."""
        assert self._cobusy is not None
        scores = self._cobusy.scores(group, arr)
        if self._cobusy_factor is not None:
            scores = scores * self._cobusy_factor[arr]
        return scores

    def _cob_row(self, t: int, c: int) -> np.ndarray:
        """``pair(t, every tenant of cell c)`` (kept)."""
        rows = self._cob_rows[c]
        got = rows.get(t)
        if got is None:
            assert self._cobusy is not None
            got = rows[t] = np.asarray(self._cobusy.pair(t, self._cob_cell_all[c]), dtype=np.float64)
            self._cob_spend(_FLOAT_BYTES * got.size)
        return got

    def _cob_scores_two(self, a: int, b: int, c: int) -> np.ndarray:
        """``_cob_scores([a, b], every tenant of c)`` for tenants ``a != b`` of other cells than
        ``c``, from the kept pair rows, with ``CobusyModel.scores``'s operations in its order."""
        m = self._cobusy
        assert m is not None
        arr = self._cob_cell_all[c]
        base = float(m.pair(a, b))  # joint([a, b])
        out = self._cob_row(a, c) * (base / float(m.m1[a]))
        out *= self._cob_row(b, c) / float(m.m1[b])
        out /= m.m1[arr] ** 1
        f = self._cobusy_factor
        return out * f[arr] if f is not None else out

    def _cob_scores_one(self, a: int) -> np.ndarray:
        """Every grid tenant's score against tenant ``a`` (kept)."""
        got = self._cob_one.get(a)
        if got is None:
            got = self._cob_one[a] = self._cob_scores((a,), self._cob_grid_all)
            self._cob_spend(_FLOAT_BYTES * got.size)
        return got

    def _cob_scores_pair(self, a: int, b: int, p: int) -> np.ndarray:
        """Every tenant of cell ``p``'s score against tenants ``a`` and ``b`` (kept)."""
        got = self._cob_two[p].get((a, b))
        if got is None:
            got = self._cob_two[p][(a, b)] = self._cob_scores_two(a, b, p)
            self._cob_spend(_FLOAT_BYTES * got.size)
        return got

    def _place_fast_cobusy(
        self, writer: str | None, replicas: int, draw: _Uniforms, target: float
    ) -> tuple[list[int], str] | None:
        """``_place_fast`` under co-busy estimates: the same first replica and cells, then in those
        cells the general path's co-busy choice (``_pick_by_cobusy``) of replica 2 (against the first
        replica's tenant) and replica 3 (the diagonal partner cell, against both). None, before any
        draw, when the block is not such a case; the first replica alone when it was drawn and the
        rest is not such a case."""
        first = self._fast_writer(writer, replicas, draw)
        if first is None:
            return None
        w, reason, drawn = first
        c = self._server_cell[w]
        if c < 0:
            return ([w], reason) if drawn else None
        tenv, stn = self._tenant_env, self._server_tenant
        a = stn[w]
        seconds = self._cob_second[c]
        second = seconds.get((a, replicas))
        stamp = self._cob_sub_ver[c]
        if second is None or second.stamp != stamp or second.target != target:
            cells = self._fast_second_cells(c, tenv[a], replicas)
            if cells is None:
                return ([w], reason) if drawn else None
            good, rules = cells
            envs = frozenset([tenv[a]])
            forbid = {x: envs | rules[x] for x in good} if rules is not None else dict.fromkeys(good, envs)
            second = seconds[(a, replicas)] = self._cob_choice(stamp, (a,), good, forbid, target)
        s2 = self._cob_pick(second, draw, (w,))
        assert s2 is not None  # a cell of a feasible diagonal has an allowed tenant
        if replicas == 2:
            return [w, s2], reason
        b = stn[s2]
        p = _PARTNER[c][self._server_cell[s2]]
        thirds = self._cob_third[p]
        third = thirds.get((a, b))
        stamp = self._cob_ver[p]
        if third is None or third.stamp != stamp or third.target != target:
            forbid = {p: frozenset([tenv[a], tenv[b]])}
            third = thirds[(a, b)] = self._cob_choice(stamp, (a, b), [p], forbid, target)
        s3 = self._cob_pick(third, draw, (w, s2))
        assert s3 is not None
        return [w, s2, s3], reason

    def _cob_choice(
        self, stamp: int, group: tuple[int, ...], cells: list[int], forbid: dict[int, frozenset[int]], target: float
    ) -> _Choice:
        """The choice of ``_pick_by_cobusy`` among the active tenants of ``cells`` (ascending, as
        the general path concatenates them) for the block's tenants ``group`` (one, or two with one
        cell), in the current state: the kept scores gathered over the cells' active lists."""
        parts = [self._cell_tenants(x) for x in cells]
        arr = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(group) == 1:
            scores = self._cob_scores_one(group[0])[self._cob_at[0, arr]]
        else:
            scores = self._cob_scores_pair(group[0], group[1], cells[0])[self._cob_at[1, arr]]
        choice = _Choice(stamp, target, arr, scores, forbid)
        self._cob_spend(_LIST_BYTES * len(choice.safe) + 2 * _FLOAT_BYTES * arr.size + 200)
        return choice

    def _cob_pick(self, choice: _Choice, draw: _Uniforms, taken: Collection[int]) -> int | None:
        """``_pick_by_cobusy``'s draws on a kept choice: steps 2 (up to ``_TRIES`` draws per
        ``repair_choices`` among the tenants at most the target) and 4 (one of the walk's tenants),
        then a usable server of the tenant not in ``taken`` (``_pick_server``; its first draw inline)."""
        safe, pools = choice.safe, self._tenant_pool
        t = -1
        if safe:
            n, forbid, tenv, tcell = len(safe), choice.forbid, self._tenant_env, self._tenant_cell
            choices = self._repair_choices
            if choices == 1:
                for _ in range(_TRIES):
                    u = safe[_index(draw, n)]
                    if tenv[u] not in forbid[tcell[u]]:
                        t = u
                        break
            else:  # of the allowed draws, the tenant whose servers were reimaged least often
                best_rate, found = float("inf"), 0
                seen, size = self._tenant_reimaged, self._tenant_size
                for _ in range(_TRIES * choices):
                    u = safe[_index(draw, n)]
                    if tenv[u] not in forbid[tcell[u]]:
                        rate = seen[u] / size[u]
                        if rate < best_rate:
                            t, best_rate = u, rate
                        found += 1
                        if found >= choices:
                            break
        if t < 0:
            walk = choice.walk(self)
            if not walk:
                return None
            t = walk[_index(draw, len(walk))]
        pool = pools[t]
        if self._reimage_choices > 1:
            return self._pick_server(pool, draw, taken)
        s = pool.items[_index(draw, pool.n)]  # pick_from's first draw (pool.n >= 1: an active tenant)
        return s if s not in taken else _pick_from_rest(pool, draw, taken)
