from __future__ import annotations

import dataclasses

from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.solve import solve
from tests.capacity.ras.helpers import violations


def test_rack_phase_lowers_rack_excess_and_keeps_msb_figures():
    region = generate_region(n_servers=400, n_msbs=4, n_hardware=2, servers_per_rack=20, seed=5)
    requests = generate_requests(region, n_reservations=6, fill=0.6, seed=5)
    with_phase = Problem(region, requests, Settings(time_limit_s=5, rack_spread_limit=0.05, rack_phase_share=1.0))
    plan = solve(with_phase)
    assert violations(with_phase, plan) == []
    rack = [p for p in plan.solver.phases if p.get("phase") == "racks"]
    assert rack and float(rack[0]["rack_excess_after"]) <= float(rack[0]["rack_excess_before"]) + 1e-9  # type: ignore[arg-type]
    without = solve(dataclasses.replace(with_phase, settings=dataclasses.replace(with_phase.settings,
                                                                                rack_phase_share=0.0)))  # fmt: skip
    for rid, fig in plan.reservations.items():
        assert fig["capacity_rru"] == without.reservations[rid]["capacity_rru"]
        assert fig["capacity_after_worst_msb_loss_rru"] == without.reservations[rid]["capacity_after_worst_msb_loss_rru"]
