"""Utilization patterns: each primary tenant's pattern (periodic / constant / unpredictable) from its
frequency profile. Used by ``clustering.UtilizationClustering``.

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
   - ``periodic_energy_frac``: for each daily harmonic ``h * k_day`` (h = 1..``daily_harmonics``,
     24 by default: a one-hour nightly job needs that many) and weekly one ``h * k_week`` (h =
     1..``weekly_harmonics``, 6), the power within ``peak_halfwidth_bins`` of it minus its local
     background (median power of the nearby non-harmonic bins), summed, over the signal energy
     (``daily_energy_frac`` and ``weekly_energy_frac`` separately). A period counts only when the
     series holds ``min_cycles`` of it and its background has ``min_background_bins`` bins: a
     spectrum that just falls with frequency (random walks, trends) earns ~0;
   - ``periodic_std_cpu = signal_std_cpu * sqrt(periodic_energy_frac)``: the size of the cycle;
   - ``acf``: the autocorrelation at 1 d, 18 h, 7 d and 5.25 d (``lag_autocorrelation``).

2. **Rule**, first match wins: no observed sample -> unpredictable. Periodic when a candidate
   period P (1 d or 7 d) is confirmed by both methods: the autocorrelation at P is at least
   ``periodic_min_acf`` (0.3) and above its value at 3P/4 (a hill, not a drift), and P's harmonics
   hold ``periodic_acf_energy_frac`` (0.1) of the signal energy, or all harmonics together hold
   ``periodic_min_energy_frac`` (0.5); and the cycle is not negligible next to the level
   (``periodic_std_cpu > periodic_min_cv * mean_cpu``, 0.05). Constant when ``signal_std_cpu <=
   constant_max_cv * mean_cpu`` (0.25). Otherwise unpredictable. Every default term is a ratio, so
   a series scaled by any factor gets the same label; ``periodic_min_std_cpu`` and
   ``constant_max_std_cpu`` (absolute CPU floors, 0 by default) remain for callers who want them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from placement_service.core.types import Pattern, PolicyError

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
PATTERN_ORDER: tuple[Pattern, ...] = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)


@dataclass(frozen=True)
class PatternThresholds:
    """Settings of the pattern rule (see the module docstring for what each does and why)."""

    periodic_min_energy_frac: float = 0.5
    periodic_min_std_cpu: float = 0.0
    constant_max_cv: float = 0.25
    constant_max_std_cpu: float = 0.0
    daily_harmonics: int = 24
    weekly_harmonics: int = 6
    periodic_min_acf: float = 0.3
    periodic_acf_energy_frac: float = 0.1
    periodic_min_cv: float = 0.05
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
        if not (-1.0 <= self.periodic_min_acf <= 1.0 and 0.0 < self.periodic_acf_energy_frac <= 1.0):
            raise PolicyError(
                "periodic_min_acf must be in [-1, 1] and periodic_acf_energy_frac in (0, 1], got "
                f"{self.periodic_min_acf}, {self.periodic_acf_energy_frac}"
            )
        if self.periodic_min_cv < 0.0:
            raise PolicyError(f"periodic_min_cv must be >= 0, got {self.periodic_min_cv}")
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
    acf: np.ndarray  # [n, 4] autocorrelation at 1 d, 18 h, 7 d, 5.25 d (0 where the lag does not fit)

    def patterns(self, thresholds: PatternThresholds = PatternThresholds()) -> np.ndarray:
        """Pattern of each row (object array of ``Pattern``), by the rule in the module docstring."""
        return _pattern_rule(_RuleInputs.of(self), thresholds)


# Lags of the autocorrelation features, in seconds: each candidate period and its half.
ACF_LAGS_S = (DAY_S, 0.75 * DAY_S, WEEK_S, 0.75 * WEEK_S)


@dataclass(frozen=True)
class _RuleInputs:
    mean: np.ndarray
    signal_std: np.ndarray
    daily: np.ndarray
    weekly: np.ndarray
    periodic: np.ndarray
    periodic_std: np.ndarray
    missing: np.ndarray
    acf: np.ndarray

    @staticmethod
    def of(p: FrequencyProfile) -> _RuleInputs:
        return _RuleInputs(
            p.mean_cpu,
            p.signal_std_cpu,
            p.daily_energy_frac,
            p.weekly_energy_frac,
            p.periodic_energy_frac,
            p.periodic_std_cpu,
            p.missing_frac,
            p.acf,
        )


def _acf_hill(acf: np.ndarray, period: int, min_acf: float) -> np.ndarray:
    """The autocorrelation at the candidate period is high and above its value at 3/4 of the period
    (a cycle, not a slow drift whose autocorrelation only falls with the lag; 3/4 rather than 1/2
    so that a cycle of half the period, e.g. 12 h, also counts)."""
    at, before = acf[:, 2 * period], acf[:, 2 * period + 1]
    return (at >= min_acf) & (at > before)


def _pattern_rule(f: _RuleInputs, thresholds: PatternThresholds) -> np.ndarray:
    out = np.empty(f.mean.shape, dtype=object)
    out[...] = Pattern.UNPREDICTABLE  # (np.full would store a plain str)
    has_data = f.missing < 1.0
    day_hill = _acf_hill(f.acf, 0, thresholds.periodic_min_acf)
    week_hill = _acf_hill(f.acf, 1, thresholds.periodic_min_acf)
    cycle = (
        (day_hill & (f.daily >= thresholds.periodic_acf_energy_frac))
        | (week_hill & (f.weekly >= thresholds.periodic_acf_energy_frac))
        | ((f.periodic >= thresholds.periodic_min_energy_frac) & (day_hill | week_hill))
    )
    periodic = (
        has_data
        & cycle
        & (f.periodic_std > thresholds.periodic_min_cv * f.mean)
        & (f.periodic_std >= thresholds.periodic_min_std_cpu)
    )
    small = f.signal_std <= np.maximum(thresholds.constant_max_cv * f.mean, thresholds.constant_max_std_cpu)
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
    return scan_series(cpu, interval_s, thresholds, chunk_rows).profile


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
class ScanResult:
    profile: FrequencyProfile
    peak_cpu: np.ndarray | None
    current_cpu: np.ndarray | None
    hourly_dev: np.ndarray | None  # [n, 24] hour-of-day profile minus the mean (periodic rows only, else 0)


def filled_chunks(
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


def scan_series(
    cpu: np.ndarray,
    interval_s: float,
    thresholds: PatternThresholds,
    chunk_rows: int,
    *,
    peak_percentile: float | None = None,
    hour_of_slot: np.ndarray | None = None,
) -> ScanResult:
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
    cols["acf"] = np.zeros((n, len(ACF_LAGS_S)), dtype=np.float64)
    hourly = np.zeros((n, 24), dtype=np.float64) if hour_of_slot is not None else None
    hour_matrix = _hour_matrix(hour_of_slot) if hour_of_slot is not None else None
    hour_present = hour_matrix.sum(axis=0) > 0 if hour_matrix is not None else None
    for lo, hi, block, mean, n_missing in filled_chunks(cpu, chunk_rows):
        part = {"mean": mean, "missing": n_missing / n_slots}
        part.update(_spectral_features(block, part["missing"], windows, high))
        part["acf"] = np.stack(
            [lag_autocorrelation(block, round(lag_s / interval_s)) for lag_s in ACF_LAGS_S], axis=1
        )
        for name, values in part.items():
            cols[name][lo:hi] = values
        if peak_percentile is not None:
            cols["peak"][lo:hi] = row_percentile(block, peak_percentile)
            cols["current"][lo:hi] = block[:, -1]
        if hourly is not None and hour_matrix is not None:
            # Hour-of-day profile, only for the rows that the rule makes periodic (the costly product).
            chunk_patterns = _pattern_rule(
                _RuleInputs(
                    mean,
                    part["signal_std"],
                    part["daily"],
                    part["weekly"],
                    part["periodic"],
                    part["periodic_std"],
                    part["missing"],
                    part["acf"],
                ),
                thresholds,
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
        acf=cols["acf"],
    )
    return ScanResult(
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


def lag_autocorrelation(block: np.ndarray, lag: int) -> np.ndarray:
    """Autocorrelation of each row at ``lag`` slots (0 when the lag does not fit or a row is flat).

    ``r(L) = mean_t(y_t * y_{t+L}) / mean_t(y_t^2)`` over the ``T - L`` overlapping pairs, with
    ``y`` the row minus its mean; filled slots (the row mean) add nothing. Independent of the
    series' scale and offset.
    """
    n_slots = block.shape[1]
    if not 0 < lag <= n_slots // 2:
        return np.zeros(block.shape[0], dtype=np.float64)
    y = block - block.mean(axis=1, keepdims=True, dtype=np.float64).astype(block.dtype)
    var = np.einsum("ij,ij->i", y, y, dtype=np.float64) / n_slots
    cov = np.einsum("ij,ij->i", y[:, :-lag], y[:, lag:], dtype=np.float64) / (n_slots - lag)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)


def row_percentile(block: np.ndarray, percentile: float) -> np.ndarray:
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
