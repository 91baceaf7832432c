"""Tests of ``ReplicaPlacer``'s co-busy fast path (``core/placement_cobusy_fast.py``): new blocks under
co-busy estimates must get exactly the general path's choices (``_pick_by_cobusy``), draw for draw,
whatever the estimates, targets, penalties and pool changes."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.cobusy import CobusyModel
from placement_service.core.placement import ReplicaPlacer
from tests.core.test_placement_fast import BLOCK_MB, grid_cluster


def _model(names: list[str], seed: int, levels: int) -> CobusyModel:
    """Random estimates over ``names`` with pair values from ``levels`` steps (many exact ties), in a
    shuffled tenant order with one tenant left out (an aligned model: ``rows`` and a fill value)."""
    rng = np.random.default_rng(seed)
    order = [names[i] for i in rng.permutation(len(names))][1:]
    n = len(order)
    m1 = rng.integers(1, levels + 1, n) * 1e-3
    m2 = rng.integers(1, levels + 1, (n, n)) * 1e-5
    m2 = np.minimum(m2, m2.T)
    return CobusyModel(tuple(order), m1, m2, quiet_turnover=0.0)


@pytest.mark.parametrize("seed", range(6))
def test_cobusy_fast_path_chooses_what_the_general_path_chooses(seed: int) -> None:
    # Cells of 40 tenants with two pair values (walks past the kept heads of 16), small cells in 4
    # environments (rules that bind), targets that some candidates meet (the draw among them) and
    # some none (the walk).
    inv, grid = grid_cluster(seed, tenants_per_cell=40 if seed % 2 else 6, envs=4 if seed % 3 else 12)
    names = sorted(set(inv.tenant))
    rng = np.random.default_rng(seed)
    kw = {
        "cobusy": _model(names, seed, levels=2 if seed % 2 else 50),
        "cobusy_new_target": [0.0, 3e-6, 1e-5][seed % 3],
        "cobusy_penalty": {t: float(rng.choice([0.0, 0.5])) for t in names} if seed % 2 else None,
        "reimage_choices": 1 + seed % 2,
        "repair_choices": 1 + (seed // 2) % 2,
    }
    fast = ReplicaPlacer(inv, grid, seed=seed, **kw)  # type: ignore[arg-type]
    general = ReplicaPlacer(inv, grid, seed=seed, **kw)  # type: ignore[arg-type]
    general._fast_cobusy = False  # the general path only
    assert fast._fast_cobusy
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    pick = np.random.default_rng(100 + seed)
    took_fast = [0]
    place_fast = fast._place_fast_cobusy

    def counted(*args: object) -> object:
        out = place_fast(*args)  # type: ignore[arg-type]
        took_fast[0] += out is not None and len(out[0]) > 1  # type: ignore[index]
        return out

    fast._place_fast_cobusy = counted  # type: ignore[method-assign]
    for i in range(600):  # until the cluster is full: fast, then general, then refusals
        writer = [None, "no-such-server", *inv.server][int(pick.integers(len(inv.server) + 2))]
        replicas = int(pick.integers(1, 5))
        target = [None, None, 0.0, 2e-6][int(pick.integers(4))]
        if i % 37 == 0:  # space back and busy flags move, as reports would
            server = inv.server[int(pick.integers(len(inv.server)))]
            for placer in (fast, general):
                placer.reset_server(server)
                placer.set_busy(inv.server[i % len(inv.server)], bool(i % 2))
        if i == 300:  # new estimates
            for placer in (fast, general):
                placer.set_cobusy(_model(names, seed + 1, levels=4))
        try:
            a: object = fast.place(writer, replicas, rng=rng_a, risk_target=target)
        except Exception as exc:  # noqa: BLE001 - the refusal must be the same too
            a = repr(exc)
        try:
            b: object = general.place(writer, replicas, rng=rng_b, risk_target=target)
        except Exception as exc:  # noqa: BLE001
            b = repr(exc)
        assert a == b, (i, writer, replicas, target)
        assert fast._free_mb == general._free_mb
    assert took_fast[0] >= 25  # the fast path decided blocks, the general one the rest
    assert BLOCK_MB == fast.config.block_size_mb


def test_no_fast_path_with_the_spread_bound_or_busy_hours() -> None:
    inv, grid = grid_cluster(0)
    model = _model(sorted(set(inv.tenant)), 0, levels=5)
    assert not ReplicaPlacer(inv, grid, cobusy=model, cobusy_spread=2.0)._fast_cobusy
    assert not ReplicaPlacer(inv, grid, busy_hours={})._fast_cobusy
    assert not ReplicaPlacer(inv, grid)._fast_cobusy  # the grid's own fast path instead
