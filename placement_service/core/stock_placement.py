"""Stock HDFS replica placement (the baseline that replica placement is compared with).

Mimics ``BlockPlacementPolicyDefault`` with the inventory's ``rack`` column as the topology, one
choice per replica given the replicas chosen so far (including ``existing`` ones):

1. none chosen yet: the writer's server (when known, usable and not excluded), else a random server;
2. one chosen: a random server on a different rack than the first;
3. two chosen: if they share a rack, a random server on another rack; otherwise another server on
   the second replica's rack;
4. more: a random server not chosen yet.

When a rack rule cannot be met (one rack, or the wanted rack is full), the replica goes to any
usable server, as HDFS's fallback does, and the result is marked ``relaxed``. Stock HDFS knows
nothing of primary tenants, reimages or environments, so the grid is accepted (same constructor as
:class:`ReplicaPlacer`) and ignored. Busy servers are skipped, as HDFS skips DataNodes it considers
overloaded (``dfs.namenode.redundancy.considerLoad``) or stale; full servers are skipped as HDFS
skips nodes without room for a block. ``strict`` has no effect: there is nothing to refuse for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from placement_service.core.placement_base import (
    PlacementConfig,
    PlacementResult,
    PlacerBase,
    _Pool,
    _Uniforms,
    pick_from,
)
from placement_service.core.types import GridCell, Inventory

_TRIES = 8


class StockPlacer(PlacerBase):
    """Rack-aware placement of stock HDFS (see the module docstring)."""

    def __init__(
        self,
        inventory: Inventory,
        grid: Mapping[str, GridCell] | None = None,
        *,
        config: PlacementConfig = PlacementConfig(),  # noqa: B008 - frozen, shared safely
        seed: int = 0,
    ) -> None:
        super().__init__(inventory, config, seed)
        del grid
        racks: dict[str, int] = {}
        self._server_rack = [racks.setdefault(r, len(racks)) for r in inventory.rack]
        members: list[list[int]] = [[] for _ in racks]
        for s, r in enumerate(self._server_rack):
            members[r].append(s)
        self._rack_pool = [_Pool(m) for m in members]
        self._init_usable()

    def _on_change(self, s: int, usable: bool) -> None:
        pool = self._rack_pool[self._server_rack[s]]
        if usable:
            pool.activate(s)
        else:
            pool.deactivate(s)

    def place(
        self,
        writer: str | None,
        replicas: int,
        *,
        excluded: Collection[str] = (),
        rng: np.random.Generator | None = None,
        existing: Collection[str] = (),
    ) -> PlacementResult:
        """Choose ``replicas`` servers the way stock HDFS would and allocate the block on each."""
        taken, holders = self._prepare(replicas, excluded, existing)
        draw = _Uniforms(rng if rng is not None else self._rng, 2 * replicas + 4)
        chosen = list(holders)
        targets: list[int] = []
        notes: list[str] = []
        while len(targets) < replicas:
            k = len(chosen)
            s: int | None = None
            if k == 0:
                w = self._index.get(writer) if writer is not None else None
                s = w if w is not None and self._usable[w] and w not in taken else None
            elif k == 1:
                s = self._other_rack(draw, taken, {self._server_rack[chosen[0]]})
            elif k == 2:
                r0, r1 = self._server_rack[chosen[0]], self._server_rack[chosen[1]]
                if r0 == r1:
                    s = self._other_rack(draw, taken, {r0})
                else:
                    s = pick_from(self._rack_pool[r1], draw, taken)
            if s is None:
                if 1 <= k <= 2:
                    notes.append(f"replica {len(targets) + 1}: rack rule not met, used any server")
                s = pick_from(self._all, draw, taken)
            assert s is not None  # _prepare counted enough usable servers
            taken.add(s)
            chosen.append(s)
            targets.append(s)
        return PlacementResult(self._commit(targets), bool(notes), "; ".join(notes))

    def _other_rack(self, draw: _Uniforms, taken: set[int], racks: set[int]) -> int | None:
        """A random usable server on a rack not in ``racks`` (rejection, then a scan)."""
        pool, srack = self._all, self._server_rack
        n = pool.n
        if n == 0:
            return None
        for _ in range(_TRIES):
            s = pool.items[draw.index(n)]
            if s not in taken and srack[s] not in racks:
                return s
        start = draw.index(n)
        for j in range(n):
            s = pool.items[(start + j) % n]
            if s not in taken and srack[s] not in racks:
                return s
        return None
