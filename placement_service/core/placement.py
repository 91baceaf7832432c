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
co-busy preference; 4 replicas in rounds of 3) takes ``_place_fast`` (``core/placement_fast.py``): the same draws and choices
from cell lists kept per grid state (docs/policy.md, "One block at a time"). The grid's tables and
matching checks are in ``core/placement_grid.py``, the co-busy choices in ``core/placement_cobusy.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from placement_service.core.cobusy import CobusyModel, aligned
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
from placement_service.core.placement_cobusy import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_REL_TOL,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
    _ascending,  # noqa: F401 - importable from here as before the split
)
from placement_service.core.placement_cobusy_fast import _CobusyFastPath
from placement_service.core.placement_grid import (
    _CELL_BIT,
    _COL_BIT,
    _ROW_BIT,
    _TRIES,
    N_CELLS,
    N_SIDE,
    _bits,
    _Block,
    _completable,
    _FastCells,
    _hall,
    _transversals,
)
from placement_service.core.types import GridCell, Inventory, PlacementError, PolicyError

__all__ = [
    "MB_PER_GB",
    "N_CELLS",
    "N_SIDE",
    "PlacementConfig",
    "PlacementResult",
    "BatchPlacement",
    "COBUSY_NEW_MAX_TURNOVER",
    "COBUSY_NEW_TARGET",
    "COBUSY_REL_TOL",
    "COBUSY_RISK_TARGET",
    "COBUSY_SPREAD",
    "PlacerBase",
    "REIMAGE_CHOICES",
    "REPAIR_CHOICES",
    "ReplicaPlacer",
    "pick_from",
]

logger = logging.getLogger(__name__)



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


class ReplicaPlacer(_CobusyFastPath):
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
        # ... and of 4, when a round is 3 (the fourth starts the next one).
        self._fast_max = 4 if config.forget_every == N_SIDE else 3
        # Its cell choices, kept while no tenant of the cells they read gains or loses its last
        # usable server (``_cell_changed``): first replicas per replica count, replica 2 per
        # (first replica's cell, its environment, replica count), and which of those read each cell.
        self._fast_first: dict[int, _FastCells | None] = {}
        self._fast_second: dict[tuple[int, int, int], _FastCells | None] = {}
        self._fast_deps: list[set[tuple[int, int, int]]] = [set() for _ in range(N_CELLS)]
        self._fast_small: dict[int, frozenset[int]] = {}  # per cell: environments of its sub-grid's small cells
        # New blocks under co-busy estimates take ``_place_fast_cobusy`` (no spread bound: its counts
        # change the scores between replicas), with its scores kept per tenant and cell.
        self._fast_cobusy = (
            self._busy_hours is None and self._cobusy is not None and config.forget_every >= N_SIDE
            and self._cobusy_spread == 0.0
        )
        self._cob_init()
        self._init_usable()

    def reset_server(self, server: str) -> None:
        """A reimage wiped the server's disk: all of its space is free again, and it counts as one
        more reimage seen of that server (``REIMAGE_CHOICES``)."""
        super().reset_server(server)
        s = self._index[server]
        self._reimaged[s] += 1.0
        self._tenant_reimaged[self._server_tenant[s]] += 1.0

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

    def tenant_of(self, servers: np.ndarray) -> np.ndarray:
        """The tenant index (in the order of :attr:`tenant_names`) of each inventory row (-1 stays -1)."""
        st = np.asarray(self._server_tenant, dtype=np.int64)
        s = np.asarray(servers, dtype=np.int64)
        return np.where(s >= 0, st[np.maximum(s, 0)], -1)

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
        if (self._fast and replicas <= self._fast_max or self._fast_cobusy and replicas <= 3) and replicas >= 2 \
                and not excluded and not existing and self._all.n >= replicas:
            draw = _Uniforms(rng if rng is not None else self._rng, 4 * replicas + 4)
            if self._fast:
                fast = self._place_fast(writer, replicas, draw)
            else:
                target = risk_target if risk_target is not None else self.new_block_target
                fast = self._place_fast_cobusy(writer, replicas, draw, target)
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
                if replicas == 2:
                    return PlacementResult((names[chosen[0]], names[chosen[1]]), False, reason)
                return PlacementResult(tuple([names[i] for i in chosen]), False, reason)
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
        if fast is not None:  # the fast path drew the first replicas, the rest is the general path's
            if fast[1]:
                notes.append(fast[1])
            for drawn in fast[0]:
                self._record(st, drawn)
                targets.append(drawn)
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
