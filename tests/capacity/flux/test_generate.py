"""Synthetic instances: supply covers demand at every timestep; --refresh K cuts K regions by 30% from t1."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.capacity.flux.generate import call_graph, generate


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_total_supply_covers_total_demand_at_every_timestep(seed):
    inst, _ = generate(
        n_regions=6, n_services=30, n_products=5, n_hardware=3, n_timesteps=5, seed=seed, refresh=2
    )
    demand_units = inst.alpha @ (1.0 + inst.tau) + inst.gamma  # (S, T)
    best_ratio = inst.ratio.max(axis=1)  # the most value per RRU a service can get
    demand_rru = (demand_units / best_ratio[:, None]).sum(axis=0)
    assert np.all(inst.supply.sum(axis=(0, 1)) >= demand_rru)


def test_refresh_cuts_k_regions_by_thirty_percent_from_t1():
    inst, _ = generate(
        n_regions=6, n_services=30, n_products=5, n_hardware=3, n_timesteps=4, seed=4, refresh=3
    )
    cut = inst.supply[:, :, 1].sum(axis=1) / inst.supply[:, :, 0].sum(axis=1)
    assert int(np.sum(np.isclose(cut, 0.7))) == 3
    assert np.all(cut[~np.isclose(cut, 0.7)] >= 1.0 - 1e-12)


def test_call_graph_shares_back_ends_between_products():
    calls = call_graph(40, 6, np.random.default_rng(0))
    n_front = 40 // 6
    shared = ((calls[:, n_front:] > 0).sum(axis=0) >= 2).sum()
    assert shared >= 10  # back ends serve several products
    # every product reaches the deepest layer (the last services): paths of depth > 2
    assert np.all((calls[:, -5:] > 0).any(axis=1))


def test_same_seed_same_instance():
    a, _ = generate(n_regions=3, n_services=10, n_products=3, n_hardware=2, n_timesteps=3, seed=9)
    b, _ = generate(n_regions=3, n_services=10, n_products=3, n_hardware=2, n_timesteps=3, seed=9)
    assert np.array_equal(a.supply, b.supply) and np.array_equal(a.alpha, b.alpha)
