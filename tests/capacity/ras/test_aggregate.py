from __future__ import annotations

import dataclasses

import numpy as np

from placement_service.capacity.ras.aggregate import aggregate
from placement_service.capacity.ras.domain import Method
from placement_service.capacity.ras.solve import solve


def test_classes_partition_the_available_servers(small_problem):
    agg = aggregate(small_problem)
    region = small_problem.region
    avail = region.available.astype(bool)
    assert agg.class_size.sum() == avail.sum()
    assert np.all(agg.server_class[~avail] == -1)
    for c in range(agg.n_classes):
        members = np.flatnonzero(agg.server_class == c)
        assert len(members) == agg.class_size[c]
        assert set(region.hardware[members]) == {agg.class_hw[c]}
        assert set(region.msb[members]) == {agg.class_msb[c]}


def test_previous_counts_and_eligibility(small_problem, small_plan):
    problem = dataclasses.replace(small_problem, previous=small_plan.assignment)
    agg = aggregate(problem)
    held = sum(1 for s, e in small_plan.assignment.items() if e is not None)
    assert agg.pair_prev.sum() == held
    for p in range(agg.n_pairs):
        e = agg.pair_entity[p]
        if e < agg.n_reservations:
            hw = small_problem.region.hardware_names[agg.class_hw[agg.pair_class[p]]]
            assert small_problem.requests[e].rru.get(hw, 0) > 0
            assert agg.pair_value[p] == small_problem.requests[e].rru[hw]


def test_aggregation_is_exact_same_optimum_as_the_per_server_model(small_region, small_requests):
    from placement_service.capacity.ras.domain import Problem, Settings

    # a slice small enough for the per-server model to be solved to optimality quickly
    keep = np.flatnonzero(small_region.msb < 3)[:60]
    region = dataclasses.replace(
        small_region, server=tuple(small_region.server[i] for i in keep), hardware=small_region.hardware[keep],
        datacenter=small_region.datacenter[keep], msb=small_region.msb[keep], rack=small_region.rack[keep],
        available=np.ones(len(keep), bool), in_use=np.zeros(len(keep), bool), extra={},
    )  # fmt: skip
    from placement_service.capacity.ras.domain import Request

    reqs = (Request("a", 6, {"hw00": 1.0, "hw01": 1.5}), Request("b", 4, {"hw01": 1.0}))
    base = Settings(time_limit_s=20, method=Method.MIP, mip_rel_gap=0.0)
    agg_plan = solve(Problem(region, reqs, base))
    per_server = solve(Problem(region, reqs, dataclasses.replace(base, aggregate_symmetric=False)))
    assert agg_plan.solver.status == per_server.solver.status == "optimal"
    assert abs(agg_plan.solver.objective - per_server.solver.objective) < 1e-6
