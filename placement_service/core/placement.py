"""Replica placement: where the replicas of a new HDFS block go, spread over the 3x3 grid.

The grid (``core/grid.py``) puts every primary tenant in one cell: a reimage-frequency row (0..2)
and a peak-CPU column (0..2). Spreading a block's replicas over different rows protects it from
reimages hitting all of them (durability); different columns, from their primary tenants peaking at
the same time (availability); different environments, from correlated management actions.

Procedure for one block of ``block_size_mb`` with ``R`` replicas:

1. First replica on the writer's server, when it is known, not busy, not excluded and has space
   (locality). Otherwise on a random server with space of a tenant in the grid, drawn like the
   further replicas below (random cell, random tenant, random server).
2. Each further replica: pick a random cell whose row and column hold no replica of this round
   yet, and in it a random tenant whose environment holds no replica of this block, such that the
   rest of the round can still be finished under *all* rules: the remaining replicas' cells and
   environments are chosen jointly (a set of cells in distinct rows and columns, each given a
   distinct unused environment with a usable server: a matching, checked with Hall's condition on
   each cell's allowed environments; the 3x3 grid leaves at most 6 such cell sets). Then a random
   server of that tenant with space. Busy, excluded, full and already chosen servers are skipped.
   A block therefore relaxes only when no assignment of its round exists. Fast path: a cell with at
   least as many usable environments as replicas left cannot block a matching, so the environment
   check is skipped when every open cell has that many (the common case).
3. After every ``forget_every`` replicas (3 by default: a 3x3 grid has room for 3 in distinct rows
   and columns) the used rows and columns are forgotten; environments never are.
4. Tenants that are not in the grid only ever receive the writer's replica.

When step 2 finds nothing:

- ``strict=True``: raise :class:`PlacementError` naming the constraint that failed (row/column,
  or environment). Diversity over space: the production lesson of the harvesting paper, whose soft
  constraints once let replicas share an environment and lost data.
- ``strict=False``: relax, one step at a time and only for the replica that needs it, in this order:
  (a) drop the column constraint (keep the row: durability first), (b) drop the row constraint,
  (c) drop the environment constraint (any grid server with space), (d) any server with space,
  grid or not. ``PlacementResult.relaxed`` is set and ``reason`` says what was dropped.

Never more than one replica per server, never over a server's ``storage_gb`` (1 GB = 1024 MB). Fewer
usable servers than replicas raises :class:`PlacementError` in both modes.

Speed: per-tenant and per-cell free lists with swap-remove (O(1) updates when a server fills up,
turns busy or gets space back), rejection sampling inside them, and uniforms drawn in small batches:
no step scans all servers. A new block of 2-3 replicas (nothing excluded or held, no busy-hour or
co-busy preference) takes ``_place_fast``: the same draws and choices from cell lists kept per grid
state (docs/policy.md, "One block at a time").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np

from placement_service.core.cobusy import CobusyModel, aligned
from placement_service.core.placement_base import _TRIES as _POOL_TRIES
from placement_service.core.placement_base import (
    MB_PER_GB,
    PlacementConfig,
    PlacementResult,
    PlacerBase,
    _Pool,
    _Uniforms,
    pick_from,
)
from placement_service.core.placement_batch import BatchPlacement, place_many, place_one_more
from placement_service.core.types import GridCell, Inventory, PlacementError, PolicyError

__all__ = [
    "MB_PER_GB",
    "N_CELLS",
    "N_SIDE",
    "PlacementConfig",
    "PlacementResult",
    "BatchPlacement",
    "PlacerBase",
    "ReplicaPlacer",
    "pick_from",
]

logger = logging.getLogger(__name__)

N_SIDE = 3
N_CELLS = N_SIDE * N_SIDE
_TRIES = 4
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


_RELAX_STEPS: tuple[tuple[bool, bool, bool, str], ...] = (
    # (keep row, keep column, keep environment, what was dropped)
    (True, False, True, "column"),
    (False, False, True, "row and column"),
    (False, False, False, "row, column and environment"),
)


@dataclass(frozen=True)
class BatchView:
    """Live state of a ``ReplicaPlacer`` for the batch placer (pools and lists are not copies)."""

    server_cell: np.ndarray
    server_tenant: np.ndarray
    tenant_env: np.ndarray
    cell_pools: list[_Pool]
    tenant_pools: list[_Pool]
    usable: list[bool]
    free_mb: list[float]


class ReplicaPlacer(PlacerBase):
    """Grid-diverse replica placement (see the module docstring for the procedure)."""

    def __init__(
        self,
        inventory: Inventory,
        grid: Mapping[str, GridCell],
        *,
        config: PlacementConfig = PlacementConfig(),  # noqa: B008 - frozen, shared safely
        seed: int = 0,
        busy_hours: Mapping[str, int] | None = None,
        cobusy: CobusyModel | None = None,
        cobusy_rel_tol: float = COBUSY_REL_TOL,
        cobusy_penalty: Mapping[str, float] | None = None,
        cobusy_risk_target: float = COBUSY_RISK_TARGET,
        cobusy_spread: float = COBUSY_SPREAD,
        cobusy_new_target: float = COBUSY_NEW_TARGET,
        server_reimages: Mapping[str, float] | None = None,
        reimage_choices: int = REIMAGE_CHOICES,
        repair_choices: int = REPAIR_CHOICES,
        cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER,
    ) -> None:
        super().__init__(inventory, config, seed)
        for name, k in (("reimage_choices", reimage_choices), ("repair_choices", repair_choices)):
            if not (isinstance(k, int) and k >= 1):
                raise PolicyError(f"ReplicaPlacer: {name} must be an integer >= 1, got {k!r}")
        for name, target in (("cobusy_risk_target", cobusy_risk_target), ("cobusy_new_target", cobusy_new_target)):
            if not (0.0 <= target < 1.0):  # also refuses NaN
                raise PolicyError(f"ReplicaPlacer: {name} must be in [0, 1), got {target}")
        if not 0.0 <= cobusy_new_max_turnover <= 1.0:  # also refuses NaN
            raise PolicyError(f"ReplicaPlacer: cobusy_new_max_turnover must be in [0, 1], got {cobusy_new_max_turnover}")
        if not (cobusy_spread == 0.0 or 1.0 <= cobusy_spread < float("inf")):  # also refuses NaN
            raise PolicyError(f"ReplicaPlacer: cobusy_spread must be 0 (no bound) or >= 1, got {cobusy_spread}")
        if busy_hours is not None and cobusy is not None:
            raise PolicyError("ReplicaPlacer: give busy_hours or cobusy, not both")
        names: dict[str, int] = {}
        server_tenant = [names.setdefault(t, len(names)) for t in inventory.tenant]
        tenants = list(names)
        members: list[list[int]] = [[] for _ in tenants]
        for s, t in enumerate(server_tenant):
            members[t].append(s)
        env_ids: dict[str, int] = {}
        self._tenant_env = [env_ids.setdefault(inventory.environment[m[0]], len(env_ids)) for m in members]
        split = [tenants[t] for t, m in enumerate(members) if len({inventory.environment[s] for s in m}) > 1]
        if split:
            logger.warning(
                "%d tenants span several environments (e.g. %s): using each one's first", len(split), split[0]
            )
        self._tenant_cell = []
        for tname in tenants:
            cell = grid.get(tname)
            if cell is None:
                self._tenant_cell.append(-1)
            elif 0 <= cell.reimage_row < N_SIDE and 0 <= cell.peak_column < N_SIDE:
                self._tenant_cell.append(cell.reimage_row * N_SIDE + cell.peak_column)
            else:
                raise PolicyError(f"grid[{tname!r}]: row and column must be 0..2, got {cell}")
        missing = sum(1 for c in self._tenant_cell if c < 0)
        if missing:
            logger.info(
                "%d of %d tenants are not in the grid: they only take their writers' replicas",
                missing,
                len(tenants),
            )
        self._server_tenant = server_tenant
        self._tenant_names = tuple(tenants)
        self._server_cell = [self._tenant_cell[t] for t in server_tenant]
        self._tenant_pool = [_Pool(m) for m in members]
        self._cell_pool = [
            _Pool(t for t in range(len(tenants)) if self._tenant_cell[t] == c) for c in range(N_CELLS)
        ]
        self._cell_servers = [sum(len(members[t]) for t in p.items) for p in self._cell_pool]
        # Each cell's active tenants as an array, in the pool's order (the co-busy scores' input),
        # rebuilt on the first use after the pool changed.
        self._cell_arr: list[np.ndarray | None] = [None] * N_CELLS
        # Environments per cell: every tenant of (cell, environment), and how many of them have a
        # usable server (only environments with at least one are kept).
        self._cell_env_tenants: list[dict[int, list[int]]] = [{} for _ in range(N_CELLS)]
        for t, c in enumerate(self._tenant_cell):
            if c >= 0:
                self._cell_env_tenants[c].setdefault(self._tenant_env[t], []).append(t)
        self._cell_env_active: list[dict[int, int]] = [
            {e: len(ts) for e, ts in d.items()} for d in self._cell_env_tenants
        ]
        self._static: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # Optional time structure: bit h of a tenant's mask = it has been busy at hour-of-day h.
        # When given, a block's replicas prefer tenants whose busy hours do not overlap (see
        # ``_pick_in_cell``); all other rules are unchanged.
        self._busy_hours: list[int] | None = None
        if busy_hours is not None:
            self._busy_hours = [int(busy_hours.get(t, 0)) for t in tenants]
        # Optional co-busy estimates (``core/cobusy.py``): a block's further replicas go to the
        # allowed tenant of the chosen cell with the lowest estimated probability that it and the
        # block's tenants so far are busy at once (see ``_pick_by_cobusy``).
        self._cobusy: CobusyModel | None = aligned(cobusy, tenants) if cobusy is not None else None
        self._cobusy_rel_tol = float(cobusy_rel_tol)
        self._cobusy_target = float(cobusy_risk_target)
        self._cobusy_new_target = float(cobusy_new_target)
        self._cobusy_new_max_turnover = float(cobusy_new_max_turnover)
        self._cobusy_spread = float(cobusy_spread)
        # Co-busy choices each tenant and each cell took (the spread bound's counts), and servers.
        self._spread_taken = np.zeros(len(tenants))
        self._spread_cell_taken = np.zeros(N_CELLS)
        self._spread_servers = np.array([len(m) for m in members], dtype=np.float64)
        self._spread_cell = np.array(self._tenant_cell, dtype=np.int64)
        grid_t = self._spread_cell >= 0
        self._spread_cell_servers = np.bincount(
            self._spread_cell[grid_t], self._spread_servers[grid_t], minlength=N_CELLS
        )
        # Optional per-tenant penalty: the estimate times (1 + penalty), e.g. ``core.cobusy.reimage_penalty``.
        self._cobusy_factor: np.ndarray | None = None
        if cobusy_penalty is not None:
            self._cobusy_factor = 1.0 + np.array([float(cobusy_penalty.get(t, 0.0)) for t in tenants])
        # Reimages seen per server (the history's, then every reset_server): co-busy placements take
        # the least reimaged of ``reimage_choices`` random servers of the chosen tenant.
        self._reimage_choices = reimage_choices
        self._repair_choices = repair_choices
        self._reimaged = [0.0] * len(inventory)
        for name, count in (server_reimages or {}).items():
            i = self._index.get(name)
            seen = float(count)
            if not (0.0 <= seen < float("inf")):  # also refuses NaN
                raise PolicyError(f"server_reimages[{name!r}]: a count >= 0, got {count!r}")
            if i is not None:
                self._reimaged[i] = seen
        # ... and per tenant (their sum), for the re-replications' choice among good-enough tenants.
        self._tenant_reimaged = [0.0] * len(tenants)
        for s_i, t in enumerate(server_tenant):
            self._tenant_reimaged[t] += self._reimaged[s_i]
        self._tenant_size = [float(len(m)) for m in members]
        # New blocks of 2-3 replicas take ``_place_fast`` when nothing but the grid decides.
        self._fast = self._busy_hours is None and self._cobusy is None and config.forget_every >= N_SIDE
        # Its cell choices, kept while no tenant of the cells they read gains or loses its last
        # usable server (``_cell_changed``): first replicas per replica count, replica 2 per
        # (first replica's cell, its environment, replica count), and which of those read each cell.
        self._fast_first: dict[int, _FastCells | None] = {}
        self._fast_second: dict[tuple[int, int, int], _FastCells | None] = {}
        self._fast_deps: list[set[tuple[int, int, int]]] = [set() for _ in range(N_CELLS)]
        self._fast_small: dict[int, frozenset[int]] = {}  # per cell: environments of its sub-grid's small cells
        self._init_usable()

    def reset_server(self, server: str) -> None:
        """A reimage wiped the server's disk: all of its space is free again, and it counts as one
        more reimage seen of that server (``REIMAGE_CHOICES``)."""
        super().reset_server(server)
        s = self._index[server]
        self._reimaged[s] += 1.0
        self._tenant_reimaged[self._server_tenant[s]] += 1.0

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

    def _on_change(self, s: int, usable: bool) -> None:
        t = self._server_tenant[s]
        tpool = self._tenant_pool[t]
        c = self._tenant_cell[t]
        if usable:
            tpool.activate(s)
            if c >= 0:
                self._cell_servers[c] += 1
                self._cell_pool[c].activate(t)
                self._cell_arr[c] = None
                if tpool.n == 1:
                    self._cell_changed(c)
                    active = self._cell_env_active[c]
                    e = self._tenant_env[t]
                    active[e] = active.get(e, 0) + 1
        else:
            tpool.deactivate(s)
            if c >= 0:
                self._cell_servers[c] -= 1
                if tpool.n == 0:
                    self._cell_changed(c)
                    self._cell_pool[c].deactivate(t)
                    self._cell_arr[c] = None
                    active = self._cell_env_active[c]
                    e = self._tenant_env[t]
                    if active[e] <= 1:
                        del active[e]
                    else:
                        active[e] -= 1

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

    def tenant_of(self, servers: np.ndarray) -> np.ndarray:
        """The tenant index (in the order of :attr:`tenant_names`) of each inventory row (-1 stays -1)."""
        st = np.asarray(self._server_tenant, dtype=np.int64)
        s = np.asarray(servers, dtype=np.int64)
        return np.where(s >= 0, st[np.maximum(s, 0)], -1)

    @property
    def cobusy(self) -> CobusyModel | None:
        """The co-busy estimates in use, indexed like :attr:`tenant_names` (None: not a co-busy placer)."""
        return self._cobusy

    @property
    def tenant_names(self) -> tuple[str, ...]:
        """The placer's tenants, in the order of its co-busy estimates."""
        return self._tenant_names

    @property
    def uses_busy_hours(self) -> bool:
        """Whether replicas prefer tenants with disjoint busy hours or low co-busy estimates (the
        batch path does neither: such blocks go through ``place``)."""
        return self._busy_hours is not None or self._cobusy is not None

    def batch_view(self) -> BatchView:
        """The state the batch placer reads (``core.placement_batch``); static arrays built once."""
        if self._static is None:
            self._static = (
                np.asarray(self._server_cell, dtype=np.int64),
                np.asarray(self._server_tenant, dtype=np.int64),
                np.asarray(self._tenant_env, dtype=np.int64),
            )
        cell, tenant, env = self._static
        return BatchView(cell, tenant, env, self._cell_pool, self._tenant_pool, self._usable, self._free_mb)

    def place_many(
        self, writers: Sequence[str | None], replicas: int, *, rng: np.random.Generator | None = None
    ) -> BatchPlacement:
        """Place one new block per writer (None or an unknown name: no writer), in order, under the
        rules of :meth:`place`; vectorized over the blocks (see ``core.placement_batch``). A block
        that cannot be placed is marked ``failed`` with the reason; the others are allocated."""
        idx = self._index
        w = np.fromiter((idx.get(x, -1) if x is not None else -1 for x in writers), np.int64, len(writers))
        return place_many(self, w, replicas, rng if rng is not None else self._rng)

    def place_many_indices(
        self, writers: np.ndarray, replicas: int, *, rng: np.random.Generator | None = None
    ) -> BatchPlacement:
        """:meth:`place_many` with writers as inventory rows (-1: no writer)."""
        return place_many(self, np.asarray(writers, dtype=np.int64), replicas, rng if rng is not None else self._rng)

    def place_one_more_indices(
        self, holders: np.ndarray, *, rng: np.random.Generator | None = None
    ) -> BatchPlacement:
        """Re-replication of many blocks: one new replica each, given each block's surviving
        replicas (``holders[b]``: inventory rows, -1 padded); see ``core.placement_batch``."""
        return place_one_more(self, holders, rng if rng is not None else self._rng)

    def cells_with_space(self) -> list[GridCell]:
        """Grid cells that hold at least one usable server."""
        return [GridCell(c // N_SIDE, c % N_SIDE) for c in range(N_CELLS) if self._cell_servers[c] > 0]

    def place(
        self,
        writer: str | None,
        replicas: int,
        *,
        excluded: Collection[str] = (),
        rng: np.random.Generator | None = None,
        existing: Collection[str] = (),
        risk_target: float | None = None,
    ) -> PlacementResult:
        """Choose ``replicas`` servers for a new block and allocate the block's space on each.

        ``excluded``: servers not to use (unknown names are ignored). ``existing``: servers that
        already hold a replica of this block (re-replication): their environments, rows and
        columns count as used and ``replicas`` counts only the new ones. ``rng``: the random
        stream (default: the placer's own, seeded at construction). ``risk_target``: the co-busy
        risk target of this call (default: the placer's ``cobusy_risk_target`` with ``existing``
        holders, its ``new_block_target`` for a new block: ``cobusy_new_target`` where the estimates'
        history predicts itself, else 0, the lowest estimate).
        """
        if risk_target is not None and not 0.0 <= risk_target < 1.0:
            raise PolicyError(f"place: risk_target must be in [0, 1), got {risk_target}")
        draw: _Uniforms | None = None
        fast: tuple[list[int], str] | None = None
        if self._fast and not excluded and not existing and 2 <= replicas <= 3 and self._all.n >= replicas:
            draw = _Uniforms(rng if rng is not None else self._rng, 4 * replicas + 4)
            fast = self._place_fast(writer, replicas, draw)
            if fast is not None and len(fast[0]) == replicas:
                chosen, reason = fast
                free, block = self._free_mb, self._block
                for i in chosen:  # _commit: each was usable; only one that fills up changes pools
                    free[i] -= block
                    if free[i] < block:
                        self._update(i)
                names = self.inventory.server
                if replicas == 3:
                    return PlacementResult((names[chosen[0]], names[chosen[1]], names[chosen[2]]), False, reason)
                return PlacementResult((names[chosen[0]], names[chosen[1]]), False, reason)
        taken, holders = self._prepare(replicas, excluded, existing)
        if draw is None:
            draw = _Uniforms(rng if rng is not None else self._rng, 4 * replicas + 4)
        cell_free = list(self._cell_servers)
        for i in taken:
            if self._usable[i] and self._server_cell[i] >= 0:
                cell_free[self._server_cell[i]] -= 1
        st = _Block(cell_free, taken)
        if risk_target is None:
            risk_target = self._cobusy_target if holders else self.new_block_target
        st.target = risk_target
        for h in holders:  # already subtracted from cell_free above when usable
            self._record(st, h, counted=True)
        targets: list[int] = []
        notes: list[str] = []
        relaxed = False

        w = self._index.get(writer) if writer is not None else None
        if fast is not None:  # the fast path drew the first replica, the rest is the general path's
            if fast[1]:
                notes.append(fast[1])
            self._record(st, fast[0][0])
            targets.append(fast[0][0])
        elif w is not None and self._usable[w] and w not in taken:
            self._record(st, w)
            targets.append(w)
        elif not holders:
            if writer is not None:
                notes.append(
                    f"writer {writer!r} unknown, busy, full or excluded: first replica on a random server"
                )
            # Same draw as the other replicas (cell, tenant, server), with the look-ahead.
            s = self._pick_next(draw, st, min(self.config.forget_every, replicas) - 1)
            if s is None:
                if self.config.strict:
                    raise PlacementError(
                        "place: no server of a tenant in the grid has space for the first replica"
                    )
                s = pick_from(self._all, draw, taken)
                relaxed = True
                notes.append("replica 1: no grid server has space, used any server")
            assert s is not None  # _prepare counted enough usable servers
            self._record(st, s)
            targets.append(s)

        while len(targets) < replicas:
            k = len(targets) + 1
            round_left = self.config.forget_every - st.count % self.config.forget_every
            ahead = min(round_left, replicas - len(targets)) - 1
            s = self._pick_next(draw, st, ahead)
            if s is None and self.config.strict:
                raise PlacementError(self._diagnose(k, replicas, st))
            if s is None:
                for keep_row, keep_col, keep_env, dropped in _RELAX_STEPS:
                    s = self._pick_cell_server(draw, st, keep_row, keep_col, keep_env, 0)
                    if s is not None:
                        notes.append(f"replica {k}: dropped the {dropped} constraint")
                        break
                if s is None:
                    s = pick_from(self._all, draw, st.taken)
                    notes.append(f"replica {k}: no grid server left, used any server with space")
                relaxed = True
            assert s is not None  # _prepare counted enough usable servers
            self._record(st, s)
            targets.append(s)
        return PlacementResult(self._commit(targets), relaxed, "; ".join(notes))

    def _place_fast(self, writer: str | None, replicas: int, draw: _Uniforms) -> tuple[list[int], str] | None:
        """A new block of 2 or 3 replicas with nothing excluded or held, when it can be placed
        without relaxing, with exactly the draws and choices of the general path (``_pick_next``),
        without its per-call state; None, before any draw, when the block is not such a case.

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
        Replica 3: the partner, after the general path's ``draw.index(1)`` among its one open cell."""
        reason = ""
        stop: tuple[list[int], str] | None = None  # what to hand the general path when the rest is not fast
        w = self._index.get(writer) if writer is not None else None
        if w is None or not self._usable[w]:
            firsts = self._fast_first
            first = firsts[replicas] if replicas in firsts else firsts.setdefault(replicas, self._first_cells(replicas))
            if first is None:
                return None
            good, rules = first
            c1 = good[_index(draw, len(good))]
            if writer is not None:
                reason = f"writer {writer!r} unknown, busy, full or excluded: first replica on a random server"
            w = self._pick_tenant(c1, draw, (), (), rules[c1] if rules is not None else _NONE)
            assert w is not None  # the cell has a usable server
            stop = ([w], reason)  # drawn: from here on the general path takes over with it
        c = self._server_cell[w]
        if c < 0:
            return None
        tenv, stn = self._tenant_env, self._server_tenant
        env_w = tenv[stn[w]]
        # Only a cell with at most two usable environments can depend on the first replica's one:
        # for any other environment the choice is the same, so it shares one entry (-1).
        small = self._fast_small.get(c)
        if small is None:
            active = self._cell_env_active
            small = self._fast_small[c] = frozenset([e for x in _SUB[c] if len(active[x]) <= 2 for e in active[x]])
        key = (c, env_w if env_w in small else -1, replicas)
        seconds = self._fast_second
        if key in seconds:
            second = seconds[key]
        else:
            second = seconds[key] = self._second_cells(c, env_w, replicas)
            for x in _SUB[c]:
                self._fast_deps[x].add(key)
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
        s3 = self._pick_tenant(_PARTNER[c][c2], draw, (env_w, tenv[stn[s2]]), (w, s2))
        assert s3 is not None
        return [w, s2, s3], reason

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

    def _record(self, st: _Block, s: int, counted: bool = False) -> None:
        """Note a replica on server ``s``: its environment, row and column are used from now on."""
        st.taken.add(s)
        st.envs.add(self._tenant_env[self._server_tenant[s]])
        if self._cobusy is not None and self._server_tenant[s] not in st.tenants:
            st.tenants.append(self._server_tenant[s])
        if self._busy_hours is not None:
            st.busy |= self._busy_hours[self._server_tenant[s]]
        c = self._server_cell[s]
        if c >= 0:
            st.rows |= _ROW_BIT[c]
            st.cols |= _COL_BIT[c]
            if not counted:
                st.cell_free[c] -= 1
        st.count += 1
        if st.count % self.config.forget_every == 0:
            st.rows = 0
            st.cols = 0

    def _pick_next(self, draw: _Uniforms, st: _Block, ahead: int) -> int | None:
        """``_pick_next_once``; with busy hours, first among tenants not busy when the block's
        replicas are (the same rules otherwise), then among all."""
        if self._busy_hours is not None and st.busy:
            st.prefer = True
            s = self._pick_next_once(draw, st, ahead)
            st.prefer = False
            if s is not None:
                return s
        return self._pick_next_once(draw, st, ahead)

    def _pick_next_once(self, draw: _Uniforms, st: _Block, ahead: int) -> int | None:
        """A server for the next replica under all rules, leaving ``ahead`` more of the round placeable.

        When no assignment of the ``ahead + 1`` replicas exists, falls back to the one-step choice
        (this replica under all rules, the look-ahead over rows and columns only): the block will
        relax at a later replica.
        """
        k = min(ahead + 1, N_SIDE - max(st.rows.bit_count(), st.cols.bit_count()))
        if k <= 1:
            return self._pick_cell_server(draw, st, True, True, True, ahead)
        rows, cols, free = st.rows, st.cols, st.cell_free
        cands = [
            c for c in range(N_CELLS) if free[c] > 0 and not rows & _ROW_BIT[c] and not cols & _COL_BIT[c]
        ]
        allowed = {c: self._allowed_envs(c, st, k) for c in cands}
        if all(a is None for a in allowed.values()):
            return self._pick_cell_server(draw, st, True, True, True, ahead)
        mask = sum(_CELL_BIT[c] for c in cands if allowed[c] is None or allowed[c])
        plans = [p for p in _transversals(mask, k) if _hall(tuple([allowed[c] for c in p]))]
        if not plans:
            return self._pick_cell_server(draw, st, True, True, True, 0)
        good = sorted({c for p in plans for c in p})

        def env_rule(c: int) -> Callable[[int], bool]:
            rests = [[allowed[x] for x in p if x != c] for p in plans if c in p]
            return lambda e: any(_hall(tuple([a if a is None else a - {e} for a in rest])) for rest in rests)

        if self._cobusy is not None and st.tenants:
            # Co-busy estimates: the best tenant over every cell of a feasible plan, not a random cell.
            return self._pick_by_cobusy([(c, env_rule(c)) for c in good], draw, st, True)
        while good:
            i = draw.index(len(good))
            c = good[i]
            good[i] = good[-1]
            good.pop()
            s = self._pick_in_cell(c, draw, st, True, env_rule(c))
            if s is not None:
                return s
        return None  # pragma: no cover - a plan's cell always has a tenant of an allowed environment

    def _allowed_envs(self, c: int, st: _Block, need: int) -> frozenset[int] | None:
        """The environments of cell ``c`` that can take this block's next replica, or None when at
        least ``need`` can (then the cell cannot block a matching of ``need`` replicas)."""
        active = self._cell_env_active[c]
        # Each environment of the block, and each usable server of the cell already taken or chosen,
        # can remove at most one environment from the cell.
        held = self._cell_servers[c] - st.cell_free[c]
        if len(active) - len(st.envs) - held >= need:
            return None
        if held == 0:  # no usable server of the cell taken: every active environment has one left
            rest = active.keys() - st.envs
            return None if len(rest) >= need else frozenset(rest)
        out: set[int] = set()
        members, taken = self._cell_env_tenants[c], st.taken
        for e in active:
            if e in st.envs:
                continue
            for t in members[e]:
                pool = self._tenant_pool[t]
                if any(pool.items[j] not in taken for j in range(pool.n)):
                    out.add(e)
                    break
            if len(out) >= need:
                return None
        return frozenset(out)

    def _pick_cell_server(
        self, draw: _Uniforms, st: _Block, keep_row: bool, keep_col: bool, keep_env: bool, ahead: int
    ) -> int | None:
        """A server in a random allowed cell, trying cells that keep the round completable first."""
        rows, cols, free = st.rows, st.cols, st.cell_free
        cands = [
            c
            for c in range(N_CELLS)
            if free[c] > 0 and not (keep_row and rows & _ROW_BIT[c]) and not (keep_col and cols & _COL_BIT[c])
        ]
        if not cands:
            return None
        if ahead > 0 and len(cands) > 1:
            space = sum(_CELL_BIT[c] for c in range(N_CELLS) if free[c] > 0)
            good = [c for c in cands if _completable(space, rows | _ROW_BIT[c], cols | _COL_BIT[c], ahead)]
            # A preference (busy hours) never sends a replica to a cell that blocks the round.
            groups = [good] if st.prefer and good else [good, [c for c in cands if c not in good]]
        else:
            groups = [cands]
        if self._cobusy is not None and st.tenants:
            for group in groups:
                s = self._pick_by_cobusy([(c, None) for c in group], draw, st, keep_env)
                if s is not None:
                    return s
            return None
        for group in groups:
            while group:
                i = draw.index(len(group))
                c = group[i]
                group[i] = group[-1]
                group.pop()
                s = self._pick_in_cell(c, draw, st, keep_env)
                if s is not None:
                    return s
        return None

    def _pick_in_cell(
        self, c: int, draw: _Uniforms, st: _Block, keep_env: bool, env_ok: Callable[[int], bool] | None = None
    ) -> int | None:
        """A usable server of a random allowed tenant of cell ``c`` (while ``st.prefer``: only a
        tenant not busy at any hour the block's replicas are busy)."""
        masks = self._busy_hours
        if masks is not None and st.prefer:
            busy = st.busy
            return self._pick_tenant_server(c, draw, st, keep_env, env_ok, lambda t: not masks[t] & busy)
        if self._cobusy is not None and st.tenants:
            return self._pick_by_cobusy([(c, env_ok)], draw, st, keep_env)
        return self._pick_tenant_server(c, draw, st, keep_env, env_ok, None)

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

    def _pick_tenant_server(
        self,
        c: int,
        draw: _Uniforms,
        st: _Block,
        keep_env: bool,
        env_ok: Callable[[int], bool] | None,
        tenant_ok: Callable[[int], bool] | None,
    ) -> int | None:
        pool = self._cell_pool[c]
        n = pool.n
        if n == 0:
            return None
        items, envs, tenv = pool.items, st.envs, self._tenant_env
        for _ in range(_TRIES):
            t = items[draw.index(n)]
            if keep_env and tenv[t] in envs or env_ok is not None and not env_ok(tenv[t]):
                continue
            if tenant_ok is not None and not tenant_ok(t):
                continue
            s = pick_from(self._tenant_pool[t], draw, st.taken)
            if s is not None:
                return s
        start = draw.index(n)
        for j in range(n):
            t = items[(start + j) % n]
            if keep_env and tenv[t] in envs or env_ok is not None and not env_ok(tenv[t]):
                continue
            if tenant_ok is not None and not tenant_ok(t):
                continue
            s = pick_from(self._tenant_pool[t], draw, st.taken)
            if s is not None:
                return s
        return None

    def _diagnose(self, k: int, replicas: int, st: _Block) -> str:
        open_cells = [
            (c // N_SIDE, c % N_SIDE)
            for c in range(N_CELLS)
            if st.cell_free[c] > 0 and not st.rows & _ROW_BIT[c] and not st.cols & _COL_BIT[c]
        ]
        spaced = [(c // N_SIDE, c % N_SIDE) for c in range(N_CELLS) if st.cell_free[c] > 0]
        if not open_cells:
            return (
                f"place (strict): replica {k} of {replicas}: row/column constraint: no cell in an unused row "
                f"and column has a usable server (rows used {_bits(st.rows)}, columns used "
                f"{_bits(st.cols)}, cells with space {spaced})"
            )
        return (
            f"place (strict): replica {k} of {replicas}: environment constraint: the open cells {open_cells} "
            f"only have usable servers in environments that already hold a replica of this block"
        )


class _Block:
    """Per-call state of one block's placement."""

    __slots__ = ("cell_free", "taken", "rows", "cols", "envs", "count", "busy", "prefer", "tenants", "target")

    def __init__(self, cell_free: list[int], taken: set[int]) -> None:
        self.cell_free = cell_free
        self.taken = taken
        self.rows = 0  # bit r set: row r holds a replica of this round
        self.cols = 0
        self.envs: set[int] = set()
        self.count = 0
        self.busy = 0  # OR of the busy-hour masks of the block's replicas so far
        self.prefer = False  # pick only tenants whose busy hours miss ``busy``
        self.tenants: list[int] = []  # distinct tenants of the block's replicas so far
        self.target = 0.0  # co-busy risk target of this call (0: the lowest estimate)


_FastCells = tuple[list[int], dict[int, frozenset[int]] | None]
"""The cells the fast path draws from, and per cell the environments its rule refuses (None: none)."""
_NONE: frozenset[int] = frozenset()


def _env_forbidden(rests: list[list[frozenset[int] | None]]) -> frozenset[int]:
    """The environments the general path's ``env_rule`` refuses: ``e`` is allowed when the rest of
    some plan (each entry: the allowed environments of its cells) can still get distinct ones
    without it. Each rest comes from a feasible plan, so it is feasible as it is: only an
    environment one of its cells allows can be refused."""
    named = {e for rest in rests for a in rest if a is not None for e in a}
    return frozenset(
        e for e in named if not any(_hall(tuple([a if a is None else a - {e} for a in rest])) for rest in rests)
    )


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
    n = pool.n
    items = pool.items
    for _ in range(_POOL_TRIES - 1):
        s = items[draw.index(n)]
        if s not in taken:
            return s
    start = draw.index(n)
    for j in range(n):
        s = items[(start + j) % n]
        if s not in taken:
            return s
    return None


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


_ROW_BIT = tuple(1 << (c // N_SIDE) for c in range(N_CELLS))
_COL_BIT = tuple(1 << (c % N_SIDE) for c in range(N_CELLS))
_CELL_BIT = tuple(1 << c for c in range(N_CELLS))
# Per cell: the four cells in other rows and columns (ascending, as the general path lists them),
# and for each of those its partner in the 2x2 sub-grid (the other row and column).
_SUB = tuple(
    tuple(x for x in range(N_CELLS) if x // N_SIDE != c // N_SIDE and x % N_SIDE != c % N_SIDE) for c in range(N_CELLS)
)
_PARTNER = tuple(
    {x: y for x in _SUB[c] for y in _SUB[c] if x // N_SIDE != y // N_SIDE and x % N_SIDE != y % N_SIDE}
    for c in range(N_CELLS)
)


def _bits(mask: int) -> list[int]:
    return [i for i in range(N_SIDE) if mask >> i & 1]


@lru_cache(maxsize=8192)
def _completable(space: int, rows: int, cols: int, k: int) -> bool:
    """Whether ``k`` more cells with space (bit c of ``space``) fit in distinct rows and columns
    outside the ``rows`` / ``cols`` bitmasks (``k`` capped at what the 3x3 grid still allows)."""
    k = min(k, N_SIDE - max(rows.bit_count(), cols.bit_count()))
    if k <= 0:
        return True
    for c in range(N_CELLS):
        if (
            space & _CELL_BIT[c]
            and not rows & _ROW_BIT[c]
            and not cols & _COL_BIT[c]
            and _completable(space, rows | _ROW_BIT[c], cols | _COL_BIT[c], k - 1)
        ):
            return True
    return False


@lru_cache(maxsize=2048)
def _transversals(cells: int, k: int) -> tuple[tuple[int, ...], ...]:
    """Every set of ``k`` cells of the bitmask ``cells`` in pairwise distinct rows and columns."""
    members = [c for c in range(N_CELLS) if cells & _CELL_BIT[c]]
    return tuple(p for p in combinations(members, k) if _transversal(p))


def _transversal(cells: tuple[int, ...]) -> bool:
    """Whether the cells lie in pairwise distinct rows and columns."""
    rows = cols = 0
    for c in cells:
        if rows & _ROW_BIT[c] or cols & _COL_BIT[c]:
            return False
        rows |= _ROW_BIT[c]
        cols |= _COL_BIT[c]
    return True


@lru_cache(maxsize=65536)
def _hall(allowed: tuple[frozenset[int] | None, ...]) -> bool:
    """Whether the cells can get pairwise distinct environments (Hall's condition). ``None``: the
    cell has at least ``len(allowed)`` environments, so no subset containing it can fail."""
    exact = [a for a in allowed if a is not None]
    n = len(exact)
    if n <= 1:
        return all(exact)
    for mask in range(1, 1 << n):
        members = [exact[i] for i in range(n) if mask >> i & 1]
        if len(frozenset().union(*members)) < len(members):
            return False
    return True
