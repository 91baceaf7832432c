"""Class selection: which utilization classes a batch job's containers should go to.

Procedure for one job (numbers in, class ids out):

1. Job type from the last run's duration ``d`` (seconds): ``d < short_max_s`` -> short,
   ``d >= long_min_s`` -> long, otherwise (or never ran) -> medium.
2. Demand ``req`` = peak concurrent containers of the job's DAG (``dag.max_concurrency``).
3. Headroom of each class for that type (fractions of the class's cores; ``cur`` = the class's current
   CPU, ``avg`` its average, ``peak`` its peak):

   - short:  ``1 - cur``                 (a short job only needs what is free right now)
   - medium: ``1 - max(avg, cur)``
   - long:   ``1 - max(peak, cur)``      (a long job must survive the class's peaks)

   clipped to [0, 1].
4. Capacity (containers) = ``cores * max(0, headroom - reserve_frac) / container_cores``.
   ``reserve_frac`` is the fraction of the cores kept back for the primary tenant.
5. Weighted headroom = ``headroom * weight[job type][class pattern]``. Default ranking weights
   (higher = preferred): long: constant 3 > periodic 2 > unpredictable 1; short: unpredictable 3 >
   periodic 2 > constant 1; medium: periodic 3 > constant 2 > unpredictable 1. A weight of 0 bars
   that pattern for that job type.
6. If some classes fit alone (capacity >= req, weighted headroom > 0), pick one of them with
   probability proportional to weighted headroom. Else, if the eligible classes together fit, draw
   classes one by one without replacement, each with probability proportional to its weighted
   headroom among those left, until their combined capacity covers ``req``. Else pick nothing
   (empty tuple: the job should wait).

Classes without inventory (``cores == 0``, e.g. clustering ran without an inventory): capacity is
unknown, so such a class counts as fitting any job whenever ``headroom - reserve_frac > 0``; the
choice then rests on weighted headroom alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement_service.core.dag import max_concurrency
from placement_service.core.types import (
    ClassTable,
    Job,
    JobType,
    Pattern,
    PolicyError,
    Selection,
    UtilizationClass,
)

logger = logging.getLogger(__name__)

JOB_TYPES: tuple[JobType, ...] = (JobType.SHORT, JobType.MEDIUM, JobType.LONG)
PATTERNS: tuple[Pattern, ...] = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)


def default_weights() -> dict[JobType, dict[Pattern, float]]:
    """Ranking weights per job type and class pattern (rank 1 -> 3, rank 2 -> 2, rank 3 -> 1)."""
    return {
        JobType.LONG: {Pattern.CONSTANT: 3.0, Pattern.PERIODIC: 2.0, Pattern.UNPREDICTABLE: 1.0},
        JobType.SHORT: {Pattern.UNPREDICTABLE: 3.0, Pattern.PERIODIC: 2.0, Pattern.CONSTANT: 1.0},
        JobType.MEDIUM: {Pattern.PERIODIC: 3.0, Pattern.CONSTANT: 2.0, Pattern.UNPREDICTABLE: 1.0},
    }


@dataclass(frozen=True)
class SelectionConfig:
    """Settings of class selection.

    ``short_max_s``: a job whose last run took less than this is short (default 5 min).
    ``long_min_s``: a job whose last run took at least this is long (default 1 h). Set both from the
    historical distribution of job lengths (for example its 50th and 90th percentiles).
    ``weights``: ranking weight per job type and pattern (see the module docstring).
    ``reserve_frac``: fraction of a class's cores kept for the primary tenant (0..1).
    ``container_cores``: cores per container (> 0).
    """

    short_max_s: float = 300.0
    long_min_s: float = 3600.0
    weights: Mapping[JobType, Mapping[Pattern, float]] = field(default_factory=default_weights)
    reserve_frac: float = 0.0
    container_cores: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.short_max_s <= self.long_min_s) or not math.isfinite(self.long_min_s):
            raise PolicyError(
                f"SelectionConfig: need 0 <= short_max_s <= long_min_s (finite), "
                f"got {self.short_max_s} and {self.long_min_s}"
            )
        if not (0.0 <= self.reserve_frac < 1.0):
            raise PolicyError(f"SelectionConfig: reserve_frac must be in [0, 1), got {self.reserve_frac}")
        if not (self.container_cores > 0.0 and math.isfinite(self.container_cores)):
            raise PolicyError(f"SelectionConfig: container_cores must be > 0, got {self.container_cores}")
        for jt in JOB_TYPES:
            row = self.weights.get(jt)
            if row is None:
                raise PolicyError(f"SelectionConfig: weights: missing job type {jt.value!r}")
            for p in PATTERNS:
                w = row.get(p)
                if w is None or not math.isfinite(w) or w < 0.0:
                    raise PolicyError(
                        f"SelectionConfig: weights[{jt.value}][{p.value}] must be a number >= 0, got {w!r}"
                    )


def thresholds_from_history(
    durations_s: Sequence[float], *, min_jobs: int = 30, quantiles: tuple[float, float] = (1 / 3, 2 / 3)
) -> tuple[float, float] | None:
    """(short_max_s, long_min_s) from the job lengths seen: their ``quantiles`` (default thirds, so
    each type holds about a third of the jobs, as the simulator does); None below ``min_jobs``."""
    d = np.asarray([x for x in durations_s if x is not None and math.isfinite(x) and x >= 0.0], dtype=np.float64)
    if len(d) < min_jobs:
        return None
    lo, hi = (float(v) for v in np.quantile(d, quantiles))
    return lo, max(lo, hi)


def job_type(last_duration_s: float | None, config: SelectionConfig) -> JobType:
    """Short / medium / long from the last run's duration (seconds); unknown (None) = medium."""
    if last_duration_s is None:
        return JobType.MEDIUM
    d = float(last_duration_s)
    if not math.isfinite(d) or d < 0.0:
        raise PolicyError(f"last_duration_s must be a finite number of seconds >= 0, got {last_duration_s!r}")
    if d < config.short_max_s:
        return JobType.SHORT
    if d >= config.long_min_s:
        return JobType.LONG
    return JobType.MEDIUM


def headroom(job_type: JobType, cls: UtilizationClass, current_cpu: float | None = None) -> float:
    """Free fraction of a class's cores that a job of this type can count on (0..1).

    short: ``1 - cur``; medium: ``1 - max(avg, cur)``; long: ``1 - max(peak, cur)``, where ``cur`` is
    ``current_cpu`` when given, else the class's ``current_cpu``.
    """
    cur = cls.current_cpu if current_cpu is None else float(current_cpu)
    if job_type is JobType.SHORT:
        used = cur
    elif job_type is JobType.MEDIUM:
        used = max(cls.avg_cpu, cur)
    else:
        used = max(cls.peak_cpu, cur)
    return min(1.0, max(0.0, 1.0 - used))


class ClassSelector:
    """Class selection over a fixed set of classes, with per-class arrays precomputed.

    ``update_current`` refreshes the classes' current CPU (from node reports) between decisions;
    ``select`` / ``select_typed`` are the decisions. Not thread-safe: one selector per thread, or
    a lock around ``update_current``.
    """

    def __init__(
        self, classes: Sequence[UtilizationClass] | ClassTable, config: SelectionConfig | None = None
    ) -> None:
        if isinstance(classes, ClassTable):
            classes = classes.classes
        self.config = config or SelectionConfig()
        self.classes: tuple[UtilizationClass, ...] = tuple(classes)
        self.ids: tuple[str, ...] = tuple(c.id for c in self.classes)
        if len(set(self.ids)) != len(self.ids):
            raise PolicyError("ClassSelector: class ids must be unique")
        self._pos = {cid: i for i, cid in enumerate(self.ids)}
        for c in self.classes:
            for label, v in (
                ("avg_cpu", c.avg_cpu),
                ("peak_cpu", c.peak_cpu),
                ("current_cpu", c.current_cpu),
            ):
                _check_frac(v, f"class {c.id!r}: {label}")
            if not (math.isfinite(c.cores) and c.cores >= 0.0):
                raise PolicyError(f"class {c.id!r}: cores must be >= 0, got {c.cores}")
        self._avg = np.clip(np.array([c.avg_cpu for c in self.classes], dtype=np.float64), 0.0, 1.0)
        self._peak = np.clip(np.array([c.peak_cpu for c in self.classes], dtype=np.float64), 0.0, 1.0)
        self._cur = np.clip(np.array([c.current_cpu for c in self.classes], dtype=np.float64), 0.0, 1.0)
        self._cores = np.array([c.cores for c in self.classes], dtype=np.float64)
        self._weight = {
            jt: np.array([self.config.weights[jt][c.pattern] for c in self.classes], dtype=np.float64)
            for jt in JOB_TYPES
        }
        self._live = np.ones(len(self.classes), dtype=bool)
        self._capacity: dict[JobType, np.ndarray] = {}
        self._weighted: dict[JobType, np.ndarray] = {}
        self._eligible_total: dict[JobType, float] = {}
        self._refresh()

    def set_live(self, live: Collection[str] | None) -> None:
        """The classes with a node that reported lately (``None``: every class, the table alone).

        A class learnt from history may have no node in the scheduler today (its servers run no
        NodeManager, or none reports): its YARN partition is empty, and a job sent there waits in
        ACCEPTED for ever. Such a class is never chosen, alone or among several. All-or-nothing: an
        unknown class raises before anything changes.
        """
        if live is None:
            mask = np.ones(len(self.classes), dtype=bool)
        else:
            unknown = sorted(set(live) - set(self.ids))
            if unknown:
                raise PolicyError(f"set_live: unknown class {unknown[0]!r}")
            mask = np.array([cid in live for cid in self.ids], dtype=bool)
        self._live = mask
        self._refresh()

    def live(self) -> set[str] | None:
        """The classes :meth:`set_live` kept (``None``: every class)."""
        return None if bool(self._live.all()) else {cid for cid, ok in zip(self.ids, self._live, strict=True) if ok}

    def update_current(self, current: Mapping[str, float]) -> None:
        """Set the current CPU fraction (0..1) of the named classes; other classes keep theirs.

        All-or-nothing: an unknown class or a bad value raises before anything changes.
        """
        updates = []
        for cid, v in current.items():
            i = self._pos.get(cid)
            if i is None:
                raise PolicyError(f"update_current: unknown class {cid!r}")
            updates.append((i, _check_frac(v, f"update_current[{cid!r}]")))
        for i, v in updates:
            self._cur[i] = v
        self._refresh()

    def current(self) -> dict[str, float]:
        """The current CPU fraction of every class, as last updated."""
        return {cid: float(v) for cid, v in zip(self.ids, self._cur, strict=True)}

    def headrooms(self, job_type: JobType) -> np.ndarray:
        """Headroom of every class for ``job_type`` (array in ``self.ids`` order, 0..1)."""
        if job_type is JobType.SHORT:
            used = self._cur
        elif job_type is JobType.MEDIUM:
            used = np.maximum(self._avg, self._cur)
        else:
            used = np.maximum(self._peak, self._cur)
        return np.clip(1.0 - used, 0.0, 1.0)

    def capacities(self, job_type: JobType) -> np.ndarray:
        """Containers each class can take for ``job_type`` (``inf`` = unknown capacity, cores == 0)."""
        return self._capacity[job_type].copy()

    def weighted_headrooms(self, job_type: JobType) -> np.ndarray:
        """Headroom times ranking weight, 0 for classes with no usable headroom."""
        return self._weighted[job_type].copy()

    def _refresh(self) -> None:
        reserve = self.config.reserve_frac
        for jt in JOB_TYPES:
            h = self.headrooms(jt)
            usable = np.maximum(0.0, h - reserve)
            cap = self._cores * usable / self.config.container_cores
            cap = np.where((self._cores == 0.0) & (usable > 0.0), np.inf, cap)
            weighted = np.where((usable > 0.0) & self._live, h * self._weight[jt], 0.0)
            self._capacity[jt] = cap
            self._weighted[jt] = weighted
            self._eligible_total[jt] = float(cap[weighted > 0.0].sum())

    def select(self, job: Job, rng: np.random.Generator) -> Selection:
        """Class selection for ``job`` (type from its last duration, demand from its DAG)."""
        return self.select_typed(job_type(job.last_duration_s, self.config), max_concurrency(job), rng)

    def select_typed(self, job_type: JobType, max_concurrency: int, rng: np.random.Generator) -> Selection:
        """Class selection for a job of ``job_type`` needing ``max_concurrency`` containers at once."""
        return self._select(job_type, max_concurrency, rng, None)

    def explain(self, job: Job, rng: np.random.Generator) -> tuple[Selection, dict[str, object]]:
        """The decision of :meth:`select` (same draws from ``rng``) with every input behind it.

        The explanation names the job type and why, the demand, each class's formula inputs
        (avg / peak / current CPU, the headroom formula for this type, headroom, usable headroom
        after the reserve, capacity in containers, ranking weight, weighted headroom, whether it
        fits alone), the rule that decided (one class alone, several, or none) and the draw.
        """
        jt = job_type(job.last_duration_s, self.config)
        req = max_concurrency(job)
        trace: dict[str, object] = {}
        sel = self._select(jt, req, rng, trace)
        cap, weighted, h = self._capacity[jt], self._weighted[jt], self.headrooms(jt)
        formula = {JobType.SHORT: "1 - cur", JobType.MEDIUM: "1 - max(avg, cur)", JobType.LONG: "1 - max(peak, cur)"}[jt]
        cfg = self.config
        why = ("never ran: medium" if job.last_duration_s is None else
               f"last run {job.last_duration_s:g} s; short < {cfg.short_max_s:g} s <= medium < {cfg.long_min_s:g} s <= long")
        candidates = [
            {
                "class": cid, "pattern": c.pattern.value, "avg_cpu": float(self._avg[i]), "peak_cpu": float(self._peak[i]),
                "current_cpu": float(self._cur[i]), "cores": float(self._cores[i]), "headroom_formula": formula,
                "headroom": float(h[i]), "usable_headroom": float(max(0.0, h[i] - cfg.reserve_frac)),
                "capacity_containers": None if math.isinf(cap[i]) else float(cap[i]),
                "weight": float(self._weight[jt][i]), "weighted_headroom": float(weighted[i]),
                "fits_alone": bool(cap[i] >= req and weighted[i] > 0.0), "chosen": cid in sel.classes,
                "live": bool(self._live[i]),
            }
            for i, (cid, c) in enumerate(zip(self.ids, self.classes, strict=True))
        ]
        return sel, {
            "job_type": jt.value, "job_type_reason": why, "max_concurrency": req,
            "settings": {"short_max_s": cfg.short_max_s, "long_min_s": cfg.long_min_s,
                         "reserve_frac": cfg.reserve_frac, "container_cores": cfg.container_cores},
            "capacity_formula": "cores * max(0, headroom - reserve_frac) / container_cores",
            "candidates": candidates, **trace, "classes": list(sel.classes),
        }

    def _select(
        self, job_type: JobType, max_concurrency: int, rng: np.random.Generator, trace: dict[str, object] | None
    ) -> Selection:
        req = int(max_concurrency)
        if req < 1:
            raise PolicyError(f"select: max_concurrency must be >= 1, got {max_concurrency}")
        cap = self._capacity[job_type]
        weighted = self._weighted[job_type]
        # One class alone: probability proportional to weighted headroom among the fitting ones.
        fit_w = np.where(cap >= req, weighted, 0.0)
        cum = np.cumsum(fit_w)
        total = float(cum[-1]) if len(cum) else 0.0
        if total > 0.0:
            u = rng.random()
            i = int(np.searchsorted(cum, u * total, side="right"))
            if trace is not None:
                trace.update(rule="one class fits alone: drawn with probability proportional to weighted headroom",
                             draw={"uniform": float(u), "point": float(u * total), "total_weight": total,
                                   "probabilities": {self.ids[j]: float(fit_w[j] / total)
                                                     for j in np.flatnonzero(fit_w > 0.0)}})
            return Selection(job_type, req, (self.ids[min(i, len(cum) - 1)],))
        # Several classes: weighted sampling without replacement (exponential keys E_i / w_i sorted
        # ascending give that order), taking classes until their capacity covers the demand.
        if self._eligible_total[job_type] >= req:
            idx = np.flatnonzero(weighted > 0.0)
            keys = rng.exponential(size=len(idx)) / weighted[idx]
            order = idx[np.argsort(keys, kind="stable")]
            covered = np.cumsum(cap[order])
            k = min(int(np.searchsorted(covered, req, side="left")), len(order) - 1)
            if trace is not None:
                trace.update(rule="no class fits alone; eligible classes together do: drawn one by one without "
                             "replacement (exponential keys / weighted headroom) until their capacity covers the demand",
                             draw={"order": [self.ids[j] for j in order],
                                   "keys": {self.ids[j]: float(kv) for j, kv in zip(idx, keys, strict=True)},
                                   "cumulative_capacity": [float(x) for x in covered[: k + 1]]})
            return Selection(job_type, req, tuple(self.ids[j] for j in order[: k + 1]))
        if trace is not None:
            trace.update(rule=f"the eligible classes together hold {self._eligible_total[job_type]:g} containers, "
                         f"fewer than the {req} needed: none chosen (the job should wait)", draw=None)
        return Selection(job_type, req, ())


_FRAC_SLACK = 1e-6  # float32 class series can overshoot 1.0 by a rounding step


def _check_frac(value: float, where: str) -> float:
    """A CPU fraction in [0, 1]; values within ``_FRAC_SLACK`` outside are rounding and clipped."""
    v = float(value)
    if not (-_FRAC_SLACK <= v <= 1.0 + _FRAC_SLACK):
        raise PolicyError(f"{where}: CPU fraction must be in [0, 1], got {value!r}")
    return min(1.0, max(0.0, v))
