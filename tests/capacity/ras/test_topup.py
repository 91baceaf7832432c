"""Final repair: top-up, shortfall sharing (priority, then proportional), rack breaches, MSB-spanning racks."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

from placement_service.capacity.ras import check, topup
from placement_service.capacity.ras.domain import CAPACITY_TOLERANCE_RRU, Problem, Region, Request, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.solve import solve
from tests.capacity.ras.helpers import violations


def _grid(per_msb: int, n_msb: int, racks_per_msb: int = 1) -> Region:
    n = per_msb * n_msb
    msb = np.repeat(np.arange(n_msb), per_msb).astype(np.int32)
    rack = (msb * racks_per_msb + np.arange(n) % racks_per_msb).astype(np.int32)
    return Region(
        server=tuple(f"s{i:03d}" for i in range(n)), hardware=np.zeros(n, np.int32), datacenter=np.zeros(n, np.int32),
        msb=msb, rack=rack, available=np.ones(n, bool), in_use=np.zeros(n, bool), hardware_names=("hw",),
        datacenter_names=("dc",), msb_names=tuple(f"m{k}" for k in range(n_msb)),
        rack_names=tuple(f"r{k}" for k in range(n_msb * racks_per_msb)),
    )  # fmt: skip


def _after(region: Region, assignment: dict[str, str | None], rid: str) -> float:
    idx = region.index()
    m = [idx[s] for s, e in assignment.items() if e == rid]
    per = np.bincount(region.msb[m], minlength=len(region.msb_names)).astype(float)
    return float(per.sum() - per.max())


def test_top_up_fills_a_reservation_short_while_free_servers_would_help() -> None:
    region = _grid(4, 3)
    req = Request("a", capacity_rru=4, rru={"hw": 1.0})
    # short by one server's worth: 2 + 2 + 1 servers -> 3 after the worst MSB; 7 servers are free
    held = ["s000", "s001", "s004", "s005", "s008"]
    assignment: dict[str, str | None] = {s: ("a" if s in held else None) for s in region.server}
    out, notes = topup.finish(region, (req,), assignment, set())
    assert _after(region, out, "a") >= 4 - CAPACITY_TOLERANCE_RRU
    assert sum(1 for e in out.values() if e == "a") == 6  # one server added, in the MSB that had one
    assert any("top-up" in n for n in notes)


def test_checker_and_solver_share_one_tolerance() -> None:
    assert check.TOLERANCE == CAPACITY_TOLERANCE_RRU
    tree = ast.parse(inspect.getsource(check))  # the checker still imports nothing from the solver
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("placement_service") for m in mods)


def test_shortfall_is_shared_proportionally_within_a_priority() -> None:
    # 12 servers over 3 MSBs; two requests of 6 RRU each need 9 servers each: not both fit
    region = _grid(4, 3)
    reqs = (Request("a", 6, {"hw": 1.0}), Request("b", 6, {"hw": 1.0}))
    a = [f"s{i:03d}" for i in (0, 1, 2, 4, 5, 6, 8, 9, 10)]
    assignment: dict[str, str | None] = {s: ("a" if s in a else "b") for s in region.server}
    assert _after(region, assignment, "a") == 6 and _after(region, assignment, "b") == 2
    out, notes = topup.finish(region, reqs, assignment, set())
    fa, fb = _after(region, out, "a") / 6, _after(region, out, "b") / 6
    assert min(fa, fb) > 2 / 6  # the worse-off one got more
    assert abs(fa - fb) <= 1 / 6 + 1e-9  # and they end within one server's share of each other
    assert any("sharing" in n for n in notes)


def test_higher_priority_is_served_first() -> None:
    region = _grid(4, 3)
    reqs = (Request("low", 6, {"hw": 1.0}, priority=0), Request("high", 6, {"hw": 1.0}, priority=1))
    low = [f"s{i:03d}" for i in (0, 1, 2, 4, 5, 6, 8, 9, 10)]
    assignment: dict[str, str | None] = {s: ("low" if s in low else "high") for s in region.server}
    out, _ = topup.finish(region, reqs, assignment, set())
    assert _after(region, out, "high") >= 6 - 1e-9  # whole, at the expense of the lower priority
    assert _after(region, out, "low") < 6


def test_rack_breaches_are_reported_each() -> None:
    region = _grid(4, 3, racks_per_msb=1)  # one rack per MSB: a third of any spread reservation per rack
    req = Request("a", 4, {"hw": 1.0})
    held = ["s000", "s001", "s004", "s005", "s008", "s009"]
    assignment: dict[str, str | None] = {s: ("a" if s in held else None) for s in region.server}
    breaches = topup.rack_breaches(region, (req,), assignment, 0.1)
    assert len(breaches) == 1 and breaches[0].id == "a" and breaches[0].share == pytest.approx(0.5)


def test_racks_spanning_msbs_are_flagged() -> None:
    assert topup.racks_spanning_msbs(["r1", "r1", "r2", "r3"], ["m1", "m2", "m2", "m2"]) == {"r1": ["m1", "m2"]}
    region = _grid(2, 2)
    region = Region(**{**region.__dict__, "rack": np.zeros(4, np.int32)})  # one rack over both MSBs
    plan = solve(Problem(region, (Request("a", 1, {"hw": 1.0}),), Settings(time_limit_s=2, random_failure_buffer=0)))
    assert any("spans MSBs m0, m1" in w for w in plan.inventory_warnings)
    assert plan.to_json()["inventory_warnings"] == list(plan.inventory_warnings)


def test_overfull_region_shares_the_shortfall_and_stays_checkable() -> None:
    region = generate_region(n_servers=400, n_msbs=6, n_hardware=2, seed=5)
    requests = generate_requests(region, n_reservations=12, fill=1.3, seed=5)
    problem = Problem(region, requests, Settings(time_limit_s=3))
    plan = solve(problem)
    # requests no plan can meet (precheck: "asks ... even with every server") are left out by rule
    short = {u.id for u in plan.unmet if u.constraint == "capacity" and not u.reason.startswith("capacity: asks")}
    assert len(short) >= 3, "the instance must be overfull"
    assert violations(problem, plan) == []
    # proportional sharing: every short reservation (one priority) holds about the same fraction
    fractions = [float(plan.reservations[r]["capacity_after_worst_msb_loss_rru"])  # type: ignore[arg-type]
                 / float(plan.reservations[r]["requested_rru"]) for r in short]  # type: ignore[arg-type]  # fmt: skip
    assert min(fractions) > 0.8 and max(fractions) - min(fractions) < 0.05, fractions
    # no unassigned eligible server outside a short reservation's largest MSB is left unused
    for rid in short:
        assert ", 0 of them outside its largest MSB" in next(u.reason for u in plan.unmet if u.id == rid)


@pytest.mark.slow
def test_unseen_6000_server_region_has_no_short_reservation_with_helpful_free_servers() -> None:
    # reproduced: before the top-up 5 reservations were declared short by 0.05-0.15 RRU with 120+
    # eligible unassigned servers left (seed 0, 97% fill)
    region = generate_region(n_servers=6000, n_msbs=12, n_hardware=4, seed=0)
    requests = generate_requests(region, n_reservations=60, fill=0.97, seed=0)
    plan = solve(Problem(region, requests, Settings(time_limit_s=5)))
    helped = [u.reason for u in plan.unmet if u.constraint == "capacity" and ", 0 of them outside" not in u.reason]
    assert helped == []
