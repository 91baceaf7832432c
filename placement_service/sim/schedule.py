"""Scheduling simulation: YARN-Stock, YARN-PT, YARN-H and YARN-H-forecast running TPC-DS-shaped DAGs on
harvested cores.

Time-stepped at ``step_s`` (containers are tracked as numpy arrays, one entry per running task);
the primary tenants' CPU changes at every trace slot. Per server, in cores::

    primary   = ceil(cpu_frac(tenant, slot) * cores)        (the agent rounds the primary up)
    reserve   = ceil(reserve_frac * cores)
    capacity  = max(0, cores - reserve - primary)            (YARN-PT / YARN-H)
    capacity  = cores - reserve                              (YARN-Stock: ignores the primary)

Each step, in order:

1. **Agents**: at a slot change the primary's cores change. Every step, each server's node agent
   decides (``agent.decide.decide``, the production function, through ``sim/agent_nodes.py``): when
   primary + containers eat into the reserve it kills the youngest containers, at most 4 per agent
   tick (1 s), and after a kill its advertised cores do not grow for the 60 s cool-down; the
   advertised cores are the server's ``capacity`` until the next step. A killed task goes back to
   its vertex's pending tasks and re-runs from scratch (YARN-Stock has no agent and never kills).
2. **Completions**: containers whose end time has passed finish; a vertex finishes with its last
   task, its children lose a pending parent, a job finishes with its last vertex.
3. **Arrivals**: jobs whose arrival time has passed become known. YARN-H asks class selection
   (the policy core's ``ClassSelector``, through ``ClassRouter``) for classes; a job with no class
   waits and asks again every step.
4. **Launch**, jobs in arrival order (first come, first served), one core per container, tasks of
   ready vertices only:
   - YARN-PT / YARN-Stock: any server with room; by default servers are visited in a random order
     (heartbeat order) and each takes as many containers as it has room for (``fill``);
     ``proportional`` instead draws free cores uniformly (servers chosen with probability
     proportional to their free cores), as an ablation; ``YARN-PT-spread`` is that ablation as a
     system of its own (YARN-H's server choice without class selection);
   - YARN-H: only servers of the job's classes, free cores drawn uniformly (probability
     proportional to each server's available cores). A job that class selection gives no class
     waits and asks again every step; after ``h_max_wait_s`` it runs on any server instead (what
     the paper's Tez-H does when it names no label; 0 = at once, ``inf`` = wait forever, which
     strands jobs whose peak concurrency exceeds what the classes can ever offer). A job whose
     classes gave it no container for ``h_reselect_after_s`` while it had ready tasks asks class
     selection again (our addition: without it a job bound to a class that stays full, e.g. a
     tenant saturated by linear scaling, never finishes; 0 disables it, as in the paper where
     Tez-H asks once per job).
   - YARN-H-forecast (ours) / YARN-PT-forecast (its ablation without classes): each server's
     expected growth within the next hour comes from the policy core's ``HeadroomForecast``
     (``forecast.growth_cores``, recomputed at every slot change); its free cores beyond that growth
     are *safe*. A job's containers come from safe cores on its classes' servers, then safe cores
     anywhere, then (``forecast_spill``) any free core, each pool drawn proportionally to its cores
     (``core/headroom_policy``: ``growth_cores``, ``safe_cores``, ``choose_safe_first``, the policy
     the node agent shares). A YARN-H-forecast job that class selection gives no class runs at once
     on all classes (classes are a preference here, not a restriction).

Job time = finish - arrival (queueing included). The run continues after the last arrival until
every job is done or ``drain_days`` passed; unfinished jobs count with their time so far.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from placement_service.core.headroom_policy import (
    HeadroomForecast,
    choose_proportional,
    choose_safe_first,
    safe_cores,
)
from placement_service.sim.agent_nodes import AgentSettings, SimAgents
from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.policy import ClassRouter
from placement_service.sim.workload import Arrivals, Workload, WorkloadConfig

logger = logging.getLogger(__name__)

DAY_S = 86400.0


class YarnSystem(StrEnum):
    STOCK = "YARN-Stock"
    PT = "YARN-PT"
    PT_SPREAD = "YARN-PT-spread"  # ablation: YARN-PT with YARN-H's server choice, no class selection
    H = "YARN-H"
    PT_FORECAST = "YARN-PT-forecast"  # ablation: the headroom forecast without class selection
    H_FORECAST = "YARN-H-forecast"  # ours: class selection as a preference + the headroom forecast


FORECAST_SYSTEMS = frozenset({YarnSystem.PT_FORECAST, YarnSystem.H_FORECAST})
CLASS_SYSTEMS = frozenset({YarnSystem.H, YarnSystem.H_FORECAST})


class ServerChoice(StrEnum):
    FILL = "fill"
    PROPORTIONAL = "proportional"


@dataclass(frozen=True)
class ScheduleConfig:
    days: float = 30.0
    history_days: float = 7.0
    step_s: float = 60.0
    reserve_frac: float = 1.0 / 3.0
    drain_days: float = 2.0
    pt_server_choice: ServerChoice = ServerChoice.FILL
    h_max_wait_s: float = 1800.0
    h_reselect_after_s: float = 1800.0
    forecast_horizon_s: float = 3600.0
    forecast_quantile: float = 0.9
    forecast_spill: bool = True
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    agent: AgentSettings = field(default_factory=AgentSettings)

    def __post_init__(self) -> None:
        if self.days <= 0 or self.step_s <= 0 or self.history_days < 0 or self.drain_days < 0:
            raise ValueError("days and step_s must be > 0; history_days and drain_days >= 0")
        if not 0.0 <= self.reserve_frac < 1.0:
            raise ValueError(f"reserve_frac must be in [0, 1), got {self.reserve_frac}")
        if not self.forecast_horizon_s > 0 or not 0.0 < self.forecast_quantile <= 1.0:
            raise ValueError("forecast_horizon_s must be > 0 and forecast_quantile in (0, 1]")


@dataclass(frozen=True)
class ScheduleResult:
    system: YarnSystem
    avg_job_time_s: float
    killed_tasks: int
    utilization: float  # average primary CPU over the simulated window (fraction of cores)
    total_utilization: float  # primary (rounded up to cores) + secondary containers (fraction of cores)
    jobs: int
    unfinished_jobs: int
    wasted_core_s: float  # core-seconds of killed containers' lost work
    overcommit_core_s: float  # core-seconds where primary + secondary exceeded the cores (Stock's harm)
    waiting_jobs_avg: float
    reselections: int
    wall_s: float


def _choose_fill(free: np.ndarray, servers: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Servers in random order, each filled to its room, until ``n`` containers are placed."""
    order = servers[rng.permutation(servers.shape[0])]
    room = free[order]
    cum = np.cumsum(room)
    k = int(np.searchsorted(cum, n, side="left"))
    take = room[: k + 1].copy()
    take[-1] -= int(cum[k]) - n
    return np.repeat(order[: k + 1], take)


class _Containers:
    """Running containers as parallel arrays (server, vertex, start, end, launch sequence)."""

    def __init__(self) -> None:
        self.server = np.zeros(0, dtype=np.int64)
        self.vertex = np.zeros(0, dtype=np.int64)
        self.start = np.zeros(0, dtype=np.float64)
        self.end = np.zeros(0, dtype=np.float64)
        self.seq = np.zeros(0, dtype=np.int64)
        self._next = 0

    def add(self, server: np.ndarray, vertex: np.ndarray, start: float, end: np.ndarray) -> None:
        n = server.shape[0]
        self.server = np.concatenate([self.server, server])
        self.vertex = np.concatenate([self.vertex, vertex])
        self.start = np.concatenate([self.start, np.full(n, start)])
        self.end = np.concatenate([self.end, end])
        self.seq = np.concatenate([self.seq, np.arange(self._next, self._next + n)])
        self._next += n

    def keep(self, mask: np.ndarray) -> None:
        self.server, self.vertex = self.server[mask], self.vertex[mask]
        self.start, self.end, self.seq = self.start[mask], self.end[mask], self.seq[mask]


def simulate_schedule(
    dc: SimDatacenter,
    cpu: np.ndarray,
    workload: Workload,
    arrivals: Arrivals,
    system: YarnSystem,
    config: ScheduleConfig,
    *,
    place_rng: np.random.Generator,
    task_rng: np.random.Generator,
    router: ClassRouter | None = None,
    select_rng: np.random.Generator | None = None,
    forecast: HeadroomForecast | None = None,
) -> ScheduleResult:
    """Run one system over the trace window that follows the history window (see module docstring).

    ``cpu`` is the (scaled) tenant series [n_tenants, n_slots]; the simulation starts at slot
    ``history_days / interval`` and wraps around the end of the trace if it runs past it.
    """
    uses_h = system in CLASS_SYSTEMS
    uses_forecast = system in FORECAST_SYSTEMS
    if uses_forecast and (forecast is None or len(forecast.tenants) != dc.n_tenants):
        raise ValueError(f"{system.value} needs a HeadroomForecast over the datacenter's {dc.n_tenants} tenants")
    growth = np.zeros(dc.n_servers, dtype=np.int64)
    if uses_h and (router is None or select_rng is None):
        raise ValueError("YARN-H needs a ClassRouter and a select_rng")
    wall0 = time.perf_counter()
    interval_s = dc.series.interval_s
    n_slots = cpu.shape[1]
    slot0 = int(round(config.history_days * DAY_S / interval_s)) % n_slots
    n = dc.n_servers
    cores = np.floor(dc.inventory.cores).astype(np.int64)
    reserve = np.ceil(config.reserve_frac * cores - 1e-9).astype(np.int64)
    tenant = dc.server_tenant
    duration_s = config.days * DAY_S
    end_limit_s = duration_s + config.drain_days * DAY_S
    dt = config.step_s
    task_sigma = workload.config.task_sigma

    # ---- jobs and vertices, as flat arrays over every arrival ---------------------------------------
    n_jobs = arrivals.time_s.shape[0]
    templates = workload.templates
    nv = np.array([templates[t].n_vertices for t in arrivals.template], dtype=np.int64)
    vstart = np.concatenate([[0], np.cumsum(nv)])
    v_job = np.repeat(np.arange(n_jobs), nv)
    v_tasks = np.concatenate([templates[t].tasks for t in arrivals.template]) if n_jobs else np.zeros(0, np.int64)
    v_len = (
        np.concatenate([templates[t].length_s * arrivals.length_noise[j] for j, t in enumerate(arrivals.template)])
        if n_jobs
        else np.zeros(0)
    )
    src = np.concatenate([templates[t].edge_src + vstart[j] for j, t in enumerate(arrivals.template)] + [[]])
    dst = np.concatenate([templates[t].edge_dst + vstart[j] for j, t in enumerate(arrivals.template)] + [[]])
    src, dst = src.astype(np.int64), dst.astype(np.int64)
    n_vert = int(vstart[-1])
    v_parents = np.bincount(dst, minlength=n_vert).astype(np.int64)
    order = np.argsort(src, kind="stable")
    child = dst[order]
    child_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n_vert))])
    v_pending = v_tasks.copy()
    v_done = np.zeros(n_vert, dtype=np.int64)
    j_vleft = nv.copy()
    j_finish = np.full(n_jobs, np.nan)
    j_classes: list[np.ndarray | None] = [None] * n_jobs
    j_active = np.zeros(n_jobs, dtype=bool)  # arrived and allowed to launch
    j_progress = np.zeros(n_jobs)  # last time a YARN-H job got a container (or its classes)
    reselections = 0
    last_duration: dict[int, float] = {}
    waiting: list[int] = []  # YARN-H jobs without classes yet, in arrival order

    run = _Containers()
    killed = 0
    wasted = 0.0
    overcommit = 0.0
    sum_primary = 0.0
    sum_cpu = 0.0
    cpu_now = 0.0
    sum_secondary = 0.0
    sum_waiting = 0
    steps = 0
    next_job = 0
    oldest = 0  # first job that is not finished
    slot = -1
    cap = np.zeros(n, dtype=np.int64)
    primary = np.zeros(n, dtype=np.int64)
    frac = np.zeros(n)
    agents = None if system is YarnSystem.STOCK else SimAgents(cores, reserve, config.agent)
    total_cores = float(cores.sum())
    t = 0.0
    progress_every = max(1, int(DAY_S / dt))
    while True:
        # 1. slot change: capacity, kills.
        s = (slot0 + int(t // interval_s)) % n_slots
        if s != slot:
            slot = s
            frac = cpu[tenant, s].astype(np.float64)
            cpu_now = float((frac * cores).sum())
            primary = np.ceil(frac * cores - 1e-6).astype(np.int64)
            if uses_forecast:
                assert forecast is not None
                growth = forecast.growth_cores(tenant, cores, primary, dc.series.start_s + s * interval_s)
            if system is YarnSystem.STOCK:
                cap = cores - reserve
        if agents is not None:
            # Every server's agent decides (agent.decide through the adapter): kills and the cores
            # YARN may use there until the next step.
            victims = agents.tick(t, dt, primary, frac * cores, run.server, run.start, run.seq)
            if victims.size:
                killed += int(victims.shape[0])
                wasted += float((t - run.start[victims]).sum())
                np.add.at(v_pending, run.vertex[victims], 1)
                mask = np.ones(run.server.shape[0], dtype=bool)
                mask[victims] = False
                run.keep(mask)
            cap = agents.advertised
        # 2. completions.
        fin = run.end <= t
        if fin.any():
            fv = run.vertex[fin]
            fend = run.end[fin]
            np.add.at(v_done, fv, 1)
            run.keep(~fin)
            cand = np.unique(fv)
            complete = cand[v_done[cand] == v_tasks[cand]]
            if complete.size:
                vend = np.zeros(n_vert)  # only entries of ``complete`` are read
                np.maximum.at(vend, fv, fend)
                lo, hi = child_ptr[complete], child_ptr[complete + 1]
                cnt = hi - lo
                if cnt.sum():
                    idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
                    np.subtract.at(v_parents, child[idx], 1)
                cj = v_job[complete]
                np.subtract.at(j_vleft, cj, 1)
                for j in np.unique(cj):
                    if j_vleft[j] == 0:
                        fin_t = float(vend[complete[cj == j]].max())
                        j_finish[j] = fin_t
                        j_active[j] = False
                        last_duration[int(arrivals.template[j])] = fin_t - float(arrivals.time_s[j])
                while oldest < n_jobs and not np.isnan(j_finish[oldest]):
                    oldest += 1
        # 3. arrivals.
        while next_job < n_jobs and arrivals.time_s[next_job] <= t:
            if uses_h:
                waiting.append(next_job)
            else:
                j_active[next_job] = True
            next_job += 1
        used = np.bincount(run.server, minlength=n)
        free = np.maximum(0, cap - used)
        # 4. launch.
        router_fresh = False  # YARN-H: class use is pushed to the selector only before a decision
        if uses_h:
            assert router is not None and select_rng is not None
            if waiting:
                router.update(primary, used)
                router_fresh = True
            still: list[int] = []
            for j in waiting:
                tmpl = int(arrivals.template[j])
                classes = router.route(templates[tmpl], last_duration.get(tmpl), select_rng)
                if classes.size:
                    j_classes[j] = classes
                    j_active[j] = True
                    j_progress[j] = t
                elif t - float(arrivals.time_s[j]) >= config.h_max_wait_s or uses_forecast:
                    j_classes[j] = router.all_classes
                    j_active[j] = True
                    j_progress[j] = t
                else:
                    still.append(j)
            waiting = still
            sum_waiting += len(waiting)
        lo_v, hi_v = int(vstart[oldest]), int(vstart[next_job])
        window = slice(lo_v, hi_v)
        ready = (v_parents[window] == 0) & (v_pending[window] > 0) & j_active[v_job[window]]
        rv = np.flatnonzero(ready) + lo_v
        if rv.size and free.any():
            if uses_forecast:
                safe = safe_cores(free, growth)
                if uses_h:
                    assert router is not None
                    jobs_ready = v_job[rv]
                    groups = np.split(rv, np.flatnonzero(np.diff(jobs_ready)) + 1)
                else:
                    groups = [rv]
                for grp in groups:
                    prefer = None
                    if uses_h:
                        job_classes = j_classes[int(v_job[grp[0]])]
                        assert job_classes is not None and router is not None
                        prefer = router.servers_of(job_classes)
                    want = int(v_pending[grp].sum())
                    chosen = choose_safe_first(free, safe, prefer, want, config.forecast_spill, place_rng)
                    _launch(run, chosen, grp, v_pending, v_len, t, task_rng, task_sigma)
                    if not free.any():
                        break
            elif uses_h:
                assert router is not None and select_rng is not None
                jobs_ready = v_job[rv]
                bounds = np.flatnonzero(np.diff(jobs_ready)) + 1
                for grp in np.split(rv, bounds):
                    j = int(v_job[grp[0]])
                    job_classes = j_classes[j]
                    assert job_classes is not None
                    servers = router.servers_of(job_classes)
                    servers = servers[free[servers] > 0]
                    if servers.size == 0:
                        stalled = t - j_progress[j]
                        if config.h_reselect_after_s > 0 and stalled >= config.h_reselect_after_s:
                            if not router_fresh:
                                router.update(primary, np.bincount(run.server, minlength=n))
                                router_fresh = True
                            tmpl = int(arrivals.template[j])
                            again = router.route(templates[tmpl], last_duration.get(tmpl), select_rng)
                            if again.size:
                                j_classes[j] = again
                                j_progress[j] = t
                                reselections += 1
                        continue
                    want = int(v_pending[grp].sum())
                    chosen = choose_proportional(free, servers, want, place_rng)
                    j_progress[j] = t
                    _launch(run, chosen, grp, v_pending, v_len, t, task_rng, task_sigma)
                    np.subtract.at(free, chosen, 1)
                    if not free.any():
                        break
            else:
                servers = np.flatnonzero(free > 0)
                want = int(min(v_pending[rv].sum(), free.sum()))
                spread = system is YarnSystem.PT_SPREAD or config.pt_server_choice is ServerChoice.PROPORTIONAL
                choose = choose_proportional if spread else _choose_fill
                chosen = choose(free, servers, want, place_rng)
                _launch(run, chosen, rv, v_pending, v_len, t, task_rng, task_sigma)
        # metrics for this step.
        used = np.bincount(run.server, minlength=n)
        sum_primary += float(primary.sum())
        sum_cpu += float(cpu_now)
        sum_secondary += float(used.sum())
        if system is YarnSystem.STOCK:
            overcommit += float(np.maximum(0, primary + used - cores).sum()) * dt
        steps += 1
        if steps % progress_every == 0:
            logger.info(
                "%s day %.0f: %d running, %d jobs done of %d arrived, %d killed",
                system.value, t / DAY_S, run.server.shape[0], int((~np.isnan(j_finish)).sum()), next_job, killed,
            )
        t += dt
        if t >= duration_s and (oldest >= n_jobs or t >= end_limit_s):
            break
    finish = np.where(np.isnan(j_finish), t, j_finish)
    times = finish - arrivals.time_s
    return ScheduleResult(
        system=system,
        avg_job_time_s=float(times.mean()) if n_jobs else 0.0,
        killed_tasks=killed,
        utilization=sum_cpu / steps / total_cores,
        total_utilization=(sum_primary + sum_secondary) / steps / total_cores,
        jobs=n_jobs,
        unfinished_jobs=int(np.isnan(j_finish).sum()),
        wasted_core_s=wasted,
        overcommit_core_s=overcommit,
        waiting_jobs_avg=sum_waiting / steps,
        reselections=reselections,
        wall_s=time.perf_counter() - wall0,
    )


def _launch(
    run: _Containers,
    chosen: np.ndarray,
    ready_vertices: np.ndarray,
    v_pending: np.ndarray,
    v_len: np.ndarray,
    t: float,
    task_rng: np.random.Generator,
    task_sigma: float,
) -> None:
    """Give the ``len(chosen)`` containers to the ready vertices' pending tasks, in vertex order."""
    n = int(chosen.shape[0])
    if n == 0:
        return
    pend = v_pending[ready_vertices]
    cum = np.cumsum(pend)
    take = np.minimum(pend, np.maximum(0, n - (cum - pend)))
    verts = np.repeat(ready_vertices, take)
    v_pending[ready_vertices] -= take
    end = t + v_len[verts] * task_rng.lognormal(0.0, task_sigma, verts.shape[0])
    run.add(chosen[: verts.shape[0]], verts, t, end)
