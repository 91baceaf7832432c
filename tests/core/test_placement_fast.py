"""Tests of ``ReplicaPlacer``'s per-block fast path (core/placement.py ``_place_fast``): it must make
exactly the choices of the general path, draw for draw, in every state it takes."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.placement import ReplicaPlacer
from placement_service.core.types import GridCell, Inventory

BLOCK_MB = 256.0


def grid_cluster(seed: int, tenants_per_cell: int = 5, envs: int = 12) -> tuple[Inventory, dict[str, GridCell]]:
    """Every grid cell with a few tenants of shared environments (1-3 servers, 1-4 blocks of space
    each), plus two tenants outside the grid: small enough that a run fills it up."""
    rng = np.random.default_rng(seed)
    servers, tenant, env, storage = [], [], [], []
    grid: dict[str, GridCell] = {}
    for c in range(9):
        for k in range(tenants_per_cell):
            name = f"t{c}-{k}"
            grid[name] = GridCell(c // 3, c % 3)
            e = f"e{rng.integers(envs)}"
            for s in range(int(rng.integers(1, 4))):
                servers.append(f"{name}-s{s}")
                tenant.append(name)
                env.append(e)
                storage.append(0.25 * int(rng.integers(1, 5)))
    for k in range(2):  # outside the grid: only their writers' replicas
        servers.append(f"out{k}-s0")
        tenant.append(f"out{k}")
        env.append(f"e{rng.integers(envs)}")
        storage.append(1.0)
    n = len(servers)
    inv = Inventory(server=tuple(servers), tenant=tuple(tenant), environment=tuple(env), rack=("r",) * n,
                    cores=np.full(n, 16.0), memory_mb=np.full(n, 65536.0), storage_gb=np.array(storage))
    return inv, grid


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_chooses_what_the_general_path_chooses(seed: int) -> None:
    inv, grid = grid_cluster(seed)
    fast = ReplicaPlacer(inv, grid, seed=seed)
    general = ReplicaPlacer(inv, grid, seed=seed)
    general._fast = False  # the general path only
    assert fast._fast
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    pick = np.random.default_rng(100 + seed)
    took_fast = [0]
    place_fast = fast._place_fast

    def counted(*args: object) -> object:
        out = place_fast(*args)  # type: ignore[arg-type]
        took_fast[0] += out is not None
        return out

    fast._place_fast = counted  # type: ignore[method-assign]
    for i in range(400):  # until the cluster is full: fast, then general, then refusals
        writer = [None, "no-such-server", *inv.server][int(pick.integers(len(inv.server) + 2))]
        replicas = int(pick.integers(1, 5))
        if i % 37 == 0:  # space back and busy flags move, as reports would
            server = inv.server[int(pick.integers(len(inv.server)))]
            for placer in (fast, general):
                placer.release(server, BLOCK_MB)
                placer.set_busy(inv.server[i % len(inv.server)], bool(i % 2))
        try:
            a: object = fast.place(writer, replicas, rng=rng_a)
        except Exception as exc:  # noqa: BLE001 - the refusal must be the same too
            a = repr(exc)
        try:
            b: object = general.place(writer, replicas, rng=rng_b)
        except Exception as exc:  # noqa: BLE001
            b = repr(exc)
        assert a == b, (i, writer, replicas)
        assert fast._free_mb == general._free_mb
    assert took_fast[0] >= 15  # the fast path decided blocks, the general one the rest


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_places_four_replicas_as_the_general_path_does(seed: int) -> None:
    # 12 environments: the fast path places all four; 3: replica 4 never finds an unused one and
    # the general path goes on from the fast path's three.
    inv, grid = grid_cluster(seed, tenants_per_cell=6, envs=12 if seed % 2 else 3)
    fast = ReplicaPlacer(inv, grid, seed=seed)
    general = ReplicaPlacer(inv, grid, seed=seed)
    general._fast = False
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    pick = np.random.default_rng(200 + seed)
    full = [0]
    place_fast = fast._place_fast

    def counted(*args: object) -> object:
        out = place_fast(*args)  # type: ignore[arg-type]
        full[0] += out is not None and len(out[0]) == (4 if seed % 2 else 3)  # type: ignore[index]
        return out

    fast._place_fast = counted  # type: ignore[method-assign]
    for i in range(150):
        writer = [None, *inv.server][int(pick.integers(len(inv.server) + 1))]
        if i % 29 == 0:
            server = inv.server[int(pick.integers(len(inv.server)))]
            for placer in (fast, general):
                placer.reset_server(server)
        try:
            a: object = fast.place(writer, 4, rng=rng_a)
        except Exception as exc:  # noqa: BLE001 - the refusal must be the same too
            a = repr(exc)
        try:
            b: object = general.place(writer, 4, rng=rng_b)
        except Exception as exc:  # noqa: BLE001
            b = repr(exc)
        assert a == b, (i, writer)
        assert fast._free_mb == general._free_mb, (i, writer, a)
    assert full[0] >= 10
