from __future__ import annotations

import dataclasses

import numpy as np

from placement_service.capacity.ras.aggregate import aggregate
from placement_service.capacity.ras.disaggregate import disaggregate
from placement_service.capacity.ras.repair import greedy


def test_counts_are_honoured_and_previous_in_use_servers_stay(small_problem, small_plan):
    region = small_problem.region
    rng = np.random.default_rng(1)
    in_use = rng.random(len(region)) < 0.5
    problem = dataclasses.replace(small_problem, region=dataclasses.replace(region, in_use=in_use),
                                  previous=small_plan.assignment)  # fmt: skip
    agg = aggregate(problem)
    y = agg.pair_prev.copy()
    # every entity gives up one server of its first class that has more than one
    for e in range(agg.n_entities):
        ps = np.flatnonzero((agg.pair_entity == e) & (y > 1))
        if len(ps):
            y[ps[0]] -= 1
    assign = disaggregate(problem.region, agg, y)
    for p in range(agg.n_pairs):
        got = np.sum((assign == agg.pair_entity[p]) & (agg.server_class == agg.pair_class[p]))
        assert got == y[p]
    # nobody gains a server it did not have, and the one that left is idle whenever an idle one existed
    names = agg.entity_names
    for i, s in enumerate(region.server):
        if assign[i] >= 0:
            assert small_plan.assignment[s] == names[assign[i]]
    for p in range(agg.n_pairs):
        if agg.pair_prev[p] > y[p] and agg.pair_prev_idle[p] > 0:
            e, c = agg.pair_entity[p], agg.pair_class[p]
            left = np.flatnonzero((agg.prev_entity == e) & (agg.server_class == c) & (assign != e))
            assert not in_use[left].any()


def test_new_servers_spread_over_racks():
    from placement_service.capacity.ras.domain import Problem, Region, Request, Settings

    n = 80  # 2 MSBs x 4 racks x 10 servers, one hardware type
    region = Region(
        server=tuple(f"s{i}" for i in range(n)), hardware=np.zeros(n, np.int32), datacenter=np.zeros(n, np.int32),
        msb=(np.arange(n) // 40).astype(np.int32), rack=(np.arange(n) // 10).astype(np.int32),
        available=np.ones(n, bool), in_use=np.zeros(n, bool), hardware_names=("h",), datacenter_names=("d",),
        msb_names=("m0", "m1"), rack_names=tuple(f"r{k}" for k in range(8)),
    )  # fmt: skip
    problem = Problem(region, (Request("a", 14, {"h": 1.0}),), Settings(random_failure_buffer=0.0))
    agg = aggregate(problem)
    y = greedy(agg, problem.settings)
    assign = disaggregate(region, agg, y)
    held = np.bincount(region.rack[assign == 0], minlength=8)
    assert held.sum() == 28
    for m in range(2):
        racks = held[4 * m : 4 * m + 4]
        assert racks.max() - racks.min() <= 1  # round robin over the least-used racks
