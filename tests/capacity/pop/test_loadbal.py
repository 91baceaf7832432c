"""Query load balancing: the exact MILP and its POP keep every constraint; POP's groups are balanced."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.capacity.pop.loadbal import (
    LoadProblem,
    check,
    generate_loads,
    initial_placement,
    repair,
    solve_exact,
    solve_pop,
    split_parts,
)


@pytest.fixture(scope="module")
def problem() -> LoadProblem:
    rng = np.random.default_rng(1)
    n_sh, n_srv = 96, 8
    return LoadProblem(generate_loads(n_sh, rng, rng.permutation(n_sh)), np.ones(n_sh),
                       initial_placement(n_srv, n_sh), max_memory=16)  # fmt: skip


def test_generator_follows_the_zipf_like_shape() -> None:
    rng = np.random.default_rng(0)
    order = rng.permutation(50)
    load = generate_loads(50, rng, order)
    assert load[order[0]] == 1e6 and np.all(np.diff(load[order]) <= 0) and load.min() > 1e6 / 50


def test_pop_groups_carry_their_share_within_half_the_band_and_every_shard_is_fully_placed(
    problem: LoadProblem,
) -> None:
    parts = split_parts(problem, 4, seed=3)
    totals = np.array([float(np.sum(problem.load[p.shards] * p.share)) for p in parts])
    target = problem.load.sum() / 4
    assert np.all(np.abs(totals - target) <= problem.tolerance / 2 * target + 1e-6)
    share = np.zeros(len(problem.load))
    for p in parts:
        np.add.at(share, p.shards, p.share)
        assert len(p.servers) == 2
    assert share == pytest.approx(np.ones(len(problem.load)))
    # shards stay with the group of the server holding them, except the few split at group edges
    held_home = sum(int(problem.previous[np.ix_(p.servers, p.shards)].any(axis=0).sum()) for p in parts)
    assert held_home >= len(problem.load) - 4


def test_exact_and_pop_plans_meet_every_constraint_and_pop_is_bounded_by_the_exact_bound(problem: LoadProblem) -> None:
    ex = solve_exact(problem, time_limit_s=30, mip_rel_gap=0.05)
    assert ex.moves >= 0 and check(problem, ex) == []
    po = solve_pop(problem, 4, seed=0, time_limit_s=30)
    assert po.status == "feasible" and check(problem, po) == []
    assert po.moves >= ex.bound - 1e-6 and len(po.parts_wall_s) == 4
    # an unbalanced plan is caught by the checker: server 1's queries moved onto server 0
    shifted = po.r.copy()
    shifted[0], shifted[1] = shifted[0] + shifted[1], 0
    assert any("band" in v for v in check(problem, type(po)(shifted, po.x | True, "x", 0, 0.0, 0.0)))


def test_repair_drops_copies_the_whole_cluster_does_not_need(problem: LoadProblem) -> None:
    po = solve_pop(problem, 4, seed=0, time_limit_s=30)
    # the same plan with three redundant copies added (no load on them): what a group that pulled a
    # shard in looks like once another group could have kept it
    x = po.x.copy()
    added = 0
    for i, j in zip(*np.nonzero(~x & ~problem.previous), strict=False):
        if x[i].sum() < problem.max_memory and added < 3:
            x[i, j] = True
            added += 1
    padded = type(po)(po.r, x, po.status, int(np.sum(x & ~problem.previous)), po.bound, po.wall_s)
    assert check(problem, padded) == [] and padded.moves == po.moves + 3
    fixed = repair(problem, padded)
    assert check(problem, fixed) == [] and fixed.moves <= po.moves
    again = repair(problem, po)
    assert check(problem, again) == [] and again.moves <= po.moves


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_repair_brings_pop_back_to_the_exact_moves_on_a_second_round(seed: int) -> None:
    """Round 2 of a small instance (96 shards, 8 servers, from the exact's round-1 placement): POP k = 4
    alone moves more than the exact optimum, its global repair moves as few."""
    rng = np.random.default_rng(seed)
    n_sh, n_srv = 96, 8
    order = rng.permutation(n_sh)
    first = LoadProblem(generate_loads(n_sh, rng, order), np.ones(n_sh), initial_placement(n_srv, n_sh))
    p = LoadProblem(generate_loads(n_sh, rng, order), np.ones(n_sh), solve_exact(first, 60, 0.0).x)
    ex = solve_exact(p, 60, 0.0)
    assert ex.status == "Optimal"
    po = solve_pop(p, 4, seed=seed, repair_plan=False)
    assert po.moves > ex.moves  # the loss from partitioning this test is about
    fixed = repair(p, po)
    assert check(p, fixed) == [] and fixed.moves == ex.moves and fixed.repair_dropped == po.moves - ex.moves
