"""Online Mover replay driven by real LANL outages (fixture excerpt, see tests/fixtures/capacity)."""

from __future__ import annotations

import csv
import pathlib

from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.scenario import Outage, replay
from placement_service.capacity.ras.solve import solve

FIXTURE = pathlib.Path(__file__).parents[2] / "fixtures" / "capacity" / "lanl_system18_outages_excerpt.csv"


def test_lanl_outages_are_covered_by_the_shared_buffer():
    region = generate_region(n_servers=1024, n_msbs=8, n_hardware=3, seed=11)
    requests = generate_requests(region, n_reservations=10, fill=0.6, seed=11)
    problem = Problem(region, requests, Settings(time_limit_s=5))
    plan = solve(problem)
    with FIXTURE.open() as f:
        outages = [Outage(region.server[int(r["node"])], float(r["start"]), float(r["end"])) for r in csv.DictReader(f)]
    stats = replay(problem, plan.assignment, outages, resolve_every_s=30 * 86400)
    assert stats.outages > 50
    assert stats.hit_reservation > 0
    assert stats.not_replaced == 0
    assert stats.short_after_outage == 0
    assert stats.replaced_from_buffer + stats.replaced_from_unassigned == stats.hit_reservation
    assert stats.resolves >= 1
    assert stats.revoked >= stats.hit_reservation
