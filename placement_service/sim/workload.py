"""Batch workload: TPC-DS-shaped DAG jobs arriving as a Poisson process, scaled to the datacenter.

A job is one of the bundled DAGs (the policy core's ``tpcds_jobs``, or any list of ``Job``). Its
vertices run one container (one core) per task; a vertex starts when all its parents finished.

Scaling (the paper multiplies lengths and container usage to load thousands of servers):

- task length of vertex ``v`` of query ``q``: ``task_s * length_scale * m_qv * e`` where ``m_qv`` is
  log-normal (median 1, ``vertex_sigma``), drawn once per query and run (so a query keeps its shape
  from one arrival to the next and its last duration predicts the next one), and ``e`` log-normal
  (``instance_sigma``) per arrival;
- task count: ``max(1, round(tasks_v * container_scale))``. When ``container_scale`` is None it is
  chosen so the offered load (core-seconds of tasks per second, at the mean inter-arrival time)
  equals ``offered_core_frac`` of the datacenter's cores (default 5%). The workload therefore stays
  fixed across a utilization sweep and higher primary load leaves less room for it: with a 33%
  reserve and primaries rounded up to whole cores, the room left at ~55-60% primary utilization is
  about that 5%, which is where the paper's job times climb steeply.

Job-type thresholds: a job is short / medium / long from its last duration; the simulator sets the
two thresholds at the 1/3 and 2/3 quantiles of the queries' isolated critical-path durations, so
each type holds about a third of the queries (the paper picks them so each type's demand matches
the capacity of its preferred classes; quantiles are the simple stand-in, documented in
``docs/simulator.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from placement_service.core.dag import max_concurrency, vertex_levels
from placement_service.core.types import Job

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkloadConfig:
    mean_interarrival_s: float = 300.0
    task_s: float = 60.0
    length_scale: float = 5.0
    vertex_sigma: float = 0.6
    instance_sigma: float = 0.15
    task_sigma: float = 0.1
    container_scale: float | None = None
    offered_core_frac: float = 0.05

    def __post_init__(self) -> None:
        if self.mean_interarrival_s <= 0 or self.task_s <= 0 or self.length_scale <= 0:
            raise ValueError("mean_interarrival_s, task_s and length_scale must be > 0")
        if self.container_scale is not None and self.container_scale <= 0:
            raise ValueError("container_scale must be > 0")
        if not 0 < self.offered_core_frac:
            raise ValueError("offered_core_frac must be > 0")


@dataclass(frozen=True)
class JobTemplate:
    """One query, as arrays in topological order: tasks and base task length per vertex, edges."""

    name: str
    tasks: np.ndarray  # int64 [n_vertices], scaled task counts
    length_s: np.ndarray  # float64 [n_vertices], base task length (before per-arrival noise)
    edge_src: np.ndarray  # int64 local vertex index
    edge_dst: np.ndarray
    job: Job  # the scaled Job as class selection sees it (task counts scaled)
    max_concurrency: int
    critical_path_s: float  # isolated duration: longest path of task lengths

    @property
    def n_vertices(self) -> int:
        return int(self.tasks.shape[0])


@dataclass(frozen=True)
class Workload:
    templates: tuple[JobTemplate, ...]
    container_scale: float
    short_max_s: float
    long_min_s: float
    config: WorkloadConfig

    def offered_core_s_per_s(self) -> float:
        work = np.mean([float((t.tasks * t.length_s).sum()) for t in self.templates])
        return float(work / self.config.mean_interarrival_s)


def _order(job: Job) -> list[str]:
    levels = vertex_levels(job)
    return sorted(job.vertices, key=lambda v: (levels[v], v))


def build_workload(
    jobs: Sequence[Job],
    config: WorkloadConfig,
    rng: np.random.Generator,
    *,
    total_cores: float,
) -> Workload:
    """Scale the queries to the datacenter (see the module docstring); ``rng`` = stream ``task-lengths``."""
    if not jobs:
        raise ValueError("the workload needs at least one job")
    raw: list[tuple[Job, list[str], np.ndarray, np.ndarray]] = []
    for job in jobs:
        order = _order(job)
        tasks = np.array([int(job.vertices[v]) for v in order], dtype=np.int64)
        length = config.task_s * config.length_scale * rng.lognormal(0.0, config.vertex_sigma, len(order))
        raw.append((job, order, tasks, length))
    scale = config.container_scale
    if scale is None:
        work = float(np.mean([(t * ln).sum() for _, _, t, ln in raw]))
        scale = config.offered_core_frac * total_cores * config.mean_interarrival_s / work
    templates = []
    for job, order, tasks, length in raw:
        pos = {v: i for i, v in enumerate(order)}
        scaled = np.maximum(1, np.rint(tasks * scale)).astype(np.int64)
        src = np.array([pos[e.src] for e in job.edges], dtype=np.int64)
        dst = np.array([pos[e.dst] for e in job.edges], dtype=np.int64)
        sjob = replace(job, vertices={v: int(scaled[pos[v]]) for v in order}, last_duration_s=None)
        finish = length.copy()
        for i in range(len(order)):  # topological order: parents come first
            parents = src[dst == i]
            if parents.size:
                finish[i] = length[i] + finish[parents].max()
        templates.append(
            JobTemplate(job.name, scaled, length, src, dst, sjob, max_concurrency(sjob), float(finish.max()))
        )
    cp = np.array([t.critical_path_s for t in templates])
    short_max_s, long_min_s = (float(q) for q in np.quantile(cp, [1 / 3, 2 / 3]))
    wl = Workload(tuple(templates), float(scale), short_max_s, long_min_s, config)
    logger.info(
        "workload: %d queries, container scale %.4g, offered %.0f cores, thresholds %.0f / %.0f s",
        len(templates),
        scale,
        wl.offered_core_s_per_s(),
        short_max_s,
        long_min_s,
    )
    return wl


@dataclass(frozen=True)
class Arrivals:
    time_s: np.ndarray  # float64, ascending, relative to the simulation start
    template: np.ndarray  # int64 index into Workload.templates
    length_noise: np.ndarray  # float64 per-arrival multiplier of task lengths


def poisson_arrivals(
    workload: Workload, duration_s: float, arrivals_rng: np.random.Generator, jobs_rng: np.random.Generator
) -> Arrivals:
    """Poisson arrivals over ``duration_s`` (exponential gaps), each a uniformly drawn query."""
    mean = workload.config.mean_interarrival_s
    n_guess = int(duration_s / mean * 1.2 + 20)
    gaps = arrivals_rng.exponential(mean, n_guess)
    times = np.cumsum(gaps)
    while times[-1] < duration_s:
        times = np.concatenate([times, times[-1] + np.cumsum(arrivals_rng.exponential(mean, n_guess))])
    times = times[times < duration_s]
    size = int(times.shape[0])
    template = np.asarray(jobs_rng.integers(0, len(workload.templates), size))
    noise = np.asarray(jobs_rng.lognormal(0.0, workload.config.instance_sigma, size))
    return Arrivals(times, template.astype(np.int64), noise)
