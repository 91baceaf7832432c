"""Elastic servers of a RAS region in the durability simulator (issue 15): revocations are wipes,
and the revocation rate sets the pool's grid row. Small region, two months, seconds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_outages, generate_region, generate_requests
from placement_service.capacity.ras.scenario import ElasticLog, replay
from placement_service.capacity.ras.solve import solve
from placement_service.sim.datacenter import SimDatacenter, from_generated
from placement_service.sim.durability import DurabilityConfig, PresenceSchedule, simulate_durability
from placement_service.sim.elastic import elastic_datacenter
from placement_service.sim.policy import HdfsSystem, Placer, make_placer
from placement_service.sim.run import _tenant_rates, system_grids
from placement_service.traces.generate import generate_datacenter

DAYS = 60.0
HOUR_S = 3600.0


@pytest.fixture(scope="module")
def year():
    region = generate_region(n_servers=160, n_msbs=4, n_hardware=2, servers_per_rack=10, seed=5)
    requests = generate_requests(region, n_reservations=4, fill=0.6, seed=5)
    problem = Problem(region, requests, Settings(time_limit_s=5))
    plan = solve(problem)
    outages = generate_outages(region, days=DAYS, failures_per_server_year=3.0, msb_outages_per_year=0.0, seed=2)
    log = ElasticLog()
    stats = replay(problem, plan.assignment, outages, resolve_every_s=14 * 86400, log=log)
    primary = from_generated(generate_datacenter(60, seed=1, reimage_days=DAYS), "gen-60")
    return region, log, stats, primary


def test_the_replay_logs_the_movers_revocations_and_the_elastic_set(year):
    _, log, stats, _ = year
    mover = [r for r in log.revocations if r[3] == "mover"]
    assert stats.revoked > 0 and len(mover) == stats.revoked
    leaves = {(t, s, pool) for t, s, here, pool in log.changes if not here}
    assert all((t, s, pool) in leaves for t, s, pool, _ in log.revocations)  # a revocation leaves the set
    in_set = dict(log.initial)
    for t, server, here, pool in log.changes:  # the changes replay consistently from the initial set
        if here:  # joins, or a re-solve moves it to another pool
            assert in_set.get(server) != pool, f"{server} joined {pool} at {t} while in it"
            in_set[server] = pool
        else:
            assert in_set.pop(server) == pool, f"{server} left {pool} at {t} while not in it"
    # a repaired reservation server comes back lent out (unassigned)
    assert any(here and pool == "elastic:unassigned" for _, _, here, pool in log.changes)


def _run(dc: SimDatacenter, presence: PresenceSchedule | None, blocks: int = 6000):
    grid = system_grids(dc, dc.cpu, int(7 * 86400 / dc.series.interval_s), 0)[HdfsSystem.H]
    from placement_service.sim.run import year_of_reimages

    schedule = year_of_reimages(dc, DAYS, np.random.default_rng(0))
    assert schedule.how == "as-is"
    wipes: list[tuple[float, np.ndarray]] = []
    placers: list[Placer] = []

    def factory() -> Placer:
        placers.append(make_placer(HdfsSystem.H, dc, grid, seed=1, block_size_mb=256.0))
        return placers[-1]

    simulate_durability(
        dc, factory, HdfsSystem.H, 3, schedule, DurabilityConfig(days=DAYS, blocks=blocks),
        create_rng=np.random.default_rng(1), place_rng=np.random.default_rng(2), repair_rng=np.random.default_rng(3),
        on_wipe=lambda t, b, s, lost: wipes.append((t, s)), presence=presence,
    )  # fmt: skip
    return wipes, placers[0], grid


def test_a_revocation_wipes_the_elastic_servers_replicas_and_it_takes_none_while_away(year):
    region, log, _, primary = year
    primary = dataclasses.replace(primary, reimages=None)  # only revocations wipe here
    # a server lent out from the start, revoked once after a week and not lent out again
    leaves = [(t, s) for t, s, here, _ in log.changes if not here]
    rejoin = {s for _, s, here, _ in log.changes if here}
    revoked = {s: t for t, s, _, _ in log.revocations}
    picks = [(t, s) for t, s in leaves if s in log.initial and s not in rejoin and t > 7 * 86400 and revoked.get(s) == t]
    assert picks, "the replay should revoke a server lent out from the start"
    t_rev, server = picks[0]
    dc, presence = elastic_datacenter(primary, region, log, days=DAYS)
    idx = dc.inventory.index()[server]
    wipes, placer, _ = _run(dc, presence)
    step_end = np.ceil(t_rev / HOUR_S) * HOUR_S
    hit = [(t, int((s == idx).sum())) for t, s in wipes if (s == idx).any()]
    assert hit and hit[0][0] == pytest.approx(step_end) and hit[0][1] > 0, hit
    # away (in a reservation) from the revocation to the end: no replica placed on it again
    fresh = make_placer(HdfsSystem.H, dc, system_grids(dc, dc.cpu, 7 * 288, 0)[HdfsSystem.H], seed=1, block_size_mb=256.0)
    assert placer.free_mb(server) == fresh.free_mb(server)

    # without the revocation (same elastic set, no reimage event), the server keeps its replicas
    quiet = ElasticLog(log.initial, [r for r in log.revocations if r[1] != server], log.changes)
    dc2, presence2 = elastic_datacenter(primary, region, quiet, days=DAYS)
    wipes2, placer2, _ = _run(dc2, presence2)
    assert not any((s == idx).any() for _, s in wipes2)
    assert placer2.free_mb(server) < fresh.free_mb(server)


def test_elastic_pools_enter_the_grid_in_the_row_of_their_revocation_rate(year):
    region, log, _, primary = year
    dc, _ = elastic_datacenter(primary, region, log, days=DAYS)
    grid = system_grids(dc, dc.cpu, 7 * 288, 0)[HdfsSystem.H]
    tenant = dict(zip(dc.inventory.server, dc.inventory.tenant, strict=True))
    pools = sorted({t for t in dc.inventory.tenant if t.startswith("elastic:")})
    month_s = 30 * 86400.0
    n_servers = {p: sum(1 for t in dc.inventory.tenant if t == p) for p in pools}
    # the grid's history is the first month: revocations per server of the pool per month
    rate = {p: sum(1 for t, s, *_ in log.revocations if t < month_s and tenant[s] == p) / n_servers[p] for p in pools}
    top = max(pools, key=rate.get)
    used = _tenant_rates(dc)  # what the grid is built from
    assert all(used[p] == pytest.approx(rate[p]) for p in pools)
    assert rate[top] > 0 and grid[top].reimage_row == 2  # revoked often: the frequent row
    for t, r in used.items():  # rows follow the rates: pools and primary tenants on one scale
        if r > rate[top] + 1e-9:
            assert grid[t].reimage_row == 2
    # the same pools without revocations: never reimaged, below every tenant that was
    calm, _ = elastic_datacenter(primary, region, ElasticLog(log.initial, [], log.changes), days=DAYS)
    calm_grid = system_grids(calm, calm.cpu, 7 * 288, 0)[HdfsSystem.H]
    calm_rates = _tenant_rates(calm)
    assert calm_grid[top].reimage_row < 2
    lowest_reimaged = min(calm_grid[t].reimage_row for t, r in calm_rates.items() if r > 0)
    assert all(calm_grid[p].reimage_row <= lowest_reimaged for p in pools)
