"""Shared pieces of the replica placers: configuration, result, free lists and space bookkeeping.

``PlacerBase`` keeps each server's free space and busy flag and a pool of the *usable* servers (not
busy, room for one more block); subclasses keep their own pools (tenants and grid cells for
``ReplicaPlacer``, racks for ``StockPlacer``) in step through ``_on_change``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np

from placement_service.core.types import Inventory, PlacementError, PolicyError

MB_PER_GB = 1024.0
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


def pick_from(pool: _Pool, draw: _Uniforms, taken: Collection[int], tries: int = _TRIES) -> int | None:
    """A random active member of ``pool`` not in ``taken`` (``tries`` rejection draws, then a scan
    from one more draw), or None. The per-block fast path makes the first draw itself and calls this
    with the remaining ``_TRIES - 1``: the same draws as one call."""
    n = pool.n
    if n == 0:
        return None
    items = pool.items
    for _ in range(tries):
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

    def server_index(self, server: str) -> int:
        """The inventory row of a server (PolicyError when unknown)."""
        return self._server(server)

    def allocate_blocks(self, servers: np.ndarray) -> None:
        """Take one block of space on each entry of ``servers`` (inventory rows; repeats allowed).
        The caller has checked that each server has room for all of its entries."""
        counts = np.bincount(np.asarray(servers, dtype=np.int64), minlength=len(self._cap_mb))
        block = self._block
        for s in np.flatnonzero(counts).tolist():
            self._free_mb[s] -= block * int(counts[s])
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
