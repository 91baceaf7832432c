"""The replica placer's per-block fast path (``ReplicaPlacer._place_fast``): a new block of 2 or 3
replicas with nothing excluded or held, under HDFS-H (no busy-hour profiles, no co-busy estimates),
placed with exactly the general path's draws and choices (``core/placement.py``) from cell lists
kept per grid state (docs/policy.md, "One block at a time").
"""

from __future__ import annotations

from collections.abc import Collection

from placement_service.core.placement_base import _TRIES as _POOL_TRIES
from placement_service.core.placement_base import _Pool, _Uniforms, pick_from
from placement_service.core.placement_grid import (
    _CELL_BIT,
    _COL_BIT,
    _NONE,
    _PARTNER,
    _ROW_BIT,
    _SUB,
    _TRIES,
    N_CELLS,
    _completable,
    _env_forbidden,
    _FastCells,
    _GridPlacerState,
    _hall,
    _transversals,
)


class _FastPath(_GridPlacerState):
    """The fast path's methods and the upkeep of its cell lists (``_cell_changed``)."""

    def _cell_changed(self, c: int) -> None:
        """A tenant of cell ``c`` gained or lost its last usable server: forget the fast path's
        cell choices that read the cell."""
        self._fast_first.clear()
        for x in _SUB[c]:  # the cells whose sub-grid holds c (the relation is symmetric)
            self._fast_small.pop(x, None)
        seconds = self._fast_second
        for key in self._fast_deps[c]:
            seconds.pop(key, None)
        self._fast_deps[c].clear()


    def _place_fast(self, writer: str | None, replicas: int, draw: _Uniforms) -> tuple[list[int], str] | None:
        """A new block of 2 to 4 replicas with nothing excluded or held, when it can be placed
        without relaxing, with exactly the draws and choices of the general path (``_pick_next``),
        without its per-call state; None, before any draw, when the block is not such a case; the
        replicas drawn so far when the rest is not (the general path goes on from them).

        Why it is the same choice. The first replica (no usable writer) when every cell with a
        usable server has at least ``k`` usable environments: the general path's environment check
        cannot bind, and it draws a cell uniformly among those that leave the round completable
        (``_completable``), then a tenant and a server there. With the first replica in cell ``c``,
        the cells of unused rows and columns are the 2x2 sub-grid ``_SUB[c]``. Replica 2 of 2: a
        uniform cell of the sub-grid with a usable server (each with an environment other than the
        first replica's, so the first cell drawn always has a tenant). Replica 2 of 3: the cells of
        a diagonal whose two cells can get distinct environments (Hall's condition on each cell's
        usable environments other than the first replica's: ``_allowed_envs`` of a cell no server
        of the block is in), drawn uniformly; in the cell a tenant whose environment leaves the
        diagonal partner one (checked only when a cell has fewer than two to spare, as there).
        Replica 3: the partner, after the general path's ``draw.index(1)`` among its one open cell.
        Replica 4 (rounds of 3): any cell with a usable server left, drawn and tried in turn as there,
        when one of them has an environment the block does not use."""
        first = self._fast_writer(writer, min(replicas, 3), draw)
        if first is None:
            return None
        w, reason, drawn = first
        stop = ([w], reason) if drawn else None  # drawn: from here on the general path takes over with it
        c = self._server_cell[w]
        if c < 0:
            return stop
        tenv, stn = self._tenant_env, self._server_tenant
        env_w = tenv[stn[w]]
        second = self._fast_second_cells(c, env_w, min(replicas, 3))
        if second is None:
            return stop
        good, rules = second
        c2 = good[_index(draw, len(good))]
        s2 = self._pick_tenant(c2, draw, (env_w,), (w,), rules[c2] if rules is not None else _NONE)
        assert s2 is not None  # a cell of a feasible diagonal has an environment that keeps it so
        if replicas == 2:
            return [w, s2], reason
        if draw.i < len(draw.buf):  # the general path's draw among the one open cell (draw.index(1))
            draw.i += 1
        else:
            draw.index(1)
        envs: tuple[int, ...] = (env_w, tenv[stn[s2]])
        s3 = self._pick_tenant(_PARTNER[c][c2], draw, envs, (w, s2))
        assert s3 is not None
        if replicas == 3:
            return [w, s2, s3], reason
        # Replica 4 starts a new round (rows and columns forgotten): a random cell with a usable
        # server not taken, tried in the general path's order, each for a tenant of an unused
        # environment. Only when one exists: else the general path takes over with the three (it
        # retries, then relaxes the environment rule).
        envs = (*envs, tenv[stn[s3]])
        cs, active, cell = self._cell_servers, self._cell_env_active, self._server_cell
        group = [x for x in range(N_CELLS)
                 if cs[x] - (cell[w] == x) - (cell[s2] == x) - (cell[s3] == x) > 0]
        if not any(len(active[x].keys() - envs) for x in group):
            return [w, s2, s3], reason
        while group:
            i = _index(draw, len(group))
            x = group[i]
            group[i] = group[-1]
            group.pop()
            s4 = self._pick_tenant(x, draw, envs, (w, s2, s3))
            if s4 is not None:
                return [w, s2, s3, s4], reason
        raise AssertionError("a cell with an unused environment has a tenant to take replica 4")

    def _fast_writer(self, writer: str | None, replicas: int, draw: _Uniforms) -> tuple[int, str, bool] | None:
        """A fast-path block's first replica: the usable writer (no draw), or else a server drawn as
        the general path draws a first replica (``_first_cells``); with the note for the result and
        whether it was drawn. None, before any draw, when that draw is not certain to succeed."""
        w = self._index.get(writer) if writer is not None else None
        if w is not None and self._usable[w]:
            return w, "", False
        firsts = self._fast_first
        first = firsts[replicas] if replicas in firsts else firsts.setdefault(replicas, self._first_cells(replicas))
        if first is None:
            return None
        good, rules = first
        c1 = good[_index(draw, len(good))]
        reason = ""
        if writer is not None:
            reason = f"writer {writer!r} unknown, busy, full or excluded: first replica on a random server"
        s = self._pick_tenant(c1, draw, (), (), rules[c1] if rules is not None else _NONE)
        assert s is not None  # the cell has a usable server
        return s, reason, True

    def _fast_second_cells(self, c: int, env_w: int, replicas: int) -> _FastCells | None:
        """``_second_cells``, kept per grid state: only a cell with at most two usable environments
        can depend on the first replica's one, so for any other environment the choice is the same
        and shares one entry (-1)."""
        small = self._fast_small.get(c)
        if small is None:
            active = self._cell_env_active
            small = self._fast_small[c] = frozenset([e for x in _SUB[c] if len(active[x]) <= 2 for e in active[x]])
        key = (c, env_w if env_w in small else -1, replicas)
        seconds = self._fast_second
        if key in seconds:
            return seconds[key]
        second = seconds[key] = self._second_cells(c, env_w, replicas)
        for x in _SUB[c]:
            self._fast_deps[x].add(key)
        return second

    def _first_cells(self, replicas: int) -> _FastCells | None:
        """The cells the general path draws a block's first replica from (no usable writer), and
        each one's environment rule (None: no rule binds); None when that choice is not certain to
        succeed (fewer than two cells with a usable server, no completable cell)."""
        cs, active = self._cell_servers, self._cell_env_active
        cands = [c for c in range(N_CELLS) if cs[c] > 0]
        if len(cands) < 2:
            return None
        space = 0
        for c in cands:
            space |= _CELL_BIT[c]
        if all(len(active[c]) >= replicas for c in cands):  # no environment check can bind
            good = [c for c in cands if _completable(space, _ROW_BIT[c], _COL_BIT[c], replicas - 1)]
            return (good, None) if good else None
        # The joint choice: a cell of a plan (cells in distinct rows and columns) with distinct
        # environments, and in it an environment that leaves the rest of some plan feasible.
        envs_of = {c: None if len(active[c]) >= replicas else frozenset(active[c]) for c in cands}
        plans = [p for p in _transversals(space, replicas) if _hall(tuple([envs_of[c] for c in p]))]
        good = sorted({c for p in plans for c in p})
        if not good:
            return None
        rules: dict[int, frozenset[int]] = {}
        for c in good:
            rests = [[envs_of[x] for x in p if x != c] for p in plans if c in p]
            rules[c] = _env_forbidden(rests)
        return good, rules

    def _second_cells(self, c: int, env_w: int, replicas: int) -> _FastCells | None:
        """The cells the general path draws replica 2 from, the first replica in cell ``c`` with
        environment ``env_w``, and each one's environment rule; None when not certain to succeed
        (the general path would retry or relax)."""
        cs, active = self._cell_servers, self._cell_env_active
        cands = [x for x in _SUB[c] if cs[x] > 0]
        if replicas == 2:
            # One replica left: a uniform cell of the sub-grid, each with an environment to give.
            if not cands or any(len(active[x]) - (env_w in active[x]) < 1 for x in cands):
                return None
            return cands, None
        if len(cands) < 2:
            return None
        partner = _PARTNER[c]
        # Each open cell's usable environments other than the first replica's (None: two or more).
        allowed: dict[int, frozenset[int] | None] = {}
        for x in cands:
            rest = active[x].keys() - {env_w}
            allowed[x] = None if len(rest) >= 2 else frozenset(rest)
        if all(a is None for a in allowed.values()):
            good = [x for x in cands if cs[partner[x]] > 0]
            return (good, None) if good else None
        good = [x for x in cands if partner[x] in allowed and _hall((allowed[x], allowed[partner[x]]))]
        if not good:
            return None
        return good, {x: _env_forbidden([[allowed[partner[x]]]]) for x in good}

    def _pick_tenant(
        self, c: int, draw: _Uniforms, envs: Collection[int], taken: Collection[int],
        forbidden: Collection[int] = (),
    ) -> int | None:
        """``_pick_tenant_server`` without a tenant rule, its environment rule given as the
        environments it refuses (same draws, same choice); the first try inline (it succeeds for
        almost every block)."""
        pool = self._cell_pool[c]
        n = pool.n
        if n == 0:
            return None
        buf, i = draw.buf, draw.i
        if i + 1 >= len(buf):  # a refill may come between the two draws: draw.index does it
            t = pool.items[draw.index(n)]
            e = self._tenant_env[t]
            if e not in envs and e not in forbidden:
                s = pick_from(self._tenant_pool[t], draw, taken)
                if s is not None:
                    return s
            return self._pick_tenant_rest(pool, draw, envs, taken, forbidden)
        # draw.index(n) inline: a tenant; then pick_from's first draw: one of its usable servers
        k = int(buf[i] * n)
        t = pool.items[k if k < n else n - 1]
        e = self._tenant_env[t]
        if e not in envs and e not in forbidden:
            tp = self._tenant_pool[t]
            m = tp.n
            k = int(buf[i + 1] * m)
            draw.i = i + 2
            first: int = tp.items[k if k < m else m - 1]
            if first not in taken:
                return first
            s = _pick_from_rest(tp, draw, taken)
            if s is not None:
                return s
        else:
            draw.i = i + 1
        return self._pick_tenant_rest(pool, draw, envs, taken, forbidden)

    def _pick_tenant_rest(
        self, pool: _Pool, draw: _Uniforms, envs: Collection[int], taken: Collection[int],
        forbidden: Collection[int],
    ) -> int | None:
        """``_pick_tenant`` after its first try missed: the other tries, then the scan."""
        n = pool.n
        items, tenv, pools, index = pool.items, self._tenant_env, self._tenant_pool, draw.index
        for _ in range(_TRIES - 1):
            t = items[index(n)]
            if tenv[t] in envs or tenv[t] in forbidden:
                continue
            s = pick_from(pools[t], draw, taken)
            if s is not None:
                return s
        start = index(n)
        for j in range(n):
            t = items[(start + j) % n]
            if tenv[t] in envs or tenv[t] in forbidden:
                continue
            s = pick_from(pools[t], draw, taken)
            if s is not None:
                return s
        return None



def _index(draw: _Uniforms, n: int) -> int:
    """``draw.index(n)``, one call instead of two while the batch lasts."""
    i = draw.i
    if i < len(draw.buf):
        draw.i = i + 1
        k = int(draw.buf[i] * n)
        return k if k < n else n - 1
    return draw.index(n)


def _pick_from_rest(pool: _Pool, draw: _Uniforms, taken: Collection[int]) -> int | None:
    """``pick_from`` after its first draw missed: the remaining tries, then the scan."""
    return pick_from(pool, draw, taken, _POOL_TRIES - 1)
