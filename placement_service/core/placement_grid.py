"""The 3x3 grid of the replica placer (``core/placement.py``): cell bit tables, the placer's state
the grid rules read, a block's per-call state, and the matching checks (rows and columns:
``_completable``, ``_transversals``; environments: Hall's condition, ``_hall``).

A cell ``c`` is ``row * N_SIDE + column``; row, column and cell sets are bitmasks.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING

from placement_service.core.placement_base import PlacerBase, _Pool

if TYPE_CHECKING:
    import numpy as np

    from placement_service.core.cobusy import CobusyModel

N_SIDE = 3
N_CELLS = N_SIDE * N_SIDE
_TRIES = 4


class _GridPlacerState(PlacerBase):
    """The state ``ReplicaPlacer`` builds (``__init__``) and its parts (the fast path in
    ``core/placement_fast.py``, the co-busy choices in ``core/placement_cobusy.py``) read, by name.
    Annotations only: no behaviour."""

    _server_tenant: list[int]
    _server_cell: list[int]
    _tenant_names: tuple[str, ...]
    _tenant_env: list[int]
    _tenant_cell: list[int]
    _tenant_pool: list[_Pool]
    _cell_pool: list[_Pool]
    _cell_servers: list[int]
    _cell_arr: list[np.ndarray | None]
    _cell_env_active: list[dict[int, int]]
    _fast_first: dict[int, _FastCells | None]
    _fast_second: dict[tuple[int, int, int], _FastCells | None]
    _fast_deps: list[set[tuple[int, int, int]]]
    _fast_small: dict[int, frozenset[int]]
    _cobusy: CobusyModel | None
    _cobusy_rel_tol: float
    _cobusy_target: float
    _cobusy_new_target: float
    _cobusy_new_max_turnover: float
    _cobusy_spread: float
    _cobusy_factor: np.ndarray | None
    _spread_taken: np.ndarray
    _spread_cell_taken: np.ndarray
    _spread_servers: np.ndarray
    _spread_cell: np.ndarray
    _spread_cell_servers: np.ndarray
    _reimage_choices: int
    _repair_choices: int
    _reimaged: list[float]
    _tenant_reimaged: list[float]
    _tenant_size: list[float]


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
