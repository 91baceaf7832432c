"""Utilization clustering: each primary tenant's pattern from its frequency profile, then classes.

Both steps work on each tenant's "average server" CPU series (``TenantSeries``); the full rationale,
with measured numbers, is in ``docs/clustering.md``.

1. **Pattern** (``classify_patterns`` / ``frequency_profile``): missing slots are filled with the
   row mean, then a batched real FFT (float32, by chunks of rows) gives the one-sided power
   ``P[k] = |rfft(x)[k]|^2`` at ``k`` cycles per series. With ``T`` slots of ``interval_s`` seconds,
   a daily cycle sits at ``k_day = T * interval_s / 86400`` and a weekly one at ``k_week =
   T * interval_s / 604800``. Per tenant:

   - white-noise floor per bin ``= median(P[top band]) / ln 2`` (white noise has the same expected
     power in every bin; its periodogram is exponential, median = ln 2 x mean);
   - ``std_cpu = sqrt(2 * sum_{k>=1} P[k] / T^2)`` (Parseval) and ``signal_std_cpu``, the same
     without the noise floor, both divided by ``sqrt(1 - missing_frac)`` (filled slots are flat);
   - ``periodic_energy_frac``: for each daily harmonic ``h * k_day`` (h = 1..``daily_harmonics``)
     and weekly one ``h * k_week`` (h = 1..``weekly_harmonics``), the power within
     ``peak_halfwidth_bins`` of it minus its local background (median power of the nearby
     non-harmonic bins), summed, over the signal energy. A period counts only when the series holds
     ``min_cycles`` of it and its background has ``min_background_bins`` bins: a spectrum that just
     falls with frequency (random walks, trends) earns ~0;
   - ``periodic_std_cpu = signal_std_cpu * sqrt(periodic_energy_frac)``: the size of the cycle.

   Rule, first match wins: no observed sample -> unpredictable; ``periodic_energy_frac >=
   periodic_min_energy_frac`` (0.5) and ``periodic_std_cpu >= periodic_min_std_cpu`` (0.015) ->
   periodic; ``signal_std_cpu <= max(constant_max_cv * mean_cpu, constant_max_std_cpu)`` (0.1, 0.03)
   -> constant; otherwise unpredictable.

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from threadpoolctl import threadpool_limits

from placement_service.core.types import (
    ClassTable,
    GridCell,
    Pattern,
    PolicyError,
    TenantSeries,
    UtilizationClass,
)

logger = logging.getLogger(__name__)

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
PATTERN_ORDER: tuple[Pattern, ...] = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)


@dataclass(frozen=True)
class PatternThresholds:
    """Settings of the pattern rule (see the module docstring for what each does and why)."""

    periodic_min_energy_frac: float = 0.5
    periodic_min_std_cpu: float = 0.015
    constant_max_cv: float = 0.1
    constant_max_std_cpu: float = 0.03
    daily_harmonics: int = 4
    weekly_harmonics: int = 3
    peak_halfwidth_bins: float = 1.0
    min_cycles: float = 3.0
    min_background_bins: int = 4

    def validate(self) -> None:
        if not 0.0 < self.periodic_min_energy_frac <= 1.0:
            raise PolicyError(
                f"periodic_min_energy_frac must be in (0, 1], got {self.periodic_min_energy_frac}"
            )
        if min(self.periodic_min_std_cpu, self.constant_max_cv, self.constant_max_std_cpu) < 0.0:
            raise PolicyError("periodic_min_std_cpu, constant_max_cv and constant_max_std_cpu must be >= 0")
        if (
            min(self.daily_harmonics, self.weekly_harmonics) < 0
            or self.daily_harmonics + self.weekly_harmonics == 0
        ):
            raise PolicyError("daily_harmonics and weekly_harmonics must be >= 0 and not both 0")
        if self.peak_halfwidth_bins < 0.5:
            raise PolicyError(f"peak_halfwidth_bins must be >= 0.5, got {self.peak_halfwidth_bins}")
        if self.min_cycles < 1.0 or self.min_background_bins < 1:
            raise PolicyError(
                f"min_cycles and min_background_bins must be >= 1, got {self.min_cycles}, {self.min_background_bins}"
            )


@dataclass(frozen=True)
class FrequencyProfile:
    """Per-tenant features of the pattern rule; every field is an array with one value per row.

    All ``*_cpu`` values are fractions of the cores; the energy shares are of the signal energy (the
    non-DC energy minus the white-noise floor), capped at 1.
    """

    mean_cpu: np.ndarray  # mean of the observed samples
    std_cpu: np.ndarray  # total standard deviation (from the spectrum, corrected for filled slots)
    noise_std_cpu: np.ndarray  # white-noise part of it (from the high-frequency floor)
    signal_std_cpu: np.ndarray  # sqrt(std^2 - noise^2): the variation that is not measurement noise
    cv: np.ndarray  # signal_std_cpu / mean_cpu (0 when both are 0, inf when only the mean is 0)
    daily_energy_frac: np.ndarray  # share of the signal energy at the daily harmonics (above background)
    weekly_energy_frac: np.ndarray  # same at the weekly harmonics
    periodic_energy_frac: np.ndarray  # daily + weekly, capped at 1
    periodic_std_cpu: np.ndarray  # signal_std_cpu * sqrt(periodic_energy_frac): size of the cycle
    missing_frac: np.ndarray  # share of NaN slots (filled with the row mean before the FFT)

    def patterns(self, thresholds: PatternThresholds = PatternThresholds()) -> np.ndarray:
        """Pattern of each row (object array of ``Pattern``), by the rule in the module docstring."""
        return _pattern_rule(
            self.mean_cpu,
            self.signal_std_cpu,
            self.periodic_energy_frac,
            self.periodic_std_cpu,
            self.missing_frac,
            thresholds,
        )


def _pattern_rule(
    mean_cpu: np.ndarray,
    signal_std_cpu: np.ndarray,
    periodic_energy_frac: np.ndarray,
    periodic_std_cpu: np.ndarray,
    missing_frac: np.ndarray,
    thresholds: PatternThresholds,
) -> np.ndarray:
    out = np.empty(mean_cpu.shape, dtype=object)
    out[...] = Pattern.UNPREDICTABLE  # (np.full would store a plain str)
    has_data = missing_frac < 1.0
    periodic = (
        has_data
        & (periodic_energy_frac >= thresholds.periodic_min_energy_frac)
        & (periodic_std_cpu >= thresholds.periodic_min_std_cpu)
    )
    small = signal_std_cpu <= np.maximum(
        thresholds.constant_max_cv * mean_cpu, thresholds.constant_max_std_cpu
    )
    out[has_data & ~periodic & small] = Pattern.CONSTANT
    out[periodic] = Pattern.PERIODIC
    return out


def classify_patterns(
    cpu: np.ndarray, interval_s: float, *, thresholds: PatternThresholds = PatternThresholds()
) -> np.ndarray:
    """Pattern of each row of ``cpu`` ([n_tenants, n_slots], CPU fraction, NaN = missing slot)."""
    return frequency_profile(cpu, interval_s, thresholds=thresholds).patterns(thresholds)


def frequency_profile(
    cpu: np.ndarray,
    interval_s: float,
    *,
    thresholds: PatternThresholds = PatternThresholds(),
    chunk_rows: int = 64,
) -> FrequencyProfile:
    """The frequency-profile features of each row of ``cpu`` (batched ``numpy.fft.rfft`` by chunks)."""
    return _scan(cpu, interval_s, thresholds, chunk_rows).profile


@dataclass(frozen=True)
class HarmonicWindow:
    """The rfft bins of one harmonic (``kind`` is ``"daily"`` or ``"weekly"``) and of its background."""

    kind: str
    frequency: float  # cycles per series
    bins: np.ndarray  # bins within peak_halfwidth_bins of the harmonic
    background: np.ndarray  # nearby non-target bins whose median power is the local background


def harmonic_windows(n_slots: int, interval_s: float, thresholds: PatternThresholds) -> list[HarmonicWindow]:
    """The daily and weekly harmonic windows over the ``n_slots // 2 + 1`` rfft bins.

    A bin belongs to at most one window (daily first). The background of a harmonic at frequency
    ``f`` is every non-target, non-DC bin within ``max(4 * peak_halfwidth_bins, f / 4)`` of it.
    """
    n_bins = n_slots // 2 + 1
    k = np.arange(n_bins, dtype=np.float64)
    halfwidth = thresholds.peak_halfwidth_bins
    targets: list[tuple[str, float, np.ndarray]] = []
    claimed = np.zeros(n_bins, dtype=bool)
    claimed[0] = True
    for kind, period_s, harmonics in (
        ("daily", DAY_S, thresholds.daily_harmonics),
        ("weekly", WEEK_S, thresholds.weekly_harmonics),
    ):
        base = n_slots * interval_s / period_s
        if base < thresholds.min_cycles:
            continue
        for h in range(1, harmonics + 1):
            mask = (np.abs(k - h * base) <= halfwidth) & ~claimed
            if mask.any():
                claimed |= mask
                targets.append((kind, h * base, np.flatnonzero(mask)))
    windows = []
    for kind, freq, bins in targets:
        near = np.abs(k - freq) <= max(4.0 * halfwidth, freq / 4.0)
        background = np.flatnonzero(near & ~claimed)
        if background.size >= thresholds.min_background_bins:  # else a peak cannot be told from a slope
            windows.append(HarmonicWindow(kind, freq, bins, background))
    return windows


@dataclass(frozen=True)
class _ScanResult:
    profile: FrequencyProfile
    peak_cpu: np.ndarray | None
    current_cpu: np.ndarray | None
    hourly_dev: np.ndarray | None  # [n, 24] hour-of-day profile minus the mean (periodic rows only, else 0)


def _filled_chunks(
    cpu: np.ndarray, chunk_rows: int, n_missing_known: np.ndarray | None = None
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(lo, hi, filled, mean, n_missing)`` per block of rows, as float32 with NaN -> row mean.

    ``mean`` is over the observed samples. A block without NaN is not copied when ``cpu`` is float32
    already (callers only read it). ``n_missing_known`` (NaN count per row, from an earlier pass)
    lets a block without NaN skip the NaN scan; its ``mean`` is then not computed (zeros).
    """
    n, n_slots = cpu.shape
    for lo in range(0, n, chunk_rows):
        hi = min(n, lo + chunk_rows)
        block = np.asarray(cpu[lo:hi], dtype=np.float32)
        if n_missing_known is not None and not n_missing_known[lo:hi].any():
            yield lo, hi, block, np.zeros(hi - lo), np.zeros(hi - lo, dtype=np.int64)
            continue
        nan = np.isnan(block)
        n_missing = np.count_nonzero(nan, axis=1)
        if n_missing.any():
            block = np.where(nan, np.float32(0.0), block)
            mean = block.sum(axis=1).astype(np.float64) / np.maximum(n_slots - n_missing, 1)
            np.copyto(block, mean.astype(np.float32)[:, None], where=nan)
        else:
            mean = block.sum(axis=1).astype(np.float64) / n_slots  # float32 pairwise sum: ~1e-7 relative
        bad = np.flatnonzero(~np.isfinite(mean))
        if bad.size:
            raise PolicyError(
                f"cpu row {lo + int(bad[0])} holds an infinite value (expected fractions 0..1 or NaN)"
            )
        yield lo, hi, block, mean, n_missing


def _scan(
    cpu: np.ndarray,
    interval_s: float,
    thresholds: PatternThresholds,
    chunk_rows: int,
    *,
    peak_percentile: float | None = None,
    hour_of_slot: np.ndarray | None = None,
) -> _ScanResult:
    """One pass over the rows: spectral features, and optionally peak, current and hourly profile."""
    if cpu.ndim != 2 or cpu.shape[1] < 2:
        raise PolicyError(f"cpu must be a 2-D array [tenants, slots] with >= 2 slots, got shape {cpu.shape}")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise PolicyError(f"interval_s must be a positive number of seconds, got {interval_s}")
    thresholds.validate()
    n, n_slots = cpu.shape
    windows = harmonic_windows(n_slots, interval_s, thresholds)
    n_bins = n_slots // 2 + 1
    high = (max(1, n_bins - 2048, n_bins // 2), n_bins)  # noise-floor band: top half, at most 2048 bins
    cols = {name: np.zeros(n, dtype=np.float64) for name in _SCAN_COLUMNS}
    hourly = np.zeros((n, 24), dtype=np.float64) if hour_of_slot is not None else None
    hour_matrix = _hour_matrix(hour_of_slot) if hour_of_slot is not None else None
    hour_present = hour_matrix.sum(axis=0) > 0 if hour_matrix is not None else None
    for lo, hi, block, mean, n_missing in _filled_chunks(cpu, chunk_rows):
        part = {"mean": mean, "missing": n_missing / n_slots}
        part.update(_spectral_features(block, part["missing"], windows, high))
        for name, values in part.items():
            cols[name][lo:hi] = values
        if peak_percentile is not None:
            cols["peak"][lo:hi] = _row_percentile(block, peak_percentile)
            cols["current"][lo:hi] = block[:, -1]
        if hourly is not None and hour_matrix is not None:
            # Hour-of-day profile, only for the rows that the rule makes periodic (the costly product).
            chunk_patterns = _pattern_rule(
                mean, part["signal_std"], part["periodic"], part["periodic_std"], part["missing"], thresholds
            )
            rows = np.flatnonzero(chunk_patterns == Pattern.PERIODIC)
            if rows.size:
                hourly[lo + rows] = (block[rows] @ hour_matrix - mean[rows, None]) * hour_present
    mean_cpu, signal_std = cols["mean"], cols["signal_std"]
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where(signal_std > 0, signal_std / mean_cpu, 0.0)
    profile = FrequencyProfile(
        mean_cpu=mean_cpu,
        std_cpu=cols["std"],
        noise_std_cpu=cols["noise_std"],
        signal_std_cpu=signal_std,
        cv=cv,
        daily_energy_frac=cols["daily"],
        weekly_energy_frac=cols["weekly"],
        periodic_energy_frac=cols["periodic"],
        periodic_std_cpu=cols["periodic_std"],
        missing_frac=cols["missing"],
    )
    return _ScanResult(
        profile=profile,
        peak_cpu=np.maximum(cols["peak"], mean_cpu) if peak_percentile is not None else None,
        current_cpu=cols["current"] if peak_percentile is not None else None,
        hourly_dev=hourly,
    )


_SCAN_COLUMNS = (
    "mean",
    "missing",
    "std",
    "noise_std",
    "signal_std",
    "daily",
    "weekly",
    "periodic",
    "periodic_std",
    "peak",
    "current",
)


def _spectral_features(
    block: np.ndarray, missing: np.ndarray, windows: list[HarmonicWindow], high: tuple[int, int]
) -> dict[str, np.ndarray]:
    """Spectral features of a block of filled rows (see the module docstring for the formulas).

    With the one-sided power ``P[k]`` (k = 0..T/2) and ``E = sum_{k>=1} P[k]``:
    white noise of std ``s`` gives ``P[k] ~ T s^2`` on average in every bin, and the median of an
    exponential variable is ``ln 2`` times its mean, so the noise floor per bin is
    ``median(P[high]) / ln 2`` over the top of the spectrum (the upper half, at most 2048 bins); the signal energy is
    ``S = E - floor * (T/2)``; variances are ``2 E / T^2`` (total) and ``2 S / T^2`` (signal), both
    divided by ``1 - missing_frac`` because filled slots carry no variation.
    """
    n_slots = block.shape[1]
    spectrum = np.fft.rfft(block, axis=1)
    power = np.square(spectrum.real)
    power += np.square(spectrum.imag)
    del spectrum
    power[:, 0] = 0.0  # DC is the mean, not variation
    n_bins = power.shape[1]
    energy = power.sum(axis=1).astype(np.float64)  # float32 pairwise sum: ~1e-7 relative
    band = power[:, high[0] : high[1]]
    mid = band.shape[1] // 2
    floor = np.partition(band, mid, axis=1)[:, mid].astype(np.float64) / math.log(2.0)
    signal = np.clip(energy - floor * (n_bins - 1), 0.0, energy)
    periodic = np.zeros(len(block), dtype=np.float64)
    out: dict[str, np.ndarray] = {"daily": periodic.copy(), "weekly": periodic.copy()}
    safe = np.where(signal > 0, signal, 1.0)
    for window in windows:
        # Energy of the harmonic above its local background (a smoothly falling spectrum earns ~0).
        peak_energy = power[:, window.bins].sum(axis=1, dtype=np.float64)
        if window.background.size:
            background = np.median(power[:, window.background], axis=1).astype(np.float64)
            peak_energy = np.maximum(peak_energy - window.bins.size * background, 0.0)
        out[window.kind] += np.where(signal > 0, peak_energy / safe, 0.0)
    out["periodic"] = np.minimum(out["daily"] + out["weekly"], 1.0)  # the floor is an estimate: cap
    out["daily"] = np.minimum(out["daily"], 1.0)
    out["weekly"] = np.minimum(out["weekly"], 1.0)
    scale = 2.0 / float(n_slots) ** 2 / np.maximum(1.0 - missing, 1.0 / n_slots)
    out["std"] = np.sqrt(energy * scale)
    out["signal_std"] = np.sqrt(signal * scale)
    out["noise_std"] = np.sqrt(np.maximum(energy - signal, 0.0) * scale)
    out["periodic_std"] = out["signal_std"] * np.sqrt(out["periodic"])
    return out


def _row_percentile(block: np.ndarray, percentile: float) -> np.ndarray:
    """Per-row percentile by one partial sort (the 'higher' order statistic; enough for a peak tag)."""
    n_slots = block.shape[1]
    kth = min(n_slots - 1, max(0, math.ceil(percentile / 100.0 * (n_slots - 1))))
    return np.partition(block, kth, axis=1)[:, kth].astype(np.float64)


def _hour_matrix(hour_of_slot: np.ndarray) -> np.ndarray:
    """[n_slots, 24] float32 matrix whose product with a series gives its mean per hour of day."""
    onehot = np.zeros((hour_of_slot.size, 24), dtype=np.float32)
    onehot[np.arange(hour_of_slot.size), hour_of_slot] = 1.0
    counts = onehot.sum(axis=0)
    return onehot / np.maximum(counts, 1.0)


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
    - The pattern thresholds of ``PatternThresholds`` (same names).
    - ``random_state`` seeds K-means (and the silhouette sample); ``chunk_rows`` bounds memory (rows
      per FFT batch).

    Fitted attributes: ``patterns_`` (tenant -> Pattern), ``tenant_class_`` (tenant -> class id),
    ``classes_`` (``UtilizationClass`` by pattern -- periodic, constant, unpredictable -- then by
    ascending ``avg_cpu``; ids ``<pattern>-<k>`` with k from 0 in that order), ``profile_``
    (``FrequencyProfile``, rows in series order), ``tenant_avg_cpu_`` / ``tenant_peak_cpu_``
    (tenant -> CPU fraction), ``class_cpu_`` (class series, [n_classes, n_slots] float32 in
    ``classes_`` order), ``k_scores_`` (pattern -> {k: RMS spread or silhouette} of the k tried).
    """

    def __init__(
        self,
        *,
        max_classes_per_pattern: int = 8,
        k_rule: str = "tolerance",
        class_tolerance_cpu: float = 0.05,
        n_classes_per_pattern: int = 4,
        peak_percentile: float = 99.0,
        periodic_min_energy_frac: float = _DEFAULT_THRESHOLDS.periodic_min_energy_frac,
        periodic_min_std_cpu: float = _DEFAULT_THRESHOLDS.periodic_min_std_cpu,
        constant_max_cv: float = _DEFAULT_THRESHOLDS.constant_max_cv,
        constant_max_std_cpu: float = _DEFAULT_THRESHOLDS.constant_max_std_cpu,
        daily_harmonics: int = _DEFAULT_THRESHOLDS.daily_harmonics,
        weekly_harmonics: int = _DEFAULT_THRESHOLDS.weekly_harmonics,
        random_state: int = 0,
        chunk_rows: int = 64,
    ) -> None:
        self.max_classes_per_pattern = max_classes_per_pattern
        self.k_rule = k_rule
        self.class_tolerance_cpu = class_tolerance_cpu
        self.n_classes_per_pattern = n_classes_per_pattern
        self.peak_percentile = peak_percentile
        self.periodic_min_energy_frac = periodic_min_energy_frac
        self.periodic_min_std_cpu = periodic_min_std_cpu
        self.constant_max_cv = constant_max_cv
        self.constant_max_std_cpu = constant_max_std_cpu
        self.daily_harmonics = daily_harmonics
        self.weekly_harmonics = weekly_harmonics
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
        scan = _scan(
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
        n_missing = np.rint(scan.profile.missing_frac * series.n_slots)
        for lo, hi, block, _mean, _missing in _filled_chunks(series.cpu, self.chunk_rows, n_missing):
            class_cpu += weights[:, lo:hi] @ block
        # 4. Tag each class (avg, peak = max(percentile, avg), current = last slot), order, name.
        class_avg = class_cpu.mean(axis=1, dtype=np.float64)
        class_peak = np.maximum(_row_percentile(class_cpu, self.peak_percentile), class_avg)
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
        self.tenant_avg_cpu_: dict[str, float] = {t: float(avg[i]) for i, t in enumerate(tenants)}
        self.tenant_peak_cpu_: dict[str, float] = {t: float(peak[i]) for i, t in enumerate(tenants)}
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
