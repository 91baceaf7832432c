from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.headroom_policy import choose_proportional
from placement_service.core.selection import SelectionConfig
from placement_service.core.types import ClassTable
from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.policy import ClassRouter, fit_classes
from placement_service.sim.schedule import (
    ScheduleConfig,
    YarnSystem,
    _choose_fill,
    simulate_schedule,
)
from placement_service.sim.streams import Streams
from placement_service.sim.workload import Arrivals, Workload, WorkloadConfig, build_workload
from tests.sim.conftest import chain_job, make_dc


def test_server_choices_respect_room_and_candidates() -> None:
    rng = np.random.default_rng(0)
    free = np.array([3, 0, 2, 5, 1])
    servers = np.array([0, 2, 3])
    for choose in (_choose_fill, choose_proportional):
        got = choose(free, servers, 7, rng)
        assert got.shape == (7,)
        counts = np.bincount(got, minlength=5)
        assert np.all(counts <= free) and set(np.unique(got)) <= {0, 2, 3}
    # fill packs whole servers: at most one server is left partly used
    got = _choose_fill(free, servers, 4, rng)
    counts = np.bincount(got, minlength=5)[servers]
    assert sum(0 < c < f for c, f in zip(counts, free[servers], strict=True)) <= 1


def _one_job(dc: SimDatacenter, tasks: list[int], *, arrival_s: float = 0.0) -> tuple[object, Arrivals]:
    cfg = WorkloadConfig(container_scale=1.0, instance_sigma=0.0, task_sigma=0.0, vertex_sigma=0.0, task_s=600.0,
                         length_scale=1.0)
    wl = build_workload([chain_job("q", tasks)], cfg, np.random.default_rng(0), total_cores=1.0)
    return wl, Arrivals(np.array([arrival_s]), np.array([0]), np.array([1.0]))


def test_job_time_is_its_critical_path_when_nothing_competes() -> None:
    dc = make_dc(np.full((2, 400), 0.1), servers_per_tenant=4)  # 8 servers x 12 cores
    wl, arr = _one_job(dc, [20, 10, 5])
    cfg = ScheduleConfig(days=0.1, history_days=0.0, step_s=60.0)
    s = Streams(0)
    res = simulate_schedule(dc, dc.cpu, wl, arr, YarnSystem.PT, cfg, place_rng=s.get("p"), task_rng=s.get("t"))
    # three vertices of 600 s each, each detected at most one step late
    assert 1800.0 <= res.avg_job_time_s <= 1800.0 + 3 * 60.0
    assert res.killed_tasks == 0 and res.unfinished_jobs == 0


def test_primary_growth_kills_in_pt_not_in_stock() -> None:
    cpu = np.full((1, 400), 0.0)
    cpu[0, 1:] = 0.5  # the primary takes half the cores after 5 minutes
    dc = make_dc(cpu, servers_per_tenant=2)  # 2 servers x 12 cores, reserve 4
    wl, arr = _one_job(dc, [16])  # fills both servers' 8 harvestable cores
    cfg = ScheduleConfig(days=0.2, history_days=0.0, step_s=60.0)
    out = {}
    for system in (YarnSystem.PT, YarnSystem.STOCK):
        s = Streams(0)
        out[system] = simulate_schedule(dc, dc.cpu, wl, arr, system, cfg, place_rng=s.get("p"), task_rng=s.get("t"))
    pt, stock = out[YarnSystem.PT], out[YarnSystem.STOCK]
    # capacity drops from 8 to 2 per server: 12 of 16 containers die, re-run later
    assert pt.killed_tasks == 12
    assert pt.wasted_core_s == pytest.approx(12 * 300.0)
    assert stock.killed_tasks == 0 and stock.overcommit_core_s > 0
    assert pt.avg_job_time_s > stock.avg_job_time_s
    assert pt.utilization == pytest.approx(stock.utilization)


def test_class_router_reports_current_use_and_servers(tiny_dc: SimDatacenter) -> None:
    table, _ = fit_classes(tiny_dc, tiny_dc.cpu, 288 * 2, seed=0)
    router = ClassRouter(table, tiny_dc, SelectionConfig(reserve_frac=1 / 3))
    n = tiny_dc.n_servers
    primary = np.full(n, 3.0)
    used = np.zeros(n)
    used[router.servers_of(np.array([0]))] = 3.0
    router.update(primary, used)
    cur = router.selector.current()
    assert cur[router.ids[0]] == pytest.approx(0.5)  # (3 + 3) / 12
    assert all(cur[c] == pytest.approx(0.25) for c in router.ids[1:])
    both = router.servers_of(np.array([0, 1]))
    assert set(both) == set(router.servers_of(np.array([0]))) | set(router.servers_of(np.array([1])))
    # every server belongs to exactly one class
    assert sorted(np.concatenate([router.servers_of(np.array([c])) for c in range(len(router.ids))])) == list(range(n))


HISTORY_SLOTS = int(3 * 86400 / 300)


def _daily_tenants_setup() -> tuple[SimDatacenter, ScheduleConfig, Workload, Arrivals, ClassTable, SelectionConfig,
                                    Streams]:
    """Eight tenants (flat and daily), two days of chain jobs after three days of history."""
    from placement_service.sim.workload import poisson_arrivals
    from tests.sim.conftest import daily_cpu

    dc = make_dc(daily_cpu(8, 6.0, seed=3), servers_per_tenant=6)
    cfg = ScheduleConfig(days=2.0, history_days=3.0, step_s=120.0,
                         workload=WorkloadConfig(offered_core_frac=0.08, task_s=60.0, length_scale=10.0))
    jobs = [chain_job(f"q{i}", [5 + 7 * i, 3 + i, 2]) for i in range(8)]
    s = Streams(5)
    wl = build_workload(jobs, cfg.workload, s.get("len"), total_cores=float(dc.inventory.cores.sum()))
    arr = poisson_arrivals(wl, cfg.days * 86400, s.get("arr"), s.get("jobs"))
    table, _ = fit_classes(dc, dc.cpu, HISTORY_SLOTS, seed=0)
    sel = SelectionConfig(short_max_s=wl.short_max_s, long_min_s=wl.long_min_s, reserve_frac=cfg.reserve_frac)
    return dc, cfg, wl, arr, table, sel, s


def test_yarn_h_kills_fewer_tasks_than_pt_on_mixed_tenants() -> None:
    dc, cfg, wl, arr, table, sel, s = _daily_tenants_setup()
    pt = simulate_schedule(dc, dc.cpu, wl, arr, YarnSystem.PT, cfg, place_rng=s.fresh("p"), task_rng=s.fresh("t"))
    h = simulate_schedule(dc, dc.cpu, wl, arr, YarnSystem.H, cfg, place_rng=s.fresh("p"), task_rng=s.fresh("t"),
                          router=ClassRouter(table, dc, sel), select_rng=s.fresh("sel"))
    assert pt.jobs == h.jobs > 100
    assert pt.killed_tasks > 0
    assert h.killed_tasks < pt.killed_tasks
    assert h.unfinished_jobs == 0


def test_forecast_systems_kill_fewer_tasks_than_yarn_h_on_daily_tenants() -> None:
    from placement_service.core.forecast import fit_headroom_forecast
    from placement_service.sim.policy import history_series

    dc, cfg, wl, arr, table, sel, s = _daily_tenants_setup()
    forecast = fit_headroom_forecast(history_series(dc, dc.cpu, HISTORY_SLOTS))
    out = {}
    for system in (YarnSystem.H, YarnSystem.PT_FORECAST, YarnSystem.H_FORECAST):
        router = ClassRouter(table, dc, sel) if system is not YarnSystem.PT_FORECAST else None
        out[system] = simulate_schedule(dc, dc.cpu, wl, arr, system, cfg, place_rng=s.fresh("p"),
                                        task_rng=s.fresh("t"), router=router, select_rng=s.fresh("sel"),
                                        forecast=forecast)
    h = out[YarnSystem.H]
    assert h.killed_tasks > 0
    for system in (YarnSystem.PT_FORECAST, YarnSystem.H_FORECAST):
        assert out[system].unfinished_jobs == 0
        assert out[system].killed_tasks < h.killed_tasks / 2
        assert out[system].avg_job_time_s <= h.avg_job_time_s
    with pytest.raises(ValueError, match="HeadroomForecast"):
        simulate_schedule(dc, dc.cpu, wl, arr, YarnSystem.PT_FORECAST, cfg, place_rng=s.fresh("p"),
                          task_rng=s.fresh("t"))


def test_a_sweep_in_worker_processes_gives_the_same_records() -> None:
    """``run_schedule(workers=2)`` forks processes for the (system, level, run) points: the same
    records, in the same order, as one process (each point draws from its own named streams)."""
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.run import run_schedule
    from tests.sim.conftest import daily_cpu

    dc = make_dc(daily_cpu(6, 4.0, seed=2), servers_per_tenant=4)
    cfg = ScheduleConfig(days=1.0, history_days=3.0, step_s=300.0,
                         workload=WorkloadConfig(offered_core_frac=0.08, task_s=60.0, length_scale=10.0))
    jobs = [chain_job(f"q{i}", [4 + 3 * i, 2]) for i in range(4)]
    kwargs = dict(levels=[0.3, 0.5], scaling=Scaling.LINEAR, runs=2, seed=4, config=cfg,
                  systems=(YarnSystem.PT, YarnSystem.H), jobs=jobs)
    one = run_schedule(dc, **kwargs, workers=1)  # type: ignore[arg-type]
    two = run_schedule(dc, **kwargs, workers=2)  # type: ignore[arg-type]
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in one]
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in two] == strip
    assert len(one) == 2 * 2 * 2 and sum(r["killed_tasks"] for r in one) > 0
