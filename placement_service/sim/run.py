"""Experiment drivers: sweeps of levels / replicas / runs over one datacenter, as result records.

Every run ``r`` draws from ``Streams(seed, r)``; the systems compared in one run see the same
workload, arrivals, reimages and writers (each system gets fresh copies of the named streams), so
differences between systems come from the policies alone.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import numpy as np

from placement_service.core.forecast import fit_headroom_forecast
from placement_service.core.mover import MoveConfig, MoveReport
from placement_service.core.placement import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
    ReplicaPlacer,
)
from placement_service.core.selection import SelectionConfig
from placement_service.core.types import GridCell, Job, ReimageEvents
from placement_service.sim.availability import AvailabilityConfig, simulate_availability
from placement_service.sim.datacenter import Scaling, SimDatacenter, scale_cpu
from placement_service.sim.durability import DurabilityConfig, PresenceSchedule, simulate_durability
from placement_service.sim.policy import (
    MOVE_EVERY_DAYS,
    WATCH_EVERY_HOURS,
    ClassRouter,
    CobusyMover,
    HdfsSystem,
    busy_hour_masks,
    cobusy_model,
    fit_classes,
    history_series,
    make_placer,
    mover_config,
    placement_grid,
)
from placement_service.sim.reimages import ReimageSchedule, extend_reimages
from placement_service.sim.results import Record
from placement_service.sim.schedule import (
    CLASS_SYSTEMS,
    FORECAST_SYSTEMS,
    ScheduleConfig,
    YarnSystem,
    simulate_schedule,
)
from placement_service.sim.streams import Streams
from placement_service.sim.workload import build_workload, poisson_arrivals

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

DAY_S = 86400.0


def default_jobs() -> list[Job]:
    """The 99 bundled TPC-DS DAGs of the policy core."""
    from placement_service.core.tpcds import tpcds_jobs

    return list(tpcds_jobs())


_POINT: Callable[[Any], Any] | None = None  # the sweep's point function, inherited by forked workers


def _call_point(point: Any) -> Any:
    assert _POINT is not None
    return _POINT(point)


def map_points(fn: Callable[[T], R], points: Sequence[T], workers: int) -> Iterator[R]:
    """``fn`` over ``points``, results in order; with ``workers`` > 1 in forked processes that
    inherit ``fn`` and everything it closes over (the datacenter is shared copy-on-write, not
    pickled; only the results travel back). One process where fork is unavailable."""
    global _POINT
    if workers <= 1 or len(points) <= 1 or "fork" not in mp.get_all_start_methods():
        yield from map(fn, points)
        return
    _POINT = fn
    try:
        with mp.get_context("fork").Pool(min(workers, len(points))) as pool:
            yield from pool.imap(_call_point, points)
    finally:
        _POINT = None


def _sweep(points: Sequence[T], one: Callable[[T], Record], workers: int,
           line: Callable[[Record], str]) -> list[Record]:
    """Every point of a sweep (``map_points``), in order, with one progress line per finished point
    (``<experiment> [k/n] <line(record)>``; ``harvest sim`` shows them without ``-v``)."""
    records: list[Record] = []
    t0 = time.perf_counter()
    for done, rec in enumerate(map_points(one, points, workers), start=1):
        records.append(rec)
        left = (time.perf_counter() - t0) / done * (len(points) - done)
        logger.info("%s [%d/%d] %s%s", rec["experiment"], done, len(points), line(rec),
                    f"; about {left:.0f} s left" if done < len(points) else "")
    return records


class SharedInputs:
    """The scaled series and clusterings of one datacenter, computed once and shared by the sweeps
    that ask for them (``harvest whatif`` runs three on the same data and levels).

    One clustering per (level, scaling, history): ``fit_classes`` with ``RISK_SIGMAS``, whose class
    table is the plain one (the sigmas change only ``tenant_grid_peak_cpu_``, core/clustering.py),
    so the schedule's class selection and every placement grid come from the same fit."""

    def __init__(self, dc: SimDatacenter, seed: int) -> None:
        self.dc, self.seed = dc, seed
        self._scaled: dict[tuple[float | None, str], tuple[np.ndarray, float]] = {}
        self._fits: dict[tuple[float | None, str, int], tuple[Any, Any]] = {}
        self.fits_made = 0

    def scaled(self, level: float | None, scaling: Scaling) -> tuple[np.ndarray, float]:
        """The series at ``level`` (None: the data's own, parameter 1)."""
        key = (level, scaling.value)
        if key not in self._scaled:
            self._scaled[key] = ((self.dc.cpu, 1.0) if level is None
                                 else scale_cpu(self.dc.cpu, self.dc.tenant_cores(), level, scaling))
        return self._scaled[key]

    def fit(self, level: float | None, scaling: Scaling, hist: int) -> tuple[Any, Any]:
        """``fit_classes`` on the first ``hist`` slots at ``level``: (class table, fitted model)."""
        key = (level, scaling.value, hist)
        if key not in self._fits:
            self._fits[key] = fit_classes(self.dc, self.scaled(level, scaling)[0], hist, seed=self.seed,
                                          unpredictable_peak_sigmas=RISK_SIGMAS)
            self.fits_made += 1
        return self._fits[key]


COBUSY_SYSTEMS = frozenset({HdfsSystem.H_COBUSY, HdfsSystem.H_COBUSY_MOVER})


def _move_settings(move_config: MoveConfig | None, move_every_days: float) -> MoveConfig:
    """HDFS-H-cobusy-mover's per-pass settings: ``move_config``, or ``MoveConfig``'s defaults with
    ``MOVE_MAX_FRAC_PER_DAY`` spread over the passes of a day."""
    default = mover_config(move_every_days)  # also checks move_every_days
    return move_config if move_config is not None else default


def _budget_gb(config: MoveConfig) -> float | None:
    b = config.budget_mb_per_server_day
    return None if b is None else b / 1024.0


def _mover_cadence(dc: SimDatacenter, move_every_days: float, watch_every_hours: float) -> tuple[int, int]:
    """HDFS-H-cobusy-mover: (slots between the simulator's calls, slots between daily passes; 0:
    a pass at every call). With a watch the calls come at its period and the passes when due."""
    if not watch_every_hours >= 0.0:  # also refuses NaN
        raise ValueError(f"--watch-every-hours must be >= 0 (0: no watch), got {watch_every_hours:g}")
    pass_slots = max(1, int(round(move_every_days * DAY_S / dc.series.interval_s)))
    if watch_every_hours == 0.0:
        return pass_slots, 0
    watch_slots = max(1, int(round(watch_every_hours * 3600.0 / dc.series.interval_s)))
    return min(watch_slots, pass_slots), pass_slots


def cobusy_mover(
    dc: SimDatacenter, cpu: np.ndarray, placer: ReplicaPlacer, history_slots: int, busy_cpu: float,
    streams: Streams, move_config: MoveConfig, pass_slots: int,
) -> CobusyMover:
    """HDFS-H-cobusy-mover's passes for one run, on its named streams: ``pass_slots`` from
    :func:`_mover_cadence` (0: no watch, a daily pass at every call)."""
    return CobusyMover(dc, cpu, placer, history_slots, busy_cpu, streams.fresh("moves"), move_config,
                       pass_every_slots=pass_slots, watch_rng=streams.fresh("watch") if pass_slots else None)


def _history_slots(dc: SimDatacenter, history_days: float) -> int:
    return int(round(history_days * DAY_S / dc.series.interval_s))


def run_schedule(
    dc: SimDatacenter,
    *,
    levels: Sequence[float],
    scaling: Scaling,
    runs: int,
    seed: int,
    config: ScheduleConfig,
    systems: Sequence[YarnSystem] = (YarnSystem.PT, YarnSystem.H),
    jobs: Sequence[Job] | None = None,
    workers: int = 1,
    shared: SharedInputs | None = None,
) -> list[Record]:
    """Scheduling sweep: one record per (system, level, run), in that nesting order whatever
    ``workers`` is (each point draws from its own named streams, so the records are the same).
    ``shared``: scaled series and clusterings shared with other sweeps of ``dc``."""
    jobs = list(jobs) if jobs is not None else default_jobs()
    total_cores = float(dc.inventory.cores.sum())
    hist = _history_slots(dc, config.history_days)
    shared = shared if shared is not None else SharedInputs(dc, seed)
    scaled = {lv: shared.scaled(lv, scaling) for lv in levels}
    tables = {}
    if CLASS_SYSTEMS.intersection(systems):
        tables = {lv: shared.fit(lv, scaling, hist)[0] for lv in levels}
    forecasts = {}
    if FORECAST_SYSTEMS.intersection(systems):
        forecasts = {
            lv: fit_headroom_forecast(
                history_series(dc, scaled[lv][0], hist),
                horizon_s=config.forecast_horizon_s, quantile=config.forecast_quantile,
            )
            for lv in levels
        }
    points: list[tuple[int, float, YarnSystem]] = []
    inputs: dict[int, tuple[Any, Any, SelectionConfig]] = {}
    for run in range(runs):
        streams = Streams(seed, run)
        workload = build_workload(jobs, config.workload, streams.get("task-lengths"), total_cores=total_cores)
        arrivals = poisson_arrivals(workload, config.days * DAY_S, streams.get("arrivals"), streams.get("jobs"))
        sel_config = SelectionConfig(
            short_max_s=workload.short_max_s, long_min_s=workload.long_min_s, reserve_frac=config.reserve_frac
        )
        inputs[run] = (workload, arrivals, sel_config)
        points += [(run, lv, system) for lv in levels for system in systems]

    def one(point: tuple[int, float, YarnSystem]) -> Record:
        run, lv, system = point
        workload, arrivals, sel_config = inputs[run]
        streams = Streams(seed, run)
        cpu, param = scaled[lv]
        router = ClassRouter(tables[lv], dc, sel_config) if system in CLASS_SYSTEMS else None
        res = simulate_schedule(
            dc, cpu, workload, arrivals, system, config,
            place_rng=streams.fresh("placement"),
            task_rng=streams.fresh("task-noise"),
            router=router,
            select_rng=streams.fresh("class-selection"),
            forecast=forecasts.get(lv),
        )
        rec: Record = {
            "experiment": "schedule", "datacenter": dc.name, "system": system.value,
            "scaling": scaling.value, "level": lv, "scale_param": param, "run": run, "seed": seed,
        }
        rec.update({k: v for k, v in asdict(res).items() if k != "system"})
        rec["classes"] = len(tables[lv].classes) if lv in tables else None
        return rec

    return _sweep(points, one, workers, lambda rec: (
        f"{dc.name} level {rec['level']:.2f} run {rec['run']}: {rec['system']} avg job "
        f"{rec['avg_job_time_s']:.0f} s, {rec['killed_tasks']} killed ({rec['wall_s']:.1f} s)"))


def _past_reimages(dc: SimDatacenter) -> tuple[ReimageEvents, float] | None:
    """The history the grid learns from: the first month of reimages (the rest is the future), and
    its span in seconds; None without reimages."""
    if dc.reimages is None or len(dc.reimages.server) == 0:
        return None
    month_s = 30 * DAY_S
    span = min(dc.reimage_window_s or dc.series.n_slots * dc.series.interval_s, month_s)
    ts = np.asarray(dc.reimages.timestamp_s, dtype=np.float64)
    seen = ts < dc.series.start_s + span
    return ReimageEvents(ts[seen], tuple(np.asarray(dc.reimages.server, dtype=object)[seen].tolist())), span


def _tenant_rates(dc: SimDatacenter) -> dict[str, float]:
    from placement_service.traces.series import reimage_rates

    past = _past_reimages(dc)
    if past is None:
        return {t: 0.0 for t in dc.series.tenants}
    return reimage_rates(past[0], dc.inventory, span_s=past[1])


def server_reimages(dc: SimDatacenter) -> dict[str, float]:
    """Reimages per server in the history (the first month, as :func:`_tenant_rates`): what the
    co-busy placers know of each server before the simulated span (``ReplicaPlacer``'s
    ``server_reimages``; the simulated reimages then count through ``reset_server``)."""
    past = _past_reimages(dc)
    if past is None:
        return {}
    names, counts = np.unique(np.asarray(past[0].server, dtype=object).astype(str), return_counts=True)
    return {str(n): float(c) for n, c in zip(names, counts, strict=True)}


RISK_SIGMAS = 4.0
"""``unpredictable_peak_sigmas`` of the experimental HDFS-H-risk system."""


def system_grids(dc: SimDatacenter, cpu: np.ndarray, hist: int, seed: int,
                 model: Any = None) -> dict[HdfsSystem, dict[str, GridCell]]:
    """The placement grid each system uses: HDFS-H ranks columns by every tenant's p99 (the paper),
    HDFS-H-risk ranks unpredictable tenants by max(p99, mean + 4 std); HDFS-Stock ignores the grid
    (racks decide) and gets HDFS-H's. ``model``: that clustering of ``cpu``, when already fitted."""
    if model is None:
        _, model = fit_classes(dc, cpu, hist, seed=seed, unpredictable_peak_sigmas=RISK_SIGMAS)
    rates = _tenant_rates(dc)
    paper = dict(placement_grid(dc, model.tenant_peak_cpu_, rates))
    risk = dict(placement_grid(dc, model.tenant_grid_peak_cpu_, rates))
    return {HdfsSystem.STOCK: paper, HdfsSystem.H: paper, HdfsSystem.H_RISK: risk, HdfsSystem.H_HOURS: paper,
            HdfsSystem.H_COBUSY: paper, HdfsSystem.H_COBUSY_MOVER: paper}


def year_of_reimages(dc: SimDatacenter, days: float, rng: np.random.Generator) -> ReimageSchedule:
    if dc.reimages is None:
        return ReimageSchedule(np.zeros(0), np.zeros(0, dtype=np.int64), "none", 0.0)
    span = dc.reimage_window_s or dc.series.n_slots * dc.series.interval_s
    return extend_reimages(dc.reimages, dc.inventory, days, rng, window_start_s=dc.series.start_s, window_s=span)


def run_durability(
    dc: SimDatacenter,
    *,
    replicas: Sequence[int],
    runs: int,
    seed: int,
    config: DurabilityConfig,
    history_days: float = 7.0,
    systems: Sequence[HdfsSystem] = (HdfsSystem.STOCK, HdfsSystem.H),
    workers: int = 1,
    presence: PresenceSchedule | None = None,
    move_config: MoveConfig | None = None,
    move_every_days: float = MOVE_EVERY_DAYS,
    cobusy_risk_target: float = COBUSY_RISK_TARGET,
    cobusy_spread: float = COBUSY_SPREAD,
    cobusy_new_target: float = COBUSY_NEW_TARGET,
    cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER,
    reimage_choices: int = REIMAGE_CHOICES,
    repair_choices: int = REPAIR_CHOICES,
    watch_every_hours: float = WATCH_EVERY_HOURS,
    shared: SharedInputs | None = None,
) -> list[Record]:
    """Durability: one record per (system, replicas, run), the same for any ``workers``;
    ``presence``: servers that come and go (elastic servers, ``sim/elastic.py``).
    HDFS-H-cobusy-mover refits its estimates on the trailing ``history_days`` of ``dc.cpu`` (the
    series repeated past its end) and moves replicas every ``move_every_days`` of the year
    (``move_config`` as in :func:`run_availability`). ``cobusy_risk_target``: the co-busy
    placements' target for re-replications (``ReplicaPlacer``'s; 0: repairs take the lowest estimate too)."""
    move_config = _move_settings(move_config, move_every_days)
    call_slots, pass_slots = _mover_cadence(dc, move_every_days, watch_every_hours)
    if dc.reimages is None:
        logger.warning("durability of %s without reimage events: nothing can be lost", dc.name)
    hist, busy_cpu = _history_slots(dc, history_days), 1.0 - 1.0 / 3.0
    shared = shared if shared is not None else SharedInputs(dc, seed)
    grids = system_grids(dc, dc.cpu, hist, seed, model=shared.fit(None, Scaling.LINEAR, hist)[1])
    hours = busy_hour_masks(dc, dc.cpu, hist, busy_cpu)
    cobusy = cobusy_model(dc, dc.cpu, hist, busy_cpu) if COBUSY_SYSTEMS.intersection(systems) else None
    rates, seen = _tenant_rates(dc), server_reimages(dc)
    schedules = {run: year_of_reimages(dc, config.days, Streams(seed, run).get("reimages")) for run in range(runs)}
    points = [(run, r, system) for run in range(runs) for r in replicas for system in systems]

    def one(point: tuple[int, int, HdfsSystem]) -> Record:
        run, r, system = point
        streams, schedule = Streams(seed, run), schedules[run]

        placer = make_placer(
            system, dc, grids[system], seed=streams.seed_int("placer"),
            block_size_mb=config.block_size_mb, busy_hours=hours, cobusy=cobusy, reimage_rate=rates,
            cobusy_risk_target=cobusy_risk_target, cobusy_spread=cobusy_spread,
            cobusy_new_target=cobusy_new_target, cobusy_new_max_turnover=cobusy_new_max_turnover,
            server_reimages=seen, reimage_choices=reimage_choices, repair_choices=repair_choices,
        )
        mover: Callable[[float, np.ndarray], MoveReport] | None = None
        daily: CobusyMover | None = None
        if system is HdfsSystem.H_COBUSY_MOVER:
            assert isinstance(placer, ReplicaPlacer)
            daily = cobusy_mover(dc, dc.cpu, placer, hist, busy_cpu, streams, move_config, pass_slots)
            mover = lambda t_s, rep: daily.pass_at(hist + int(t_s // dc.series.interval_s), rep)  # noqa: E731

        res = simulate_durability(
            dc, lambda: placer, system, r, schedule, config,
            create_rng=streams.fresh("blocks"),
            place_rng=streams.fresh("placement"),
            repair_rng=streams.fresh("repair"),
            presence=presence,
            mover=mover,
            move_every_s=call_slots * dc.series.interval_s,
        )
        rec: Record = {
            "experiment": "durability", "datacenter": dc.name, "system": system.value,
            "replicas": r, "run": run, "seed": seed,
            "reimage_source": schedule.how, "reimage_source_days": schedule.source_span_s / 86400.0,
        }
        rec.update({k: v for k, v in asdict(res).items() if k not in ("system", "replicas")})
        rec["moves_per_day"] = res.moved_replicas / config.days
        if daily is not None:
            rec["watch_moved"] = daily.watch_moved
            rec["move_budget_gb_per_server_day"] = _budget_gb(move_config)
            rec["moves_refused_budget"] = daily.refused_budget
            rec["moves_refused_exposure"] = daily.refused_exposure
        return rec

    return _sweep(points, one, workers, lambda rec: (
        f"{dc.name} x{rec['replicas']} run {rec['run']}: {rec['system']} lost {rec['lost_blocks']} of "
        f"{rec['blocks']} ({rec['wall_s']:.1f} s)"))


def run_availability(
    dc: SimDatacenter,
    *,
    levels: Sequence[float],
    replicas: Sequence[int],
    scaling: Scaling,
    runs: int,
    seed: int,
    config: AvailabilityConfig,
    systems: Sequence[HdfsSystem] = (HdfsSystem.STOCK, HdfsSystem.H),
    workers: int = 1,
    move_config: MoveConfig | None = None,
    move_every_days: float = MOVE_EVERY_DAYS,
    cobusy_risk_target: float = COBUSY_RISK_TARGET,
    cobusy_spread: float = COBUSY_SPREAD,
    cobusy_new_target: float = COBUSY_NEW_TARGET,
    cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER,
    reimage_choices: int = REIMAGE_CHOICES,
    repair_choices: int = REPAIR_CHOICES,
    watch_every_hours: float = WATCH_EVERY_HOURS,
    shared: SharedInputs | None = None,
) -> list[Record]:
    """Availability sweep: one record per (system, level, replicas, run), the same for any ``workers``.
    HDFS-H-cobusy-mover refits its estimates and moves replicas every ``move_every_days`` of the
    access window (``move_config``, per pass; default: ``MoveConfig``'s with ``MOVE_MAX_FRAC_PER_DAY``).
    ``cobusy_risk_target``: as in :func:`run_durability` (no re-replications here: it changes nothing)."""
    move_config = _move_settings(move_config, move_every_days)
    call_slots, pass_slots = _mover_cadence(dc, move_every_days, watch_every_hours)
    hist = _history_slots(dc, config.history_days)
    rates, seen = _tenant_rates(dc), server_reimages(dc)
    per_level = {}
    shared = shared if shared is not None else SharedInputs(dc, seed)
    for lv in levels:
        cpu, param = shared.scaled(lv, scaling)
        cobusy = cobusy_model(dc, cpu, hist, config.busy_threshold) if COBUSY_SYSTEMS.intersection(systems) else None
        per_level[lv] = (cpu, param, system_grids(dc, cpu, hist, seed, model=shared.fit(lv, scaling, hist)[1]),
                         busy_hour_masks(dc, cpu, hist, config.busy_threshold), cobusy)
    points = [(lv, run, r, system) for lv in levels for run in range(runs) for r in replicas for system in systems]

    def one(point: tuple[float, int, int, HdfsSystem]) -> Record:
        lv, run, r, system = point
        cpu, param, grids, hours, cobusy = per_level[lv]
        streams = Streams(seed, run)
        placer = make_placer(
            system, dc, grids[system], seed=streams.seed_int("placer"),
            block_size_mb=config.block_size_mb, busy_hours=hours, cobusy=cobusy, reimage_rate=rates,
            cobusy_risk_target=cobusy_risk_target, cobusy_spread=cobusy_spread,
            cobusy_new_target=cobusy_new_target, cobusy_new_max_turnover=cobusy_new_max_turnover,
            server_reimages=seen, reimage_choices=reimage_choices, repair_choices=repair_choices,
        )
        mover = None
        if system is HdfsSystem.H_COBUSY_MOVER:
            assert isinstance(placer, ReplicaPlacer)
            mover = cobusy_mover(dc, cpu, placer, hist, config.busy_threshold, streams, move_config, pass_slots)
        res = simulate_availability(
            dc, cpu, placer, system, r, config,
            create_rng=streams.fresh("blocks"),
            place_rng=streams.fresh("placement"),
            access_rng=streams.fresh("accesses"),
            mover=mover,
            move_every_slots=call_slots,
        )
        rec: Record = {
            "experiment": "availability", "datacenter": dc.name, "system": system.value,
            "scaling": scaling.value, "level": lv, "scale_param": param, "replicas": r,
            "run": run, "seed": seed,
        }
        rec.update({k: v for k, v in asdict(res).items() if k not in ("system", "replicas")})
        if mover is not None:
            rec["watch_moved"] = mover.watch_moved
            rec["move_budget_gb_per_server_day"] = _budget_gb(move_config)
            rec["moves_refused_budget"] = mover.refused_budget
            rec["moves_refused_exposure"] = mover.refused_exposure
        return rec

    return _sweep(points, one, workers, lambda rec: (
        f"{dc.name} level {rec['level']:.2f} x{rec['replicas']} run {rec['run']}: {rec['system']} failed "
        f"{rec['failed_access_pct']:.4f}% ({rec['wall_s']:.1f} s)"))

