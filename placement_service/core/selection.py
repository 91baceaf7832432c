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
from collections.abc import Mapping, Sequence
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
        self._capacity: dict[JobType, np.ndarray] = {}
        self._weighted: dict[JobType, np.ndarray] = {}
        self._eligible_total: dict[JobType, float] = {}
        self._refresh()

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
            weighted = np.where(usable > 0.0, h * self._weight[jt], 0.0)
            self._capacity[jt] = cap
            self._weighted[jt] = weighted
            self._eligible_total[jt] = float(cap[weighted > 0.0].sum())

    def select(self, job: Job, rng: np.random.Generator) -> Selection:
        """Class selection for ``job`` (type from its last duration, demand from its DAG)."""
        return self.select_typed(job_type(job.last_duration_s, self.config), max_concurrency(job), rng)

    def select_typed(self, job_type: JobType, max_concurrency: int, rng: np.random.Generator) -> Selection:
        """Class selection for a job of ``job_type`` needing ``max_concurrency`` containers at once."""
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
            i = int(np.searchsorted(cum, rng.random() * total, side="right"))
            return Selection(job_type, req, (self.ids[min(i, len(cum) - 1)],))
        # Several classes: weighted sampling without replacement (exponential keys E_i / w_i sorted
        # ascending give that order), taking classes until their capacity covers the demand.
        if self._eligible_total[job_type] >= req:
            idx = np.flatnonzero(weighted > 0.0)
            keys = rng.exponential(size=len(idx)) / weighted[idx]
            order = idx[np.argsort(keys, kind="stable")]
            covered = np.cumsum(cap[order])
            k = min(int(np.searchsorted(covered, req, side="left")), len(order) - 1)
            return Selection(job_type, req, tuple(self.ids[j] for j in order[: k + 1]))
        return Selection(job_type, req, ())


_FRAC_SLACK = 1e-6  # float32 class series can overshoot 1.0 by a rounding step


def _check_frac(value: float, where: str) -> float:
    """A CPU fraction in [0, 1]; values within ``_FRAC_SLACK`` outside are rounding and clipped."""
    v = float(value)
    if not (-_FRAC_SLACK <= v <= 1.0 + _FRAC_SLACK):
        raise PolicyError(f"{where}: CPU fraction must be in [0, 1], got {value!r}")
    return min(1.0, max(0.0, v))
