"""The aggregated model: completed points are feasible, the cut is valid, costs are exact."""

from __future__ import annotations

import itertools

import numpy as np

from placement_service.capacity.ras import ras_model
from placement_service.capacity.ras.aggregate import aggregate
from placement_service.capacity.ras.domain import Problem, Region, Request, Settings
from placement_service.capacity.ras.repair import greedy


def _rows_ok(model, x):  # type: ignore[no-untyped-def]
    act = model.matrix @ x
    return bool(np.all(act >= model.row_lower - 1e-6) and np.all(act <= model.row_upper + 1e-6))


def test_completed_points_satisfy_every_row(small_problem):
    agg = aggregate(small_problem)
    model = ras_model.build(agg, small_problem.requests, small_problem.settings)
    rng = np.random.default_rng(0)
    for _ in range(5):
        y = greedy(agg, small_problem.settings)
        y = np.minimum(y + rng.integers(0, 2, len(y)), agg.class_size[agg.pair_class])
        # keep class sizes: drop extra where a class overflows
        used = np.bincount(agg.pair_class, weights=y, minlength=agg.n_classes)
        for c in np.flatnonzero(used > agg.class_size):
            for p in np.flatnonzero(agg.pair_class == c):
                cut = min(y[p], int(used[c] - agg.class_size[c]))
                y[p] -= cut
                used[c] -= cut
        x = ras_model.complete(model, y)
        assert _rows_ok(model, x)
        assert np.all(x >= model.col_lower - 1e-9) and np.all(x <= model.col_upper + 1e-9)


def _tiny() -> Problem:
    n = 6
    region = Region(
        server=tuple(f"s{i}" for i in range(n)), hardware=np.array([0, 1] * 3, dtype=np.int32),
        datacenter=np.zeros(n, dtype=np.int32), msb=np.array([i % 3 for i in range(n)], dtype=np.int32),
        rack=np.arange(n, dtype=np.int32), available=np.ones(n, bool), in_use=np.zeros(n, bool),
        hardware_names=("a", "b"), datacenter_names=("d",), msb_names=("m0", "m1", "m2"),
        rack_names=tuple(f"r{i}" for i in range(n)),
    )  # fmt: skip
    reqs = (Request("x", 2.0, {"a": 1.0, "b": 1.5}), Request("y", 1.0, {"b": 1.0}))
    return Problem(region, reqs, Settings(random_failure_buffer=0.0, time_limit_s=10))


def test_mip_optimum_equals_brute_force_and_cut_keeps_it():
    problem = _tiny()
    agg = aggregate(problem)
    model = ras_model.build(agg, problem.requests, problem.settings)
    res = ras_model.solve(model, relax=False, time_limit_s=10, settings=problem.settings)
    best = np.inf
    ranges = [range(int(agg.class_size[c]) + 1) for c in agg.pair_class]
    for combo in itertools.product(*ranges):
        y = np.array(combo)
        if np.any(np.bincount(agg.pair_class, weights=y, minlength=agg.n_classes) > agg.class_size):
            continue
        x = ras_model.complete(model, y)
        if x[model.index.s0 : model.index.s0 + agg.n_entities].sum() > 1e-9:
            continue
        best = min(best, ras_model.objective(model, x))
    assert abs(res.objective - best) < 1e-6
    lp = ras_model.solve(model, relax=True, time_limit_s=10, settings=problem.settings)
    assert lp.objective <= best + 1e-9


def test_move_cost_counts_idle_departures_first():
    problem = _tiny()
    region = problem.region
    in_use = np.zeros(len(region), bool)
    in_use[[0]] = True  # one of x's previous servers runs containers
    prev = {"s0": "x", "s2": "x", "s4": "x"}
    from dataclasses import replace

    problem = replace(problem, region=replace(region, in_use=in_use), previous=prev)
    agg = aggregate(problem)
    model = ras_model.build(agg, problem.requests, problem.settings)
    y = agg.pair_prev.copy()
    p = int(np.flatnonzero((agg.pair_entity == 0) & (agg.pair_prev == 4))[0]) if (agg.pair_prev == 4).any() else None
    if p is None:  # previous servers fall into several classes (hardware a, MSBs 0..2)
        p = int(np.flatnonzero((agg.pair_entity == 0) & (agg.pair_prev > 0))[0])
    base = ras_model.objective(model, ras_model.complete(model, y))
    k = int(agg.pair_prev_idle[p])
    y[p] -= agg.pair_prev[p]
    cost = ras_model.objective(model, ras_model.complete(model, y)) - base
    expected_moves = k * 1.0 + (int(agg.pair_prev[p]) - k) * 10.0
    # the difference also holds allocation / buffer / shortfall changes; the move part is exact
    x = ras_model.complete(model, y)
    ix = model.index
    moves = float(model.cost[ix.di0 : ix.du0 + len(ix.d_pairs)] @ x[ix.di0 : ix.du0 + len(ix.d_pairs)])
    assert abs(moves - expected_moves) < 1e-9
    assert cost > 0


def test_msb_spread_term_prices_each_rru_above_the_limit(small_problem):
    from dataclasses import replace

    agg = aggregate(small_problem)
    plain = ras_model.build(agg, small_problem.requests, small_problem.settings)
    st = replace(small_problem.settings, msb_spread_limit=0.1, msb_spread_cost=3.0)
    spread = ras_model.build(agg, small_problem.requests, st)
    y = greedy(agg, small_problem.settings)
    x_plain, x_spread = ras_model.complete(plain, y), ras_model.complete(spread, y)
    assert _rows_ok(spread, x_spread)
    expected = 0.0
    for r, req in enumerate(small_problem.requests):
        m = agg.pair_entity == r
        per = np.bincount(agg.class_msb[agg.pair_class[m]], weights=agg.pair_value[m] * y[m], minlength=agg.n_msb)
        expected += 3.0 / req.mean_rru() * np.maximum(0.0, per[per > 0] - 0.1 * req.capacity_rru).sum()
    assert expected > 0
    diff = ras_model.objective(spread, x_spread) - ras_model.objective(plain, x_plain)
    assert abs(diff - expected) < 1e-6
