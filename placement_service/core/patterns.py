"""Utilization patterns: each primary tenant's pattern (periodic / constant / unpredictable) from its
frequency profile and its autocorrelation. Used by ``clustering.UtilizationClustering``.

Both steps work on each tenant's "average server" CPU series (``TenantSeries``); the full rationale,
with measured numbers, is in ``docs/clustering.md``. The rule and its settings live in
``pattern_rule.py`` (re-exported here).

**Features** (``scan_series``, one pass over the rows by chunks): missing slots are filled with the
row mean, then per chunk of rows

- a batched real FFT (float32) gives the one-sided power ``P[k] = |rfft(x)[k]|^2`` at ``k`` cycles
  per series. With ``T`` slots of ``interval_s`` seconds, a daily cycle sits at ``k_day = T *
  interval_s / 86400`` and a weekly one at ``k_week = T * interval_s / 604800``:

  - white-noise floor per bin ``= median(P[top band]) / ln 2`` (white noise has the same expected
    power in every bin; its periodogram is exponential, median = ln 2 x mean);
  - ``std_cpu = sqrt(2 * sum_{k>=1} P[k] / T^2)`` (Parseval) and ``signal_std_cpu``, the same
    without the noise floor, both divided by ``sqrt(1 - missing_frac)`` (filled slots are flat);
  - ``daily_energy_frac`` / ``weekly_energy_frac``: for each daily harmonic ``h * k_day`` (h =
    1..24) and weekly one ``h * k_week`` (h = 1..6), the power within ``peak_halfwidth_bins`` of it
    minus its local background (median power of the nearby non-harmonic bins), summed, over the
    signal energy. A period counts only when the series holds ``min_cycles`` of it;
  - ``periodic_std_cpu = signal_std_cpu * sqrt(periodic_energy_frac)``: the size of the cycle;

- the slots are grouped in blocks of ``block_s`` (30 minutes) and

  - ``acf``: the autocorrelation of the block *maxima* at 1 d, 18 h, 7 d and 5.25 d. Maxima keep
    a short job whole whether it starts a few minutes early or late, where the raw slots would
    see a 5-minute spike in a different slot every night (and the block means would dilute it);
  - ``swing``: the peak-to-trough of the block means folded at 1 d and 7 d (mean per phase of the
    period), over the row mean: how large the cycle is next to the level.

**Own windows**: a row observed over less than ``own_window_below_frac`` (0.9) of the grid (first
to last observed slot; e.g. tenants traced in different weeks of a year) is analysed on its own
window: a daily cycle seen for 10 days is a daily cycle, wherever those days sit in the year. Rows
with the same window are batched.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from placement_service.core.pattern_rule import (  # re-exported: the pattern API lives here
    ACF_LAGS_S,
    DAY_S,
    PATTERN_ORDER,
    PERIODS_S,
    WEEK_S,
    FrequencyProfile,
    HarmonicWindow,
    PatternThresholds,
    RuleInputs,
    harmonic_windows,
    pattern_rule,
)
from placement_service.core.types import Pattern, PolicyError

__all__ = [
    "ACF_LAGS_S",
    "DAY_S",
    "PATTERN_ORDER",
    "WEEK_S",
    "FrequencyProfile",
    "HarmonicWindow",
    "PatternThresholds",
    "ScanResult",
    "classify_patterns",
    "filled_chunks",
    "frequency_profile",
    "harmonic_windows",
    "row_percentile",
    "scan_series",
]


_DEFAULT_THRESHOLDS = PatternThresholds()


def classify_patterns(
    cpu: np.ndarray, interval_s: float, *, thresholds: PatternThresholds = _DEFAULT_THRESHOLDS
) -> np.ndarray:
    """Pattern of each row of ``cpu`` ([n_tenants, n_slots], CPU fraction, NaN = missing slot)."""
    return frequency_profile(cpu, interval_s, thresholds=thresholds).patterns(thresholds)


def frequency_profile(
    cpu: np.ndarray,
    interval_s: float,
    *,
    thresholds: PatternThresholds = _DEFAULT_THRESHOLDS,
    chunk_rows: int = 64,
) -> FrequencyProfile:
    """The features of each row of ``cpu`` (batched ``numpy.fft.rfft`` and block features by chunks)."""
    return scan_series(cpu, interval_s, thresholds, chunk_rows).profile


@dataclass(frozen=True)
class ScanResult:
    profile: FrequencyProfile
    peak_cpu: np.ndarray | None
    current_cpu: np.ndarray | None
    hourly_dev: np.ndarray | None  # [n, 24] hour-of-day profile minus the mean (periodic rows only, else 0)
    n_missing: np.ndarray  # NaN slots per row on the whole grid
    window: np.ndarray  # [n, 2] first slot and slot count each row was analysed on


_BACKGROUND_BINS = 32


@dataclass(frozen=True)
class _Harmonics:
    """The harmonic windows as index arrays, so that one gather and one sort serve them all."""

    peak_idx: np.ndarray  # the bins of every window, window after window
    peak_starts: np.ndarray  # where each window's bins start in peak_idx
    peak_bins: np.ndarray  # bins per window
    background_idx: np.ndarray  # [windows, B]: the B nearest background bins of each (padded)
    padding: np.ndarray  # [windows, B]: True where background_idx is padding
    middle: tuple[np.ndarray, np.ndarray]  # positions of the two middle values of each background
    daily: np.ndarray  # bool per window

    @staticmethod
    def of(windows: list[HarmonicWindow]) -> _Harmonics:
        width = max([min(w.background.size, _BACKGROUND_BINS) for w in windows], default=1)
        background = np.zeros((len(windows), width), dtype=np.int64)
        padding = np.ones((len(windows), width), dtype=bool)
        count = np.zeros(len(windows), dtype=np.int64)
        for i, w in enumerate(windows):
            nearest = w.background[np.argsort(np.abs(w.background - w.frequency), kind="stable")][:width]
            background[i, : nearest.size], padding[i, : nearest.size] = nearest, False
            count[i] = nearest.size
        sizes = np.array([w.bins.size for w in windows], dtype=np.int64)
        return _Harmonics(
            peak_idx=np.concatenate([w.bins for w in windows]) if windows else np.zeros(0, dtype=np.int64),
            peak_starts=np.cumsum(sizes) - sizes,
            peak_bins=sizes,
            background_idx=background,
            padding=padding,
            middle=((count - 1) // 2, count // 2),
            daily=np.array([w.kind == "daily" for w in windows], dtype=bool),
        )


@dataclass(frozen=True)
class _Plan:
    """What depends only on the grid: harmonic windows, noise band, blocks, lags, folds."""

    n_slots: int
    windows: list[HarmonicWindow]
    harmonics: _Harmonics
    high: tuple[int, int]  # noise-floor band of rfft bins
    block: int  # slots per block
    n_blocks: int
    acf_lags: tuple[int, ...]  # in blocks, one per ACF_LAGS_S (0: does not fit)
    folds: tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, ...]  # per period: order, starts, counts

    @staticmethod
    def of(n_slots: int, interval_s: float, thresholds: PatternThresholds) -> _Plan:
        n_bins = n_slots // 2 + 1
        block = int(min(n_slots, max(1, math.floor(thresholds.block_s / interval_s + 1e-9))))
        n_blocks = n_slots // block
        block_s = block * interval_s
        lags = []
        for lag_s in ACF_LAGS_S:
            lag = int(round(lag_s / block_s))
            lags.append(lag if 0 < lag <= n_blocks // 2 else 0)
        folds: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = []
        for period_s in PERIODS_S:
            if n_blocks * block_s < thresholds.min_cycles * period_s or period_s < 2 * block_s:
                folds.append(None)
                continue
            phase = np.floor(np.mod(np.arange(n_blocks) * block_s, period_s) / block_s + 1e-9).astype(
                np.int64
            )
            order = np.argsort(phase, kind="stable")
            sorted_phase = phase[order]
            starts = np.flatnonzero(np.diff(sorted_phase, prepend=-1))
            counts = np.diff(np.append(starts, n_blocks)).astype(np.float32)
            folds.append((order, starts, counts))
        windows = harmonic_windows(n_slots, interval_s, thresholds)
        return _Plan(
            n_slots=n_slots,
            windows=windows,
            harmonics=_Harmonics.of(windows),
            high=(max(1, n_bins - 2048, n_bins // 2), n_bins),  # top half, at most 2048 bins
            block=block,
            n_blocks=n_blocks,
            acf_lags=tuple(lags),
            folds=tuple(folds),
        )


def _filled(block: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(filled, mean, n_missing, first, last)`` of a float32 block of rows: NaN -> row mean, and
    each row's first and last observed slot (0 and -1 for a row without any)."""
    n_rows, n_slots = block.shape
    nan = np.isnan(block)
    n_missing = nan.view(np.int8).sum(axis=1, dtype=np.int64)  # (count_nonzero per row is slower)
    first = np.zeros(n_rows, dtype=np.int64)
    last = np.full(n_rows, n_slots - 1, dtype=np.int64)
    if n_missing.any():
        block = block.copy()
        np.copyto(block, np.float32(0.0), where=nan)
        mean = block.sum(axis=1).astype(np.float64) / np.maximum(n_slots - n_missing, 1)
        np.copyto(block, mean.astype(np.float32)[:, None], where=nan)
        # Observed window: only rows that start or end with a missing slot need a search.
        edge = np.flatnonzero(nan[:, 0] | nan[:, -1])
        if edge.size:
            seen = ~nan[edge]
            any_seen = n_missing[edge] < n_slots
            first[edge] = np.where(any_seen, np.argmax(seen, axis=1), 0)
            last[edge] = np.where(any_seen, n_slots - 1 - np.argmax(seen[:, ::-1], axis=1), -1)
    else:
        mean = block.sum(axis=1).astype(np.float64) / n_slots  # float32 pairwise sum: ~1e-7 relative
    bad = np.flatnonzero(~np.isfinite(mean))
    if bad.size:
        raise PolicyError(
            f"cpu row {lo + int(bad[0])} holds an infinite value (expected fractions 0..1 or NaN)"
        )
    return block, mean, n_missing, first, last


def filled_chunks(
    cpu: np.ndarray,
    chunk_rows: int,
    n_missing_known: np.ndarray | None = None,
    mean_known: np.ndarray | None = None,
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(lo, hi, filled, mean, n_missing)`` per block of rows, as float32 with NaN -> row mean.

    ``mean`` is over the observed samples. A block without NaN is not copied when ``cpu`` is float32
    already (callers only read it). ``n_missing_known`` (NaN count per row, from an earlier pass)
    lets a block without NaN skip the NaN scan; its ``mean`` is then not computed (zeros).
    ``mean_known`` (the row means of an earlier pass) saves computing them again.
    """
    n = cpu.shape[0]
    for lo in range(0, n, chunk_rows):
        hi = min(n, lo + chunk_rows)
        block = np.asarray(cpu[lo:hi], dtype=np.float32)
        if n_missing_known is not None and not n_missing_known[lo:hi].any():
            yield lo, hi, block, np.zeros(hi - lo), np.zeros(hi - lo, dtype=np.int64)
            continue
        if mean_known is not None and n_missing_known is not None:
            block = np.where(np.isnan(block), mean_known[lo:hi].astype(np.float32)[:, None], block)
            yield lo, hi, block, mean_known[lo:hi], n_missing_known[lo:hi]
            continue
        filled, mean, n_missing, _, _ = _filled(block, lo)
        yield lo, hi, filled, mean, n_missing


_COLUMNS = (
    "mean",
    "missing",
    "std",
    "noise_std",
    "signal_std",
    "daily",
    "weekly",
    "periodic",
    "periodic_std",
)


def scan_series(
    cpu: np.ndarray,
    interval_s: float,
    thresholds: PatternThresholds,
    chunk_rows: int,
    *,
    peak_percentile: float | None = None,
    hour_of_slot: np.ndarray | None = None,
) -> ScanResult:
    """One pass over the rows: the features of the rule, and optionally peak, current and hourly profile.

    Steps per chunk of ``chunk_rows`` rows: 1. fill NaN with the row mean and find each row's
    observed window; 2. set aside the rows observed over less than ``own_window_below_frac`` of
    the grid; 3. features of the others (spectrum, blocks, peak, hourly profile of the rows the
    rule makes periodic). Then 4. each set-aside row is scanned on its own window, rows with the
    same window together.
    """
    if cpu.ndim != 2 or cpu.shape[1] < 2:
        raise PolicyError(f"cpu must be a 2-D array [tenants, slots] with >= 2 slots, got shape {cpu.shape}")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise PolicyError(f"interval_s must be a positive number of seconds, got {interval_s}")
    thresholds.validate()
    n, n_slots = cpu.shape
    plan = _Plan.of(n_slots, interval_s, thresholds)
    cols = {name: np.zeros(n, dtype=np.float64) for name in (*_COLUMNS, "peak", "current")}
    acf = np.zeros((n, len(ACF_LAGS_S)), dtype=np.float64)
    swing = np.zeros((n, len(PERIODS_S)), dtype=np.float64)
    n_missing_all = np.zeros(n, dtype=np.int64)
    window = np.zeros((n, 2), dtype=np.int64)
    window[:, 1] = n_slots
    hourly = np.zeros((n, 24), dtype=np.float64) if hour_of_slot is not None else None
    hour_matrix = _hour_matrix(hour_of_slot) if hour_of_slot is not None else None
    hour_present = hour_matrix.sum(axis=0) > 0 if hour_matrix is not None else None
    own: dict[tuple[int, int], list[int]] = {}
    min_window = thresholds.own_window_below_frac * n_slots
    for lo in range(0, n, chunk_rows):
        hi = min(n, lo + chunk_rows)
        # 1. Fill, and find each row's observed window.
        block, mean, n_missing, first, last = _filled(np.asarray(cpu[lo:hi], dtype=np.float32), lo)
        n_missing_all[lo:hi] = n_missing
        rows = np.arange(lo, hi)
        # 2. Rows observed over a short window are scanned on it below.
        length = last - first + 1
        short = (length < min_window) & (length >= 2)
        if short.any():
            for r, f, k in zip(rows[short], first[short], length[short], strict=True):
                own.setdefault((int(f), int(k)), []).append(int(r))
            keep = ~short
            block, mean, n_missing, rows = block[keep], mean[keep], n_missing[keep], rows[keep]
            if rows.size == 0:
                continue
        # 3. Features of the rows scanned on the whole grid.
        part = _chunk_features(block, mean, n_missing, plan)
        for name in _COLUMNS:
            cols[name][rows] = part[name]
        acf[rows], swing[rows] = part["acf"], part["swing"]
        if peak_percentile is not None:
            cols["peak"][rows] = row_percentile(block, peak_percentile)
            cols["current"][rows] = block[:, -1]
        if hourly is not None and hour_matrix is not None:
            # Hour-of-day profile, only for the rows that the rule makes periodic (the costly product).
            chunk_patterns = pattern_rule(_rule_inputs(part), thresholds)
            periodic = np.flatnonzero(chunk_patterns == Pattern.PERIODIC)
            if periodic.size:
                hourly[rows[periodic]] = (block[periodic] @ hour_matrix - mean[periodic, None]) * hour_present
    # 4. Each short window on its own (rows sharing a window in one batch).
    for (f, k), members in sorted(own.items()):
        idx = np.asarray(members, dtype=np.int64)
        sub = scan_series(
            np.asarray(cpu[idx, f : f + k]),
            interval_s,
            replace(thresholds, own_window_below_frac=0.0),
            chunk_rows,
            peak_percentile=peak_percentile,
            hour_of_slot=hour_of_slot[f : f + k] if hour_of_slot is not None else None,
        )
        p = sub.profile
        for name, values in (
            ("mean", p.mean_cpu),
            ("missing", p.missing_frac),
            ("std", p.std_cpu),
            ("noise_std", p.noise_std_cpu),
            ("signal_std", p.signal_std_cpu),
            ("daily", p.daily_energy_frac),
            ("weekly", p.weekly_energy_frac),
            ("periodic", p.periodic_energy_frac),
            ("periodic_std", p.periodic_std_cpu),
        ):
            cols[name][idx] = values
        acf[idx], swing[idx] = p.acf, p.swing
        window[idx] = (f, k)
        if peak_percentile is not None and sub.peak_cpu is not None and sub.current_cpu is not None:
            cols["peak"][idx], cols["current"][idx] = sub.peak_cpu, sub.current_cpu
        if hourly is not None and sub.hourly_dev is not None:
            hourly[idx] = sub.hourly_dev
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
        acf=acf,
        swing=swing,
    )
    return ScanResult(
        profile=profile,
        peak_cpu=np.maximum(cols["peak"], mean_cpu) if peak_percentile is not None else None,
        current_cpu=cols["current"] if peak_percentile is not None else None,
        hourly_dev=hourly,
        n_missing=n_missing_all,
        window=window,
    )


def _rule_inputs(part: dict[str, np.ndarray]) -> RuleInputs:
    return RuleInputs(
        part["mean"],
        part["signal_std"],
        part["daily"],
        part["weekly"],
        part["periodic"],
        part["periodic_std"],
        part["missing"],
        part["acf"],
        part["swing"],
    )


def _chunk_features(
    block: np.ndarray, mean: np.ndarray, n_missing: np.ndarray, plan: _Plan
) -> dict[str, np.ndarray]:
    """Spectral and block features of a chunk of filled rows."""
    part = {"mean": mean, "missing": n_missing / plan.n_slots}
    part.update(_spectral_features(block, part["missing"], plan.harmonics, plan.high))
    part.update(_block_features(block, mean, plan))
    return part


def _block_features(block: np.ndarray, mean: np.ndarray, plan: _Plan) -> dict[str, np.ndarray]:
    """``acf`` of the block maxima and ``swing`` of the folded block means (module docstring).

    With ``y`` the block maxima minus their row mean: ``r(L) = mean_t(y_t * y_{t+L}) / mean_t(y_t^2)``
    over the overlapping pairs (0 when a lag does not fit or a row is flat); independent of the
    series' scale and offset. ``swing = (max - min of the mean per phase of P) / row mean``.
    """
    n_rows = block.shape[0]
    acf = np.zeros((n_rows, len(plan.acf_lags)), dtype=np.float64)
    swing = np.zeros((n_rows, len(plan.folds)), dtype=np.float64)
    if plan.n_blocks < 2:
        return {"acf": acf, "swing": swing}
    shaped = block[:, : plan.n_blocks * plan.block].reshape(n_rows, plan.n_blocks, plan.block)
    if plan.block > 1:
        # One transposed copy, then reductions over a long middle axis: numpy reduces a short last
        # axis (the 15 slots of a block) several times slower.
        by_offset = np.ascontiguousarray(shaped.transpose(0, 2, 1))
        top = by_offset.max(axis=1).astype(np.float64)
        avg = by_offset.sum(axis=1) / np.float32(plan.block)
        del by_offset
    else:
        top = shaped[:, :, 0].astype(np.float64)
        avg = shaped[:, :, 0]
    y = top - top.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", y, y) / plan.n_blocks
    positive = var > 0
    safe_var = np.where(positive, var, 1.0)
    for j, lag in enumerate(plan.acf_lags):
        if lag:
            cov = np.einsum("ij,ij->i", y[:, :-lag], y[:, lag:]) / (plan.n_blocks - lag)
            acf[:, j] = np.where(positive, cov / safe_var, 0.0)
    level = np.where(mean > 0, mean, 1.0)
    for j, fold in enumerate(plan.folds):
        if fold is None:
            continue
        order, starts, counts = fold
        profile = np.add.reduceat(avg[:, order], starts, axis=1) / counts
        swing[:, j] = np.where(mean > 0, (profile.max(axis=1) - profile.min(axis=1)) / level, 0.0)
    return {"acf": acf, "swing": swing}


def _spectral_features(
    block: np.ndarray, missing: np.ndarray, harmonics: _Harmonics, high: tuple[int, int]
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
    # |X_k|^2 = re^2 + im^2: square the spectrum's float pairs in place and add each pair only
    # where a bin's power is needed (the noise band and the harmonic windows), not for every bin.
    squares = np.fft.rfft(block, axis=1).view(block.dtype if block.dtype == np.float32 else np.float64)
    np.square(squares, out=squares)
    n_bins = squares.shape[1] // 2
    squares[:, :2] = 0.0  # DC is the mean, not variation
    energy = squares.sum(axis=1).astype(np.float64)  # float32 pairwise sum: ~1e-7 relative
    band = squares[:, 2 * high[0] : 2 * high[1] : 2] + squares[:, 2 * high[0] + 1 : 2 * high[1] : 2]
    mid = band.shape[1] // 2
    floor = np.partition(band, mid, axis=1)[:, mid].astype(np.float64) / math.log(2.0)
    signal = np.clip(energy - floor * (n_bins - 1), 0.0, energy)
    out: dict[str, np.ndarray] = {"daily": np.zeros(len(block)), "weekly": np.zeros(len(block))}
    if harmonics.peak_bins.size:
        # Energy of each harmonic above its local background, the median power of its (at most
        # 32) nearest non-harmonic bins: a smoothly falling spectrum earns ~0.
        peak_power = squares[:, 2 * harmonics.peak_idx] + squares[:, 2 * harmonics.peak_idx + 1]
        peak = np.add.reduceat(peak_power, harmonics.peak_starts, axis=1, dtype=np.float64)
        near = squares[:, 2 * harmonics.background_idx] + squares[:, 2 * harmonics.background_idx + 1]
        near[:, harmonics.padding] = np.inf
        near.sort(axis=2)
        w = np.arange(harmonics.peak_bins.size)
        lo, hi = harmonics.middle
        background = (near[:, w, lo].astype(np.float64) + near[:, w, hi]) / 2.0
        excess = np.maximum(peak - harmonics.peak_bins * background, 0.0)
        safe = np.where(signal > 0, signal, 1.0)[:, None]
        share = np.where(signal[:, None] > 0, excess / safe, 0.0)
        out["daily"] = share[:, harmonics.daily].sum(axis=1)
        out["weekly"] = share[:, ~harmonics.daily].sum(axis=1)
    out["periodic"] = np.minimum(out["daily"] + out["weekly"], 1.0)  # the floor is an estimate: cap
    out["daily"] = np.minimum(out["daily"], 1.0)
    out["weekly"] = np.minimum(out["weekly"], 1.0)
    scale = 2.0 / float(n_slots) ** 2 / np.maximum(1.0 - missing, 1.0 / n_slots)
    out["std"] = np.sqrt(energy * scale)
    out["signal_std"] = np.sqrt(signal * scale)
    out["noise_std"] = np.sqrt(np.maximum(energy - signal, 0.0) * scale)
    out["periodic_std"] = out["signal_std"] * np.sqrt(out["periodic"])
    return out


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
