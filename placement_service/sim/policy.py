"""Adapters between the simulator and the policy core: the same clustering, class selection and
replica placement code the service runs, fed with simulated state instead of node reports.

- ``fit_classes``: ``UtilizationClustering`` on the history window of the (scaled) tenant series,
  weighted by each tenant's servers and cores (what ``harvest cluster`` does with an inventory).
- ``ClassRouter``: wraps ``ClassSelector``. Before each decision it receives each class's current
  use, ``(primary cores + secondary containers) / class cores`` (what the agents report: the primary
  rounded up plus the secondary allocations), so a class that batch work already filled has no
  headroom left.
- ``placement_grid`` / ``make_placer``: the core's 3x3 grid and its ``ReplicaPlacer`` (HDFS-H) or
  ``StockPlacer`` (HDFS-Stock), addressed by server name as in the service.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Protocol

import numpy as np

from placement_service.core.busy_hours import busy_hour_masks as core_busy_hour_masks
from placement_service.core.clustering import UtilizationClustering
from placement_service.core.cobusy import CobusyConfig, CobusyModel, fit_cobusy, reimage_penalty
from placement_service.core.grid import build_grid
from placement_service.core.mover import (  # noqa: F401 (the schedule settings are re-exported)
    MOVE_EVERY_DAYS,
    MOVE_MAX_FRAC_PER_DAY,
    WATCH_EVERY_HOURS,
    MoveBudget,
    MoveConfig,
    MoveReport,
    merge_reports,
    move_at_risk,
    move_busy_now,
    mover_config,
)
from placement_service.core.placement import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
    PlacementConfig,
    PlacementResult,
    ReplicaPlacer,
)
from placement_service.core.selection import ClassSelector, SelectionConfig, job_type
from placement_service.core.stock_placement import StockPlacer
from placement_service.core.types import ClassTable, GridCell, TenantSeries
from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.systems import (  # noqa: F401 (re-exported)
    SERVICE_SETTING,
    SYSTEM_TEXT,
    HdfsSystem,
    ServicePlacement,
    service_placement,
)
from placement_service.sim.workload import JobTemplate


def history_series(dc: SimDatacenter, cpu: np.ndarray, history_slots: int) -> TenantSeries:
    """The first ``history_slots`` slots of ``cpu`` as a ``TenantSeries`` (what the service has seen)."""
    h = max(2, min(int(history_slots), cpu.shape[1]))
    return replace(dc.series, cpu=np.asarray(cpu[:, :h], dtype=np.float64), long_gaps=())


def fit_classes(
    dc: SimDatacenter,
    cpu: np.ndarray,
    history_slots: int,
    *,
    seed: int = 0,
    max_classes_per_pattern: int = 4,
    unpredictable_peak_sigmas: float = 0.0,
) -> tuple[ClassTable, UtilizationClustering]:
    """Cluster the tenants on their history (core-weighted, server-counted classes)."""
    series = history_series(dc, cpu, history_slots)
    servers = dc.tenant_servers()
    cores = dc.tenant_cores()
    model = UtilizationClustering(
        max_classes_per_pattern=max_classes_per_pattern,
        random_state=seed,
        unpredictable_peak_sigmas=unpredictable_peak_sigmas,
    )
    model.fit(
        series,
        servers_per_tenant={t: int(servers[i]) for i, t in enumerate(dc.series.tenants)},
        cores_per_tenant={t: float(cores[i]) for i, t in enumerate(dc.series.tenants)},
    )
    table = model.class_table()
    # The core computes class series in float32, so a saturated class can come out at 1.0000001,
    # which ClassSelector rejects: clip the tags to [0, 1] (reported to the lead, not fixed here).
    classes = tuple(
        replace(
            c,
            avg_cpu=min(1.0, max(0.0, c.avg_cpu)),
            peak_cpu=min(1.0, max(0.0, c.peak_cpu)),
            current_cpu=min(1.0, max(0.0, c.current_cpu)),
        )
        for c in table.classes
    )
    return replace(table, classes=classes), model


class ClassRouter:
    """YARN-H's view of class selection: class ids <-> server index arrays, current use per class."""

    def __init__(self, table: ClassTable, dc: SimDatacenter, config: SelectionConfig) -> None:
        self.selector = ClassSelector(table, config)
        self.ids = self.selector.ids
        pos = {cid: i for i, cid in enumerate(self.ids)}
        tenant_class = np.array([pos[table.tenant_class[t]] for t in dc.series.tenants], dtype=np.int64)
        self.server_class = tenant_class[dc.server_tenant]
        self.class_cores = np.bincount(self.server_class, weights=dc.inventory.cores, minlength=len(self.ids))
        self._members = [np.flatnonzero(self.server_class == c) for c in range(len(self.ids))]
        self._union: dict[tuple[int, ...], np.ndarray] = {}
        self.all_classes = np.arange(len(self.ids), dtype=np.int64)

    def update(self, primary_cores: np.ndarray, secondary_cores: np.ndarray) -> None:
        """Tell the selector each class's current CPU use (primary + secondary, fraction of cores)."""
        busy = np.bincount(self.server_class, weights=primary_cores + secondary_cores, minlength=len(self.ids))
        cur = np.clip(busy / np.maximum(self.class_cores, 1e-9), 0.0, 1.0)
        self.selector.update_current(dict(zip(self.ids, cur.tolist(), strict=True)))

    def route(self, template: JobTemplate, last_duration_s: float | None, rng: np.random.Generator) -> np.ndarray:
        """Class indices for one job (empty: nothing fits now, the job waits)."""
        jt = job_type(last_duration_s, self.selector.config)
        sel = self.selector.select_typed(jt, template.max_concurrency, rng)
        return np.array([self.ids.index(c) for c in sel.classes], dtype=np.int64)

    def servers_of(self, classes: np.ndarray) -> np.ndarray:
        key = tuple(int(c) for c in classes)
        if len(key) == 1:
            return self._members[key[0]]
        got = self._union.get(key)
        if got is None:
            got = np.sort(np.concatenate([self._members[c] for c in key]))
            self._union[key] = got
        return got


def placement_grid(
    dc: SimDatacenter, peak_cpu: Mapping[str, float], reimage_rate: Mapping[str, float]
) -> dict[str, GridCell]:
    """The 3x3 grid of the core (``build_grid``) from each tenant's reimage rate, peak and storage."""
    from placement_service.traces.series import tenant_storage_gb

    storage = tenant_storage_gb(dc.inventory)
    tenants = sorted(storage)
    return build_grid(
        {t: float(reimage_rate.get(t, 0.0)) for t in tenants},
        {t: float(peak_cpu.get(t, 0.0)) for t in tenants},
        {t: float(storage[t]) for t in tenants},
    )


def busy_hour_masks(
    dc: SimDatacenter,
    cpu: np.ndarray,
    history_slots: int,
    busy_cpu: float,
    min_share: float | None = None,
    margin_cpu: float | None = None,
) -> dict[str, int]:
    """Each tenant's busy-hour profile over the first ``history_slots`` of ``cpu``: the core's
    ``core.busy_hours.busy_hour_masks``, the same function the service's re-clustering runs."""
    masks = core_busy_hour_masks(_history_window(cpu, history_slots), dc.series.start_s, dc.series.interval_s, busy_cpu,
                                 min_share=min_share, margin_cpu=margin_cpu)
    return {t: int(m) for t, m in zip(dc.series.tenants, masks.tolist(), strict=True)}


def cobusy_model(
    dc: SimDatacenter, cpu: np.ndarray, history_slots: int, busy_cpu: float, config: CobusyConfig | None = None
) -> CobusyModel:
    """The tenants' co-busy estimates (``core.cobusy.fit_cobusy``) over the first ``history_slots`` of ``cpu``."""
    return fit_cobusy(dc.series.tenants, _history_window(cpu, history_slots), dc.series.start_s,
                      dc.series.interval_s, busy_cpu, config)


class CobusyMover:
    """The passes of ``core.mover`` for the availability simulation (``simulate_availability``'s
    ``mover``) and the durability year (``simulate_durability``'s, through :meth:`pass_at`).

    Daily pass (every ``pass_every_slots``; 0: at every call): at slot ``T`` it refits the co-busy
    estimates on the ``history_slots`` before ``T`` (what the service's daily re-clustering sees
    then; the series repeats past its end), gives them to the placer and moves the replicas of the
    blocks at risk. Watch (at every call when ``watch_rng`` is given, on that stream): the tenants busy
    at ``T`` (CPU above ``busy_cpu``) and ``core.mover.move_busy_now`` (its new replicas at
    the placer's re-replication target). The
    caller calls it at the watch's period (hourly) and the daily pass runs when it is due."""

    def __init__(
        self,
        dc: SimDatacenter,
        cpu: np.ndarray,
        placer: ReplicaPlacer,
        history_slots: int,
        busy_cpu: float,
        rng: np.random.Generator,
        config: MoveConfig | None = None,
        cobusy_config: CobusyConfig | None = None,
        *,
        pass_every_slots: int = 0,
        watch_rng: np.random.Generator | None = None,
    ) -> None:
        self.dc, self.cpu, self.placer = dc, cpu, placer
        self.history_slots = max(1, int(history_slots))
        self.busy_cpu, self.rng = float(busy_cpu), rng
        self.config = config if config is not None else MoveConfig()
        self.cobusy_config = cobusy_config
        self.pass_every_slots = max(0, int(pass_every_slots))
        self.watch_rng = watch_rng
        self.reports: list[MoveReport] = []
        self.watch_moved = 0
        """Replicas the watch moved so far."""
        self.refused_budget = self.refused_exposure = 0
        """Moves refused so far for the tenants' daily budget and for raising durability exposure."""
        b = self.config.budget_mb_per_server_day
        self.budget = MoveBudget(placer, b) if b is not None else None
        self._slots_per_day = max(1, int(round(86400.0 / dc.series.interval_s)))
        self._next_pass: int | None = None
        row = {t: i for i, t in enumerate(dc.series.tenants)}
        # The CPU row of each of the placer's tenants (-1: no series, never busy for the watch).
        self._cpu_row = np.array([row.get(t, -1) for t in placer.tenant_names], dtype=np.int64)

    def __call__(self, slot: int, replicas: np.ndarray) -> int:
        """``simulate_availability``'s ``mover``: the passes due at ``slot``, the replicas moved."""
        return self.pass_at(slot, replicas).moved

    def pass_at(self, slot: int, replicas: np.ndarray) -> MoveReport:
        """The passes due at ``slot`` over ``replicas`` [block, k] (updated in place): the daily one
        (refit on the ``history_slots`` before ``slot``, cyclic in the series) when due, then the watch."""
        slot = int(slot)
        report = MoveReport.nothing()
        if self.budget is not None:
            self.budget.at_day(slot // self._slots_per_day)
        if self._next_pass is None or slot >= self._next_pass:
            start = slot - self.history_slots
            window = np.take(self.cpu, np.arange(start, slot) % self.cpu.shape[1], axis=1)
            s = self.dc.series
            model = fit_cobusy(s.tenants, window, s.start_s + start * s.interval_s, s.interval_s, self.busy_cpu,
                               self.cobusy_config)
            self.placer.set_cobusy(model)
            report = move_at_risk(self.placer, replicas, self.config, self.rng, budget=self.budget)
            self.reports.append(report)
            self._next_pass = slot + self.pass_every_slots
        if self.watch_rng is not None:
            known = self._cpu_row >= 0
            busy = np.zeros(known.shape, dtype=bool)
            busy[known] = self.cpu[self._cpu_row[known], slot % self.cpu.shape[1]] > self.busy_cpu
            watched = move_busy_now(self.placer, replicas, busy, self.watch_rng, budget=self.budget)
            self.watch_moved += watched.moved
            report = merge_reports(report, watched)
        self.refused_budget += report.refused_budget
        self.refused_exposure += report.refused_exposure
        return report


def _history_window(cpu: np.ndarray, history_slots: int) -> np.ndarray:
    """The first ``history_slots`` of ``cpu`` [tenant, slot] (at least one, at most all)."""
    return cpu[:, : max(1, min(int(history_slots), cpu.shape[1]))]


class Placer(Protocol):
    """What the simulator uses of the core's placers (``ReplicaPlacer`` and ``StockPlacer``)."""

    def place(
        self,
        writer: str | None,
        replicas: int,
        *,
        excluded: Collection[str] = (),
        rng: np.random.Generator | None = None,
        existing: Collection[str] = (),
    ) -> PlacementResult: ...

    def reset_server(self, server: str) -> None: ...

    def set_busy(self, server: str, busy: bool) -> None: ...

    def has_space(self, server: str) -> bool: ...


def make_placer(
    system: HdfsSystem,
    dc: SimDatacenter,
    grid: Mapping[str, GridCell],
    *,
    seed: int,
    block_size_mb: float,
    busy_hours: Mapping[str, int] | None = None,
    cobusy: CobusyModel | None = None,
    reimage_rate: Mapping[str, float] | None = None,
    cobusy_risk_target: float = COBUSY_RISK_TARGET,
    cobusy_spread: float = COBUSY_SPREAD,
    cobusy_new_target: float = COBUSY_NEW_TARGET,
    server_reimages: Mapping[str, float] | None = None,
    reimage_choices: int = REIMAGE_CHOICES,
    repair_choices: int = REPAIR_CHOICES,
    cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER,
) -> Placer:
    """The core's placer for ``system``: ``ReplicaPlacer`` (HDFS-H, -risk; -hours with the tenants'
    ``busy_hours``; -cobusy with their ``cobusy`` estimates, penalized by ``reimage_rate`` when given:
    ``core.cobusy.reimage_penalty``, and ``cobusy_risk_target``, ``cobusy_spread``, ``cobusy_new_target``, ``cobusy_new_max_turnover``, ``server_reimages`` (the
    history's reimages per server), ``reimage_choices``, ``repair_choices``: ``ReplicaPlacer``'s) or
    ``StockPlacer`` (HDFS-Stock)."""
    config = PlacementConfig(block_size_mb=block_size_mb, strict=False)
    if system in (HdfsSystem.H_COBUSY, HdfsSystem.H_COBUSY_MOVER):
        if cobusy is None:
            raise ValueError("HDFS-H-cobusy needs the tenants' co-busy estimates")
        penalty = None
        if reimage_rate is not None:
            servers = dc.tenant_servers()
            penalty = reimage_penalty(
                reimage_rate, grid, {t: int(servers[i]) for i, t in enumerate(dc.series.tenants)}
            )
        return ReplicaPlacer(dc.inventory, grid, config=config, seed=seed, cobusy=cobusy, cobusy_penalty=penalty,
                             cobusy_risk_target=cobusy_risk_target, cobusy_spread=cobusy_spread,
                             cobusy_new_target=cobusy_new_target, server_reimages=server_reimages, reimage_choices=reimage_choices,
                             repair_choices=repair_choices, cobusy_new_max_turnover=cobusy_new_max_turnover)
    if system is HdfsSystem.H_HOURS:
        if busy_hours is None:
            raise ValueError("HDFS-H-hours needs the tenants' busy-hour profiles")
        return ReplicaPlacer(dc.inventory, grid, config=config, seed=seed, busy_hours=busy_hours)
    if system in (HdfsSystem.H, HdfsSystem.H_RISK):
        return ReplicaPlacer(dc.inventory, grid, config=config, seed=seed)
    return StockPlacer(dc.inventory, grid, config=config, seed=seed)
