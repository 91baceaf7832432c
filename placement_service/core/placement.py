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
   yet, preferring cells that still leave room to finish the round (a one-step look-ahead over the
   cells with space, so a lucky early pick does not block a later one); in that cell a random
   tenant whose environment holds no replica of this block; in that tenant a random server with
   space. Busy, excluded, full and already chosen servers are skipped.
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
no step scans all servers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from placement_service.core.types import GridCell, Inventory, PlacementError, PolicyError

logger = logging.getLogger(__name__)

MB_PER_GB = 1024.0
N_SIDE = 3
N_CELLS = N_SIDE * N_SIDE
_TRIES = 4


@dataclass(frozen=True)
class PlacementConfig:
    """``block_size_mb``: space one replica takes; ``strict``: refuse rather than relax constraints;
    ``forget_every``: replicas per round of distinct rows and columns."""

    block_size_mb: float = 256.0
    strict: bool = False
    forget_every: int = 3

    def __post_init__(self) -> None:
        if not (self.block_size_mb > 0.0 and math.isfinite(self.block_size_mb)):
            raise PolicyError(f"PlacementConfig: block_size_mb must be > 0, got {self.block_size_mb}")
        if self.forget_every < 1:
            raise PolicyError(f"PlacementConfig: forget_every must be >= 1, got {self.forget_every}")


@dataclass(frozen=True)
class PlacementResult:
    """Servers chosen for one block (first = the writer's when it could be used)."""

    targets: tuple[str, ...]
    relaxed: bool
    reason: str


class _Pool:
    """A set of ints with O(1) activate / deactivate and uniform sampling of the active ones.

    ``items[:n]`` are the active members; ``pos`` maps a member to its index in ``items``.
    """

    __slots__ = ("items", "pos", "n")

    def __init__(self, members: Iterable[int]) -> None:
        self.items = list(members)
        self.pos = {m: i for i, m in enumerate(self.items)}
        self.n = len(self.items)

    def _swap(self, i: int, j: int) -> None:
        a, b = self.items[i], self.items[j]
        self.items[i], self.items[j] = b, a
        self.pos[a], self.pos[b] = j, i

    def deactivate(self, m: int) -> None:
        i = self.pos[m]
        if i < self.n:
            self._swap(i, self.n - 1)
            self.n -= 1

    def activate(self, m: int) -> None:
        i = self.pos[m]
        if i >= self.n:
            self._swap(i, self.n)
            self.n += 1


class _Uniforms:
    """Uniform draws from ``rng`` in small batches (a scalar numpy draw per pick would dominate)."""

    __slots__ = ("rng", "buf", "i")

    def __init__(self, rng: np.random.Generator, n: int) -> None:
        self.rng = rng
        self.buf: list[float] = rng.random(n).tolist()
        self.i = 0

    def index(self, n: int) -> int:
        """A uniform integer in ``[0, n)``."""
        if self.i >= len(self.buf):
            self.buf = self.rng.random(32).tolist()
            self.i = 0
        u = self.buf[self.i]
        self.i += 1
        k = int(u * n)
        return k if k < n else n - 1


def pick_from(pool: _Pool, draw: _Uniforms, taken: Collection[int]) -> int | None:
    """A random active member of ``pool`` not in ``taken`` (rejection, then a scan), or None."""
    n = pool.n
    if n == 0:
        return None
    items = pool.items
    for _ in range(_TRIES):
        s = items[draw.index(n)]
        if s not in taken:
            return s
    start = draw.index(n)
    for j in range(n):
        s = items[(start + j) % n]
        if s not in taken:
            return s
    return None


class PlacerBase:
    """Free-space and busy bookkeeping shared by the placers (one server = one inventory row).

    A server is *usable* when it is not busy and has at least one block of free space. Placers are
    not thread-safe: callers serialize ``place`` and the state updates (one lock per placer).
    """

    def __init__(self, inventory: Inventory, config: PlacementConfig, seed: int) -> None:
        self.inventory = inventory
        self.config = config
        self._index = inventory.index()
        if len(self._index) != len(inventory):
            raise PolicyError("inventory: server names must be unique")
        storage = np.asarray(inventory.storage_gb, dtype=np.float64)
        if storage.shape != (len(inventory),) or not np.all(np.isfinite(storage)) or np.any(storage < 0):
            raise PolicyError("inventory: storage_gb must be one finite number >= 0 per server")
        self._block = float(config.block_size_mb)
        self._cap_mb: list[float] = (storage * MB_PER_GB).tolist()
        self._free_mb: list[float] = list(self._cap_mb)
        self._busy = [False] * len(inventory)
        self._usable = [True] * len(inventory)
        self._all = _Pool(range(len(inventory)))
        self._rng = np.random.default_rng(seed)

    def _init_usable(self) -> None:
        """Call once the subclass has built its pools: retire servers without a block of space."""
        for s in range(len(self.inventory)):
            self._update(s)

    def _on_change(self, s: int, usable: bool) -> None:  # pragma: no cover - overridden
        del s, usable

    def _update(self, s: int) -> None:
        usable = (not self._busy[s]) and self._free_mb[s] >= self._block
        if usable != self._usable[s]:
            self._usable[s] = usable
            if usable:
                self._all.activate(s)
            else:
                self._all.deactivate(s)
            self._on_change(s, usable)

    def _server(self, server: str) -> int:
        i = self._index.get(server)
        if i is None:
            raise PolicyError(f"unknown server {server!r} (not in the inventory)")
        return i

    def set_busy(self, server: str, busy: bool) -> None:
        """Mark a server busy (its primary tenant needs it: no new replicas) or idle again."""
        s = self._server(server)
        self._busy[s] = bool(busy)
        self._update(s)

    def allocate(self, server: str, size_mb: float) -> None:
        """Take ``size_mb`` of a server's space (a replica written outside ``place``)."""
        s = self._server(server)
        if not (0.0 <= size_mb <= self._free_mb[s]):  # also refuses NaN
            raise PlacementError(
                f"allocate: {server!r} has {self._free_mb[s]:.0f} MB free, cannot take {size_mb} MB"
            )
        self._free_mb[s] -= size_mb
        self._update(s)

    def release(self, server: str, size_mb: float) -> None:
        """Give back ``size_mb`` of a server's space (a replica deleted); capped at ``storage_gb``."""
        s = self._server(server)
        if not (0.0 <= size_mb < math.inf):  # also refuses NaN
            raise PolicyError(f"release: size_mb must be a finite number >= 0, got {size_mb}")
        self._free_mb[s] = min(self._cap_mb[s], self._free_mb[s] + size_mb)
        self._update(s)

    def reset_server(self, server: str) -> None:
        """A reimage wiped the server's disk: all of its space is free again."""
        s = self._server(server)
        self._free_mb[s] = self._cap_mb[s]
        self._update(s)

    def free_mb(self, server: str) -> float:
        """Free space of a server (MB)."""
        return self._free_mb[self._server(server)]

    def has_space(self, server: str) -> bool:
        """True when the server can take one more block (busy or not)."""
        return self._free_mb[self._server(server)] >= self._block

    def is_usable(self, server: str) -> bool:
        """True when the server could take a replica now (known, not busy, room for a block)."""
        i = self._index.get(server)
        return i is not None and self._usable[i]

    def usable_count(self) -> int:
        """Servers that are not busy and have room for a block."""
        return self._all.n

    def random_usable(self, rng: np.random.Generator) -> str | None:
        """A server drawn uniformly from the usable ones (None when there is none)."""
        n = self._all.n
        if n == 0:
            return None
        return self.inventory.server[self._all.items[int(rng.integers(n))]]

    def _prepare(
        self, replicas: int, excluded: Collection[str], existing: Collection[str]
    ) -> tuple[set[int], list[int]]:
        """Validate a request; return the servers not to use and the existing holders' indices."""
        if replicas < 1:
            raise PolicyError(f"place: replicas must be >= 1, got {replicas}")
        taken = {i for i in (self._index.get(x) for x in excluded) if i is not None}
        holders = [self._server(x) for x in existing]
        taken.update(holders)
        usable = self._all.n - sum(1 for i in taken if self._usable[i])
        if usable < replicas:
            raise PlacementError(
                f"place: need {replicas} servers with space for a {self._block:.0f} MB block, found {usable} "
                f"(of {len(self.inventory)}; busy, full, excluded and existing-replica servers skipped)"
            )
        return taken, holders

    def _commit(self, targets: list[int]) -> tuple[str, ...]:
        for s in targets:
            self._free_mb[s] -= self._block
            self._update(s)
        names = self.inventory.server
        return tuple(names[s] for s in targets)


_RELAX_STEPS: tuple[tuple[bool, bool, bool, str], ...] = (
    # (keep row, keep column, keep environment, what was dropped)
    (True, False, True, "column"),
    (False, False, True, "row and column"),
    (False, False, False, "row, column and environment"),
)


class ReplicaPlacer(PlacerBase):
    """Grid-diverse replica placement (see the module docstring for the procedure)."""

    def __init__(
        self,
        inventory: Inventory,
        grid: Mapping[str, GridCell],
        *,
        config: PlacementConfig = PlacementConfig(),  # noqa: B008 - frozen, shared safely
        seed: int = 0,
    ) -> None:
        super().__init__(inventory, config, seed)
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
        self._server_cell = [self._tenant_cell[t] for t in server_tenant]
        self._tenant_pool = [_Pool(m) for m in members]
        self._cell_pool = [
            _Pool(t for t in range(len(tenants)) if self._tenant_cell[t] == c) for c in range(N_CELLS)
        ]
        self._cell_servers = [sum(len(members[t]) for t in p.items) for p in self._cell_pool]
        self._init_usable()

    def _on_change(self, s: int, usable: bool) -> None:
        t = self._server_tenant[s]
        tpool = self._tenant_pool[t]
        c = self._tenant_cell[t]
        if usable:
            tpool.activate(s)
            if c >= 0:
                self._cell_servers[c] += 1
                self._cell_pool[c].activate(t)
        else:
            tpool.deactivate(s)
            if c >= 0:
                self._cell_servers[c] -= 1
                if tpool.n == 0:
                    self._cell_pool[c].deactivate(t)

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
    ) -> PlacementResult:
        """Choose ``replicas`` servers for a new block and allocate the block's space on each.

        ``excluded``: servers not to use (unknown names are ignored). ``existing``: servers that
        already hold a replica of this block (re-replication): their environments, rows and
        columns count as used and ``replicas`` counts only the new ones. ``rng``: the random
        stream (default: the placer's own, seeded at construction).
        """
        taken, holders = self._prepare(replicas, excluded, existing)
        draw = _Uniforms(rng if rng is not None else self._rng, 4 * replicas + 4)
        cell_free = list(self._cell_servers)
        for i in taken:
            if self._usable[i] and self._server_cell[i] >= 0:
                cell_free[self._server_cell[i]] -= 1
        st = _Block(cell_free, taken)
        for h in holders:  # already subtracted from cell_free above when usable
            self._record(st, h, counted=True)
        targets: list[int] = []
        notes: list[str] = []
        relaxed = False

        w = self._index.get(writer) if writer is not None else None
        if w is not None and self._usable[w] and w not in taken:
            self._record(st, w)
            targets.append(w)
        elif not holders:
            if writer is not None:
                notes.append(
                    f"writer {writer!r} unknown, busy, full or excluded: first replica on a random server"
                )
            # Same draw as the other replicas (cell, tenant, server), with the look-ahead.
            s = self._pick_cell_server(
                draw, st, True, True, True, min(self.config.forget_every, replicas) - 1
            )
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
            s = self._pick_cell_server(draw, st, True, True, True, ahead)
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
            groups = [good, [c for c in cands if c not in good]]
        else:
            groups = [cands]
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

    def _pick_in_cell(self, c: int, draw: _Uniforms, st: _Block, keep_env: bool) -> int | None:
        pool = self._cell_pool[c]
        n = pool.n
        if n == 0:
            return None
        items, envs, tenv = pool.items, st.envs, self._tenant_env
        for _ in range(_TRIES):
            t = items[draw.index(n)]
            if keep_env and tenv[t] in envs:
                continue
            s = pick_from(self._tenant_pool[t], draw, st.taken)
            if s is not None:
                return s
        start = draw.index(n)
        for j in range(n):
            t = items[(start + j) % n]
            if keep_env and tenv[t] in envs:
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

    __slots__ = ("cell_free", "taken", "rows", "cols", "envs", "count")

    def __init__(self, cell_free: list[int], taken: set[int]) -> None:
        self.cell_free = cell_free
        self.taken = taken
        self.rows = 0  # bit r set: row r holds a replica of this round
        self.cols = 0
        self.envs: set[int] = set()
        self.count = 0


_ROW_BIT = tuple(1 << (c // N_SIDE) for c in range(N_CELLS))
_COL_BIT = tuple(1 << (c % N_SIDE) for c in range(N_CELLS))
_CELL_BIT = tuple(1 << c for c in range(N_CELLS))


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
