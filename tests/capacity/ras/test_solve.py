from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placement_service.capacity.ras.domain import Method, Problem, Request, Settings
from placement_service.capacity.ras.solve import buffer_lower_bound, solve
from tests.capacity.ras.helpers import violations


def test_plan_meets_every_constraint_and_reports_its_bound(small_problem, small_plan):
    assert violations(small_problem, small_plan) == []
    assert small_plan.unmet == ()
    s = small_plan.solver
    assert s.lp_bound <= s.bound + 1e-6 <= s.objective + 1e-6
    assert 0.0 <= s.gap <= 0.02
    assert set(small_plan.assignment) == set(small_problem.region.server)


def test_harvestable_is_unassigned_or_shared_buffer_and_available(small_problem, small_plan):
    region = small_problem.region
    idx = region.index()
    for s in small_plan.harvestable:
        e = small_plan.assignment[s]
        assert e is None or e.startswith("shared-buffer:")
        assert region.available[idx[s]]
    n_free = sum(1 for s, e in small_plan.assignment.items() if e is None and region.available[idx[s]])
    assert len(small_plan.harvestable) >= n_free


@pytest.mark.parametrize("method", [Method.LP_ROUND, Method.GREEDY, Method.MIP])
def test_every_method_gives_a_valid_plan_on_the_same_model(small_problem, small_plan, method):
    problem = dataclasses.replace(small_problem, settings=dataclasses.replace(small_problem.settings, method=method))
    plan = solve(problem)
    assert violations(problem, plan) == []
    # the AUTO plan is the best of these methods (same model, same objective)
    assert small_plan.solver.objective <= plan.solver.objective + 1e-6


def test_resolve_with_nothing_changed_moves_nothing(small_problem, small_plan):
    again = solve(dataclasses.replace(small_problem, previous=small_plan.assignment))
    assert again.moves == ()
    assert violations(small_problem, again) == []


def test_resolve_after_failures_moves_few_and_idle_first(small_problem, small_plan):
    region = small_problem.region
    rng = np.random.default_rng(7)
    assigned = np.array([e is not None and not e.startswith("shared") for e in small_plan.assignment.values()])
    in_use = assigned & (rng.random(len(region)) < 0.8)
    avail = region.available.copy()
    victims = rng.choice(np.flatnonzero(assigned & avail), 3, replace=False)
    avail[victims] = False
    changed = dataclasses.replace(region, available=avail, in_use=in_use)
    problem = dataclasses.replace(small_problem, region=changed, previous=small_plan.assignment)
    plan = solve(problem)
    assert violations(problem, plan) == []
    for i in victims:
        assert plan.assignment[region.server[i]] is None
    assert len(plan.moves) <= 0.05 * len(region)
    assert sum(1 for m in plan.moves if m["in_use"]) == 0


def test_impossible_request_is_explained_not_raised(small_problem):
    huge = Request("too-big", capacity_rru=1e6, rru={"hw00": 1.0})
    ghost = Request("ghost", capacity_rru=5, rru={"gpu-x": 1.0})
    problem = dataclasses.replace(small_problem, requests=small_problem.requests + (huge, ghost))
    plan = solve(problem)
    reasons = {u.id: u for u in plan.unmet}
    assert reasons["too-big"].constraint == "capacity" and "short by" in reasons["too-big"].reason
    assert reasons["ghost"].constraint == "eligibility" and "gpu-x" in reasons["ghost"].reason
    assert violations(problem, plan) == []  # the others are still met
    assert not any(e in ("too-big", "ghost") for e in plan.assignment.values())


def test_competing_requests_get_a_shortfall_message_per_request(small_problem):
    region = small_problem.region
    n_hw0 = int(np.sum(region.available & (region.hardware == 0)))
    a = Request("a", capacity_rru=0.6 * n_hw0, rru={"hw00": 1.0})
    b = Request("b", capacity_rru=0.6 * n_hw0, rru={"hw00": 1.0})
    problem = Problem(region, (a, b), Settings(time_limit_s=3))
    plan = solve(problem)
    short = [u for u in plan.unmet if u.constraint in ("capacity", "shared-buffer")]
    assert short and all(u.shortfall > 0 for u in short)
    assert violations(problem, plan) == []


def test_buffer_lower_bound_is_below_the_plan(small_problem, small_plan):
    bb = buffer_lower_bound(small_problem)
    assert bb["perfect_spread_frac"] <= bb["frac_lb"] + 1e-9
    assert bb["frac_lb"] <= float(small_plan.summary["embedded_buffer_frac"]) + 1e-9



def test_losing_any_whole_msb_leaves_every_reservation_its_request(small_problem, small_plan):
    region = small_problem.region
    idx = region.index()
    for m in range(len(region.msb_names)):
        for req in small_problem.requests:
            left = sum(req.rru.get(region.hardware_names[region.hardware[idx[s]]], 0.0)
                       for s in small_plan.reservations[req.id]["servers"]  # type: ignore[union-attr]
                       if region.msb[idx[s]] != m)  # fmt: skip
            assert left >= req.capacity_rru - 1e-9, (req.id, region.msb_names[m])


def test_deleted_reservation_releases_its_servers_as_moves(small_problem, small_plan):
    gone = small_problem.requests[0].id
    problem = dataclasses.replace(small_problem, requests=small_problem.requests[1:], previous=small_plan.assignment)
    plan = solve(problem)
    assert violations(problem, plan) == []
    released = {m["server"] for m in plan.moves if m["from"] == gone}
    assert released == set(small_plan.reservations[gone]["servers"])  # type: ignore[arg-type]
    assert gone not in plan.assignment.values()
    # the others keep their servers
    assert all(m["from"] == gone for m in plan.moves)
