"""The replica placer's co-busy choices (HDFS-H-cobusy, ``core/cobusy.py``): its defaults, the
choice of tenant by the estimates (``_pick_by_cobusy``), the spread bound and the reimage-aware
choice of server. ``ReplicaPlacer`` (``core/placement.py``) takes them when built with ``cobusy``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

import numpy as np

from placement_service.core.cobusy import CobusyModel, aligned
from placement_service.core.placement_base import _Pool, _Uniforms, pick_from
from placement_service.core.placement_grid import _TRIES, _Block, _GridPlacerState
from placement_service.core.types import PolicyError

_COBUSY_HEAD = 48
"""The co-busy walk sorts the lowest this many scores first (a partition, then a small sort), and
sorts all of them only when the walk gets past those: at 5,000 tenants a cell group holds ~2,000
candidates, and the full sort was most of a placement's time (docs/bench/cobusy.md)."""
COBUSY_REL_TOL = 0.1
"""With co-busy estimates: tenants within this relative distance of the lowest estimate are
equally good (the block goes to one of them uniformly), so blocks spread over near-equal tenants."""
COBUSY_RISK_TARGET = 1e-6
"""With co-busy estimates, for re-replication (``place`` with ``existing`` holders): a tenant whose
estimate (with the surviving replicas' tenants) is at most this is good enough, as good as the
lowest, and the new replica goes to one of them uniformly, as HDFS-H would. New blocks have their
own target (``COBUSY_NEW_TARGET``). 1e-6 is the mover's ``MoveConfig.risk_max`` (a block repaired under it is one the
mover leaves alone). Without it, each repair sent the block to the next quietest tenant, so over a
year of reimages blocks converged onto a few tenant trios whose reimages then left re-replication
backlogs of days: a 4M-block year lost 518 blocks (docs/bench/cobusy.md, 2026-11-27)."""
COBUSY_NEW_TARGET = 1e-6
"""With co-busy estimates, for new blocks: as ``COBUSY_RISK_TARGET`` for re-replications, a tenant
that keeps the block's estimate at most this is as good as the lowest (0: new blocks take the
lowest estimate, within ``COBUSY_REL_TOL``). Only while the estimates' history predicts itself:
see ``COBUSY_NEW_MAX_TURNOVER``. Why 1e-6 by default: new blocks on the lowest estimates crowd the
quietest tenants, and a 4M-block year of HDFS-H-cobusy-mover took 7,717-7,839 blocks to one replica
or none (HDFS-H: 5,591-5,711); spread under 1e-6 (the mover's and the re-replications' threshold),
5,530 with no block-hour at one replica (docs/bench/cobusy.md, 2026-11-28)."""
COBUSY_NEW_MAX_TURNOVER = 0.07
"""New blocks spread under ``cobusy_new_target`` only when at most this share of the tenants quiet
in the first half of the estimates' history turned busy in the second half
(``CobusyModel.quiet_turnover``); otherwise they take the lowest estimate. A spread new block sits
on tenants whose estimate is low only because they were never seen busy; where such tenants turn
busy (PlanetLab: 25-27% within its 3-day history at 20-40% utilization, then 43-74% in the days
after), spreading raised the exact expected failed accesses at 31.5% from 0.04-0.06 to 0.21-0.29 per
million (1e-7) and sampled 1 per million in one run of four. On the generated datacenter, 3-4%
(docs/bench/cobusy.md, 2026-11-28); 0.07 keeps about twice that margin below Azure's 10%."""
COBUSY_SPREAD = 0.0
"""With co-busy estimates, the spread bound's factor ``f`` (0: off, the default): a tenant that has
taken more than ``f`` times its servers' share of its grid cell's co-busy choices (and more than
``f`` per server) is passed over, but only while a tenant under the bound keeps the block's
estimate under the risk target (the call's, or the placer's ``cobusy_risk_target`` for new blocks
and moves). Every co-busy choice counts (new blocks, re-replications, moves); a reimage does not
reset the counts.

Why it exists: the estimates rank the same idle tenants lowest for most blocks, so those few took
most replicas (at 4M blocks one server held 110,532, HDFS-H's most 38,036), and when one of their
servers was reimaged a few quiet survivors had to source thousands of re-replications at 30 an
hour, so blocks waited at two replicas until the next reimage took them to one. (That backlog is
not the whole cause: keeping only one replica of each repaired or moved block off the crowded
tenants did not lower the year's exposure, nor did cutting the re-replications alone by sending
repairs to rarely reimaged tenants, ``REPAIR_CHOICES``; this bound brought back both the
re-replications and the spread of the survivors.) Why it is off: it
trades availability for that. With ``f = 2`` (HDFS's own factor for a DataNode's load against the
average, ``dfs.namenode.redundancy.considerLoad.factor``) a 4M-block stress run's exposure fell
from 4,064 to 1,367 (HDFS-H 1,498), but HDFS-H-cobusy-mover failed 1-2 accesses per million at 40.1%
on the generated datacenter (0 without), and so did ``f = 4`` and every variant tried
(docs/bench/cobusy.md, 2026-11-27). Kept out: a bound on the servers' fill (a reimaged server is
empty, so the tenants reimaged most often took the replicas), and a bound whatever the estimate
(Azure at 40.8%: HDFS-H-cobusy failed 743 accesses per million instead of 6-11)."""
REIMAGE_CHOICES = 1
"""With co-busy estimates: the server of a replica within the tenant the estimates chose is the one
with the fewest reimages seen (the history's, ``server_reimages``, and every ``reset_server``
since) of this many random usable servers of the tenant (1, the default: uniform, as HDFS-H). The
tenant, and so the block's availability, is chosen as before. Off by default: with 4, one
4M-block year of the mover took fewer blocks to one replica (7,160 a run against 7,838) but a
1M-block year took more (HDFS-H-cobusy 2,104 against 1,178, the mover 1,191 against 948, HDFS-H
1,187): replicas crowd onto the few rarely reimaged servers of each tenant (docs/bench/cobusy.md,
"Fewer reimages per replica")."""
REPAIR_CHOICES = 1
"""With co-busy estimates, for re-replications: the tenant among those that keep the block under the
risk target is the one whose servers were reimaged least often (reimages seen per server) of this
many random ones (1: uniform, the default). Off by default: with 2 the same year's re-replications
fell to 14.1M (under HDFS-H's 14.2M) but the block-hours at one replica rose from 137 to 319, the
repairs crowding onto the rarely reimaged tenants (4: 13.1M and 567)."""


class _CobusyChoices(_GridPlacerState):
    """The co-busy part of ``ReplicaPlacer``: estimates, spread bound, reimages seen."""

    def reimages_seen(self, server: str) -> float:
        """The reimages of ``server`` this placer knows of (history and ``reset_server`` calls)."""
        return self._reimaged[self._server(server)]

    def _pick_server(self, pool: _Pool, draw: _Uniforms, taken: Collection[int]) -> int | None:
        """A usable server of a tenant's ``pool`` not in ``taken``: the fewest reimages seen of
        ``reimage_choices`` random draws (the first drawn among equals), or None."""
        s = pick_from(pool, draw, taken)
        if s is None or self._reimage_choices <= 1 or pool.n <= 1:
            return s
        seen = self._reimaged
        best = seen[s]
        for _ in range(self._reimage_choices - 1):
            o = pick_from(pool, draw, taken)
            if o is not None and seen[o] < best:
                s, best = o, seen[o]
        return s

    @property
    def new_block_target(self) -> float:
        """The risk target new blocks get now: ``cobusy_new_target`` while the estimates' history
        predicts itself (``quiet_turnover`` at most ``cobusy_new_max_turnover``), else 0 (the
        lowest estimate). Follows :meth:`set_cobusy`."""
        if self._cobusy is None or self._cobusy.quiet_turnover > self._cobusy_new_max_turnover:
            return 0.0
        return self._cobusy_new_target

    def set_cobusy(self, cobusy: CobusyModel) -> None:
        """Swap the co-busy estimates (e.g. refitted on a newer history window); the reimage penalty
        and every other rule stay. Only for a placer built with ``cobusy``."""
        if self._cobusy is None:
            raise PolicyError("set_cobusy: this placer was built without co-busy estimates")
        self._cobusy = aligned(cobusy, self._tenant_names)

    @property
    def cobusy_spread(self) -> float:
        """The spread bound's factor (``COBUSY_SPREAD``; 0: no bound)."""
        return self._cobusy_spread

    def tenants_over_spread(self) -> np.ndarray:
        """Per tenant (order of :attr:`tenant_names`): whether it took more co-busy choices than
        ``cobusy_spread`` times its servers' share of its grid cell's (and more than ``cobusy_spread``
        per server); all False without a bound or outside the grid."""
        return self._over_spread(np.arange(len(self._tenant_names)))

    def _over_spread(self, tenants: np.ndarray) -> np.ndarray:
        if self._cobusy_spread <= 0.0:
            return np.zeros(len(tenants), dtype=bool)
        c = self._spread_cell[tenants]
        grid = c >= 0
        cc = np.maximum(c, 0)
        n = self._spread_servers[tenants]
        share = self._spread_cell_taken[cc] * n / np.maximum(self._spread_cell_servers[cc], 1.0)
        return grid & (self._spread_taken[tenants] > self._cobusy_spread * np.maximum(share, n))

    def _took(self, s: int | None) -> int | None:
        """Count a co-busy choice of server ``s`` for the spread bound (nothing to count without one)."""
        if s is not None and self._cobusy_spread > 0.0:
            t = self._server_tenant[s]
            self._spread_taken[t] += 1.0
            c = self._tenant_cell[t]
            if c >= 0:
                self._spread_cell_taken[c] += 1.0
        return s

    @property
    def cobusy(self) -> CobusyModel | None:
        """The co-busy estimates in use, indexed like :attr:`tenant_names` (None: not a co-busy placer)."""
        return self._cobusy

    def _cell_tenants(self, c: int) -> np.ndarray:
        """The active tenants of cell ``c`` (``_cell_pool[c].items[:n]``) as an int64 array."""
        arr = self._cell_arr[c]
        if arr is None:
            pool = self._cell_pool[c]
            arr = self._cell_arr[c] = np.array(pool.items[: pool.n], dtype=np.int64)
        return arr

    def _pick_by_cobusy(
        self,
        cells: list[tuple[int, Callable[[int], bool] | None]],
        draw: _Uniforms,
        st: _Block,
        keep_env: bool,
    ) -> int | None:
        """A usable server of the allowed tenant, over the given cells (each with its environment
        rule), with the lowest estimated probability that it and the block's tenants so far are all
        busy at once; uniform among the allowed tenants within ``cobusy_rel_tol`` of that lowest,
        or at most the call's risk target (good enough: repairs spread instead of piling onto the
        quietest few tenants).

        Steps: 1. score every usable tenant of the cells at once (``CobusyModel.scores``); 2. when
        some score at most the risk target, draw among those (a few draws, each checked against the
        rules: uniform over the allowed ones); 3. otherwise (or when the draws all miss) walk them
        from the lowest score, skipping a tenant whose environment is ruled out or whose usable
        servers all hold this block, until the scores pass the larger of ``(1 + rel_tol) * `` the
        first allowed one's and the risk target; 4. a random one of those, a random usable server of it.
        """
        assert self._cobusy is not None
        parts = [self._cell_tenants(c) for c, _ in cells]
        sizes = [x.size for x in parts]
        if not any(sizes):
            return None
        arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
        which = np.repeat(np.arange(len(cells)), sizes)
        scores = self._cobusy.scores(st.tenants, arr)
        if self._cobusy_factor is not None:
            scores = scores * self._cobusy_factor[arr]
        if self._cobusy_spread > 0.0:
            over = self._over_spread(arr)
            # Passed over (last in the walk below) only while a tenant under the bound keeps the
            # block under the risk target: the bound never buys spread with availability.
            if over.any() and np.any(~over & (scores <= max(st.target, self._cobusy_target))):
                scores = np.where(over, np.inf, scores)
        envs, tenv, taken, pools = st.envs, self._tenant_env, st.taken, self._tenant_pool

        def allowed(j: int) -> bool:
            e = tenv[int(arr[j])]
            if keep_env and e in envs:
                return False
            env_ok = cells[which[j]][1]
            if env_ok is not None and not env_ok(e):
                return False
            pool = pools[int(arr[j])]
            return not all(pool.items[k] in taken for k in range(pool.n))

        target = st.target
        if target > 0.0:
            safe = np.flatnonzero(scores <= target)
            # Good enough tenants are equal for availability: of ``repair_choices`` allowed draws,
            # the one whose servers were reimaged least often (reimages seen per server).
            best, best_rate, found = -1, float("inf"), 0
            seen, size = self._tenant_reimaged, self._tenant_size
            for _ in range(_TRIES * self._repair_choices if safe.size else 0):
                j = int(safe[draw.index(safe.size)])
                if allowed(j):
                    t = int(arr[j])
                    rate = seen[t] / size[t]
                    if rate < best_rate:
                        best, best_rate = j, rate
                    found += 1
                    if found >= self._repair_choices:
                        break
            if best >= 0:
                return self._took(self._pick_server(pools[int(arr[best])], draw, taken))
        bound = np.inf
        ok: list[int] = []
        for j in _ascending(scores, _COBUSY_HEAD):
            if scores[j] > bound:
                break
            if not allowed(j):
                continue
            if not ok:
                bound = max(float(scores[j]) * (1.0 + self._cobusy_rel_tol), target)
            ok.append(int(arr[j]))
        if not ok:
            return None
        return self._took(self._pick_server(pools[ok[draw.index(len(ok))]], draw, taken))



def _ascending(scores: np.ndarray, head: int) -> Iterator[int]:
    """The indices of ``scores`` in the order of ``np.argsort(scores, kind="stable")`` (ascending,
    ties by index), lazily: the scores below the ``head``-th smallest value first (a partition and a
    sort of fewer than ``head``), the full sort only when the caller reads past them."""
    n = scores.size
    if n <= 2 * head:
        yield from np.argsort(scores, kind="stable").tolist()
        return
    kth = np.partition(scores, head - 1)[head - 1]
    first = np.flatnonzero(scores < kth)  # exactly the full order's first len(first): all smaller scores
    yield from first[np.argsort(scores[first], kind="stable")].tolist()
    yield from np.argsort(scores, kind="stable")[first.size:].tolist()
