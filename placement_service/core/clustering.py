"""Utilization clustering: tenants grouped into utilization classes within each pattern.

Patterns come from ``patterns.py`` (FFT frequency profile); the full rationale, with measured
numbers, is in ``docs/clustering.md``.

2. **Classes** (``UtilizationClustering``): K-means within each pattern on features in CPU-fraction
   units (distances are CPU differences, no rescaling): average and peak (``peak_percentile``), plus
   for periodic tenants the hour-of-day profile minus the average, divided by ``sqrt(24)`` so the
   whole profile weighs as one RMS difference. ``k`` per pattern by ``k_rule`` (default: the
   smallest k whose RMS distance to the class centres is <= ``class_tolerance_cpu``). Each class is
   tagged (avg, peak, current) from the server-weighted average series of its tenants.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from threadpoolctl import threadpool_limits

from placement_service.core.patterns import (  # re-exported: the pattern API lives in patterns.py
    DAY_S,
    PATTERN_ORDER,
    FrequencyProfile,
    HarmonicWindow,
    PatternThresholds,
    classify_patterns,
    filled_chunks,
    frequency_profile,
    harmonic_windows,
    row_percentile,
    scan_series,
)
from placement_service.core.types import (
    ClassTable,
    GridCell,
    Pattern,
    PolicyError,
    TenantSeries,
    UtilizationClass,
)

__all__ = [
    "FrequencyProfile",
    "HarmonicWindow",
    "PatternThresholds",
    "UtilizationClustering",
    "classify_patterns",
    "frequency_profile",
    "harmonic_windows",
]

logger = logging.getLogger(__name__)

_DEFAULT_THRESHOLDS = PatternThresholds()
K_RULES = ("tolerance", "silhouette", "fixed")


class UtilizationClustering(BaseEstimator):  # type: ignore[misc]
    """Patterns, then K-means classes within each pattern (scikit-learn style; see the module docstring).

    Parameters (keyword-only, stored as given, checked in ``fit``):

    - ``k_rule`` -- how many classes a pattern gets: ``"tolerance"`` (default) takes the smallest k
      whose classes are tight, i.e. the RMS distance of the tenants' features to their class centre
      is <= ``class_tolerance_cpu`` (the class's tags then describe each member to within that much
      CPU, which is what class selection relies on); ``"silhouette"`` takes the k in 2..max with the
      best silhouette score (most separated classes; on smooth spreads of utilization it tends to
      pick 2); ``"fixed"`` uses ``n_classes_per_pattern``. Always capped by
      ``max_classes_per_pattern`` (each class is a YARN node label and a queue, so keep them few)
      and by the number of distinct tenants.
    - ``peak_percentile``: the percentile of a series used as its peak.
    - ``unpredictable_peak_sigmas``: the replica-placement grid ranks tenants by their peak; for an
      *unpredictable* tenant the history's percentile understates what the next weeks bring (its
      bursts come at no fixed time), so with ``k > 0`` its grid peak is ``max(peak, mean + k * std)``.
      Default 0: the plain percentile, as in the paper. Periodic and constant tenants always keep
      their percentile; class tags are unaffected. Result in ``tenant_grid_peak_cpu_``.
      Experimental and off by default: with ``k = 4`` the simulator's failed accesses fell on two
      generated 5,000-server datacenters at 40-50% utilization, rose on a third at 40% and on a
      600-server one by ~1000x (see ``docs/simulator.md``).
    - The pattern thresholds of ``PatternThresholds`` (same names).
    - ``random_state`` seeds K-means (and the silhouette sample); ``chunk_rows`` bounds memory (rows
      per FFT batch).

    Fitted attributes: ``patterns_`` (tenant -> Pattern), ``tenant_class_`` (tenant -> class id),
    ``classes_`` (``UtilizationClass`` by pattern -- periodic, constant, unpredictable -- then by
    ascending ``avg_cpu``; ids ``<pattern>-<k>`` with k from 0 in that order), ``profile_``
    (``FrequencyProfile``, rows in series order), ``tenant_avg_cpu_`` / ``tenant_peak_cpu_``
    (tenant -> CPU fraction), ``tenant_grid_peak_cpu_`` (the peak the placement grid ranks by, see
    ``unpredictable_peak_sigmas``), ``class_cpu_`` (class series, [n_classes, n_slots] float32 in
    ``classes_`` order), ``k_scores_`` (pattern -> {k: RMS spread or silhouette} of the k tried),
    ``own_window_tenants_`` (tenants observed over a short part of the grid, whose pattern, average
    and peak are of their own window; see ``patterns.py``).
    """

    def __init__(
        self,
        *,
        max_classes_per_pattern: int = 8,
        k_rule: str = "tolerance",
        class_tolerance_cpu: float = 0.05,
        n_classes_per_pattern: int = 4,
        peak_percentile: float = 99.0,
        unpredictable_peak_sigmas: float = 0.0,
        periodic_min_energy_frac: float = _DEFAULT_THRESHOLDS.periodic_min_energy_frac,
        periodic_min_std_cpu: float = _DEFAULT_THRESHOLDS.periodic_min_std_cpu,
        constant_max_cv: float = _DEFAULT_THRESHOLDS.constant_max_cv,
        constant_max_std_cpu: float = _DEFAULT_THRESHOLDS.constant_max_std_cpu,
        daily_harmonics: int = _DEFAULT_THRESHOLDS.daily_harmonics,
        weekly_harmonics: int = _DEFAULT_THRESHOLDS.weekly_harmonics,
        periodic_min_acf: float = _DEFAULT_THRESHOLDS.periodic_min_acf,
        periodic_min_acf_rise: float = _DEFAULT_THRESHOLDS.periodic_min_acf_rise,
        periodic_acf_energy_frac: float = _DEFAULT_THRESHOLDS.periodic_acf_energy_frac,
        periodic_min_swing: float = _DEFAULT_THRESHOLDS.periodic_min_swing,
        periodic_min_cv: float = _DEFAULT_THRESHOLDS.periodic_min_cv,
        random_state: int = 0,
        chunk_rows: int = 64,
    ) -> None:
        self.max_classes_per_pattern = max_classes_per_pattern
        self.k_rule = k_rule
        self.class_tolerance_cpu = class_tolerance_cpu
        self.n_classes_per_pattern = n_classes_per_pattern
        self.peak_percentile = peak_percentile
        self.unpredictable_peak_sigmas = unpredictable_peak_sigmas
        self.periodic_min_energy_frac = periodic_min_energy_frac
        self.periodic_min_std_cpu = periodic_min_std_cpu
        self.constant_max_cv = constant_max_cv
        self.constant_max_std_cpu = constant_max_std_cpu
        self.daily_harmonics = daily_harmonics
        self.weekly_harmonics = weekly_harmonics
        self.periodic_min_acf = periodic_min_acf
        self.periodic_min_acf_rise = periodic_min_acf_rise
        self.periodic_acf_energy_frac = periodic_acf_energy_frac
        self.periodic_min_swing = periodic_min_swing
        self.periodic_min_cv = periodic_min_cv
        self.random_state = random_state
        self.chunk_rows = chunk_rows

    def thresholds(self) -> PatternThresholds:
        return PatternThresholds(
            periodic_min_energy_frac=self.periodic_min_energy_frac,
            periodic_min_std_cpu=self.periodic_min_std_cpu,
            constant_max_cv=self.constant_max_cv,
            constant_max_std_cpu=self.constant_max_std_cpu,
            daily_harmonics=self.daily_harmonics,
            weekly_harmonics=self.weekly_harmonics,
            periodic_min_acf=self.periodic_min_acf,
            periodic_min_acf_rise=self.periodic_min_acf_rise,
            periodic_acf_energy_frac=self.periodic_acf_energy_frac,
            periodic_min_swing=self.periodic_min_swing,
            periodic_min_cv=self.periodic_min_cv,
        )

    def fit(
        self,
        series: TenantSeries,
        *,
        servers_per_tenant: Mapping[str, int] | None = None,
        cores_per_tenant: Mapping[str, float] | None = None,
    ) -> UtilizationClustering:
        """Learn patterns and classes from ``series``; servers (weights) and cores size the classes.

        Runs single-threaded (BLAS and OpenMP pools limited to one thread): each numeric call here is
        small, and on a shared 2-core machine spinning thread pools made the fit ~10x slower.
        """
        with threadpool_limits(limits=1):
            return self._fit(series, servers_per_tenant, cores_per_tenant)

    def _fit(
        self,
        series: TenantSeries,
        servers_per_tenant: Mapping[str, int] | None,
        cores_per_tenant: Mapping[str, float] | None,
    ) -> UtilizationClustering:
        thresholds = self._validate(series)
        tenants = series.tenants
        servers = _per_tenant(tenants, servers_per_tenant, "servers_per_tenant", default=1.0)
        cores = _per_tenant(tenants, cores_per_tenant, "cores_per_tenant", default=0.0)
        # 1. One pass over the series: frequency profile, peak, latest value, hour-of-day profile.
        slot_start_s = series.start_s + np.arange(series.n_slots) * series.interval_s
        hour_of_slot = (np.mod(slot_start_s, DAY_S) // 3600.0).astype(np.int64)
        scan = scan_series(
            series.cpu,
            series.interval_s,
            thresholds,
            self.chunk_rows,
            peak_percentile=self.peak_percentile,
            hour_of_slot=hour_of_slot,
        )
        assert scan.peak_cpu is not None and scan.hourly_dev is not None
        patterns = scan.profile.patterns(thresholds)
        avg, peak = scan.profile.mean_cpu, scan.peak_cpu
        # 2. K-means within each pattern on CPU-unit features -> group of each tenant.
        group = np.full(len(tenants), -1, dtype=np.int64)
        group_pattern: list[Pattern] = []
        self.k_scores_: dict[str, dict[int, float]] = {}
        for pattern in PATTERN_ORDER:
            idx = np.flatnonzero(patterns == pattern)
            if idx.size == 0:
                continue
            features = np.column_stack([avg[idx], peak[idx]])
            if pattern is Pattern.PERIODIC:
                features = np.column_stack([features, scan.hourly_dev[idx] / math.sqrt(24.0)])
            labels, self.k_scores_[pattern.value] = self._kmeans(features)
            group[idx] = labels + len(group_pattern)
            group_pattern.extend([pattern] * (int(labels.max()) + 1))
        # 3. Class series = server-weighted average of the members' series (second pass, by chunks).
        weights = np.zeros((len(group_pattern), len(tenants)), dtype=np.float32)
        for g in range(len(group_pattern)):
            members = np.flatnonzero(group == g)
            w = servers[members] if servers[members].sum() > 0 else np.ones(members.size)
            weights[g, members] = w / w.sum()
        class_cpu = np.zeros((len(group_pattern), series.n_slots), dtype=np.float32)
        # (a row's mean over its observed samples is the same on the grid and on its own window)
        chunks = filled_chunks(series.cpu, self.chunk_rows, scan.n_missing, scan.profile.mean_cpu)
        for lo, hi, block, _mean, _missing in chunks:
            class_cpu += weights[:, lo:hi] @ block
        # float32 weighted sums of fractions can land a hair outside [0, 1] (1.0000001 for a
        # saturated class); the tags are fractions of the servers' cores, so clip them here once.
        np.clip(class_cpu, 0.0, 1.0, out=class_cpu)
        # 4. Tag each class (avg, peak = max(percentile, avg), current = last slot), order, name.
        class_avg = class_cpu.mean(axis=1, dtype=np.float64)
        class_peak = np.maximum(row_percentile(class_cpu, self.peak_percentile), class_avg)
        first_member = [tenants[int(np.argmax(group == g))] for g in range(len(group_pattern))]
        order = sorted(
            range(len(group_pattern)),
            key=lambda g: (
                PATTERN_ORDER.index(group_pattern[g]),
                class_avg[g],
                class_peak[g],
                first_member[g],
            ),
        )
        classes: list[UtilizationClass] = []
        tenant_class: dict[str, str] = {}
        count: dict[Pattern, int] = {}
        for g in order:
            pattern = group_pattern[g]
            class_id = f"{pattern.value}-{count.get(pattern, 0)}"
            count[pattern] = count.get(pattern, 0) + 1
            members = np.flatnonzero(group == g)
            names = tuple(sorted(tenants[i] for i in members))
            tenant_class.update(dict.fromkeys(names, class_id))
            classes.append(
                UtilizationClass(
                    id=class_id,
                    pattern=pattern,
                    avg_cpu=float(class_avg[g]),
                    peak_cpu=float(class_peak[g]),
                    current_cpu=float(class_cpu[g, -1]),
                    tenants=names,
                    servers=int(round(float(servers[members].sum())))
                    if servers_per_tenant is not None
                    else 0,
                    cores=float(cores[members].sum()),
                )
            )
        self.patterns_: dict[str, Pattern] = {t: patterns[i] for i, t in enumerate(tenants)}
        self.tenant_class_: dict[str, str] = tenant_class
        self.classes_: tuple[UtilizationClass, ...] = tuple(classes)
        self.profile_: FrequencyProfile = scan.profile
        own = np.flatnonzero(scan.window[:, 1] < series.n_slots)
        self.own_window_tenants_: tuple[str, ...] = tuple(tenants[i] for i in own)
        self.tenant_avg_cpu_: dict[str, float] = {t: float(avg[i]) for i, t in enumerate(tenants)}
        self.tenant_peak_cpu_: dict[str, float] = {t: float(peak[i]) for i, t in enumerate(tenants)}
        risky = patterns == Pattern.UNPREDICTABLE
        bound = np.minimum(1.0, avg + float(self.unpredictable_peak_sigmas) * scan.profile.std_cpu)
        grid_peak = np.where(risky, np.maximum(peak, bound), peak)
        self.tenant_grid_peak_cpu_: dict[str, float] = {t: float(grid_peak[i]) for i, t in enumerate(tenants)}
        self.class_cpu_: np.ndarray = class_cpu[order]
        logger.info(
            "clustered %d tenants into %d classes (%s)",
            len(tenants),
            len(classes),
            ", ".join(f"{p.value}: {count.get(p, 0)}" for p in PATTERN_ORDER),
        )
        return self

    def class_table(self, grid: Mapping[str, GridCell] | None = None) -> ClassTable:
        """The fitted classes as a ``ClassTable`` (the ``classes.json`` contract), with an optional grid."""
        if not hasattr(self, "classes_"):
            raise PolicyError("UtilizationClustering: call fit() before class_table()")
        return ClassTable(
            classes=self.classes_,
            tenant_class=dict(self.tenant_class_),
            tenant_pattern=dict(self.patterns_),
            grid=dict(grid) if grid is not None else None,
        )

    def _validate(self, series: TenantSeries) -> PatternThresholds:
        for name in ("max_classes_per_pattern", "n_classes_per_pattern", "chunk_rows"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise PolicyError(f"{name} must be an integer >= 1, got {value!r}")
        if self.k_rule not in K_RULES:
            raise PolicyError(f"k_rule must be one of {', '.join(K_RULES)}, got {self.k_rule!r}")
        if not float(self.class_tolerance_cpu) > 0.0:
            raise PolicyError(f"class_tolerance_cpu must be > 0, got {self.class_tolerance_cpu}")
        if not 0.0 < float(self.peak_percentile) <= 100.0:
            raise PolicyError(f"peak_percentile must be in (0, 100], got {self.peak_percentile}")
        sigmas = float(self.unpredictable_peak_sigmas)
        if not (math.isfinite(sigmas) and sigmas >= 0.0):
            raise PolicyError(f"unpredictable_peak_sigmas must be a finite number >= 0, got {sigmas}")
        thresholds = self.thresholds()
        thresholds.validate()
        cpu = series.cpu
        if cpu.ndim != 2 or cpu.shape[0] != len(series.tenants):
            raise PolicyError(
                f"series.cpu must have one row per tenant ({len(series.tenants)}), got {cpu.shape}"
            )
        if cpu.shape[0] == 0:
            raise PolicyError("series has no tenants to cluster")
        if len(set(series.tenants)) != len(series.tenants):
            raise PolicyError("series.tenants has duplicate names")
        return thresholds

    def _kmeans(self, features: np.ndarray) -> tuple[np.ndarray, dict[int, float]]:
        """Labels 0..k-1 for one pattern's tenants, with the score of each k tried (see ``k_rule``)."""
        n_distinct = len(np.unique(np.round(features, 6), axis=0))
        upper = min(self.max_classes_per_pattern, n_distinct)
        scores: dict[int, float] = {}
        if self.k_rule == "fixed" or upper == 1:
            return self._fit_k(features, min(self.n_classes_per_pattern, upper)), scores
        if self.k_rule == "tolerance":
            labels = np.zeros(len(features), dtype=np.int64)
            for k in range(1, upper + 1):
                labels = self._fit_k(features, k)
                centres = np.array([features[labels == j].mean(axis=0) for j in range(int(labels.max()) + 1)])
                scores[k] = float(np.sqrt(np.mean(np.sum((features - centres[labels]) ** 2, axis=1))))
                if scores[k] <= self.class_tolerance_cpu:
                    break
            return labels, scores
        best: tuple[float, np.ndarray] | None = None  # silhouette
        for k in range(2, min(upper, n_distinct - 1) + 1):
            labels = self._fit_k(features, k)
            sample = min(len(features), 1000)
            scores[k] = float(
                silhouette_score(features, labels, sample_size=sample, random_state=self.random_state)
            )
            if best is None or scores[k] > best[0]:
                best = (scores[k], labels)
        return (best[1] if best is not None else self._fit_k(features, upper)), scores

    def _fit_k(self, features: np.ndarray, k: int) -> np.ndarray:
        if k <= 1:
            return np.zeros(len(features), dtype=np.int64)
        labels = KMeans(n_clusters=k, n_init=2, random_state=self.random_state).fit_predict(features)
        _, dense = np.unique(labels, return_inverse=True)  # K-means may leave a cluster empty
        return dense.astype(np.int64)


def _per_tenant(
    tenants: tuple[str, ...], values: Mapping[str, float] | None, label: str, *, default: float
) -> np.ndarray:
    """One value per tenant from an optional mapping; a missing, negative or non-finite entry is an error."""
    if values is None:
        return np.full(len(tenants), default, dtype=np.float64)
    missing = [t for t in tenants if t not in values]
    if missing:
        raise PolicyError(
            f"{label} has no entry for tenant(s) {missing[:5]}{'...' if len(missing) > 5 else ''}"
        )
    out = np.array([float(values[t]) for t in tenants], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(out) | (out < 0))
    if bad.size:
        raise PolicyError(
            f"{label}[{tenants[int(bad[0])]!r}] must be a finite number >= 0, got {out[bad[0]]}"
        )
    return out
