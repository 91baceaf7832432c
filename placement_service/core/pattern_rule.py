"""The pattern rule: settings, per-tenant features and the decision periodic / constant / unpredictable.

The features are computed by ``patterns.scan_series``; the rule and every threshold are described,
with measured numbers, in ``docs/clustering.md`` ("Pattern of a tenant").

Rule, first match wins:

1. no observed sample -> unpredictable;
2. periodic when a candidate period P (1 d or 7 d) is confirmed three ways:
   - the autocorrelation of the 30-minute block maxima at P is >= ``periodic_min_acf`` (0.3) and
     exceeds its value at 3P/4 by >= ``periodic_min_acf_rise`` (0.15): a hill at P, not a drift
     (whose autocorrelation is high at every lag) and not chance;
   - the spectrum agrees: P's harmonics hold >= ``periodic_acf_energy_frac`` (0.05) of the signal
     energy, or all daily and weekly harmonics together >= ``periodic_min_energy_frac`` (0.5);
   - the cycle is not negligible next to the level: the peak-to-trough of the series folded at P
     (mean per 30-minute phase of P) is >= ``periodic_min_swing`` (0.15) times the mean;
3. constant when ``signal_std_cpu <= constant_max_cv * mean_cpu`` (0.25);
4. otherwise unpredictable.

Every default term is a ratio, so a series scaled by any factor gets the same label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_service.core.types import Pattern, PolicyError

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
PATTERN_ORDER: tuple[Pattern, ...] = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)
PERIODS_S: tuple[float, ...] = (DAY_S, WEEK_S)
"""Candidate periods, in the order of the ``acf`` / ``swing`` feature columns."""
ACF_LAGS_S: tuple[float, ...] = (DAY_S, 0.75 * DAY_S, WEEK_S, 0.75 * WEEK_S)
"""Lags of the ``acf`` feature columns: each candidate period, then 3/4 of it."""


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
    periodic_min_acf_rise: float = 0.15
    periodic_acf_energy_frac: float = 0.05
    periodic_min_swing: float = 0.15
    periodic_min_cv: float = 0.0
    peak_halfwidth_bins: float = 1.0
    min_cycles: float = 3.0
    min_background_bins: int = 4
    block_s: float = 1800.0
    """Block length of the time-domain features (autocorrelation of block maxima, folded profile)."""
    own_window_below_frac: float = 0.9
    """A row observed over less than this share of the grid (first to last observed slot) is
    analysed on its own window, not on the whole grid."""

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
        if not 0.0 <= self.periodic_min_acf_rise <= 2.0:
            raise PolicyError(f"periodic_min_acf_rise must be in [0, 2], got {self.periodic_min_acf_rise}")
        if self.periodic_min_cv < 0.0 or self.periodic_min_swing < 0.0:
            raise PolicyError(
                f"periodic_min_cv and periodic_min_swing must be >= 0, got {self.periodic_min_cv}, "
                f"{self.periodic_min_swing}"
            )
        if self.min_cycles < 1.0 or self.min_background_bins < 1:
            raise PolicyError(
                f"min_cycles and min_background_bins must be >= 1, got {self.min_cycles}, {self.min_background_bins}"
            )
        if not (self.block_s > 0.0 and np.isfinite(self.block_s)):
            raise PolicyError(f"block_s must be a positive number of seconds, got {self.block_s}")
        if not 0.0 <= self.own_window_below_frac <= 1.0:
            raise PolicyError(f"own_window_below_frac must be in [0, 1], got {self.own_window_below_frac}")


@dataclass(frozen=True)
class FrequencyProfile:
    """Per-tenant features of the pattern rule; every field is an array with one value per row.

    All ``*_cpu`` values are fractions of the cores; the energy shares are of the signal energy (the
    non-DC energy minus the white-noise floor), capped at 1. Features of a row analysed on its own
    observation window (see ``PatternThresholds.own_window_below_frac``) are of that window.
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
    acf: np.ndarray  # [n, 4] autocorrelation of the block maxima at ACF_LAGS_S (0 where a lag does not fit)
    swing: np.ndarray  # [n, 2] peak-to-trough of the series folded at 1 d / 7 d, over the mean (0: too short)

    def patterns(self, thresholds: PatternThresholds = PatternThresholds()) -> np.ndarray:
        """Pattern of each row (object array of ``Pattern``), by the rule in the module docstring."""
        return pattern_rule(RuleInputs.of(self), thresholds)


@dataclass(frozen=True)
class RuleInputs:
    """The features the rule reads (a ``FrequencyProfile``, or the same arrays for a chunk of rows)."""

    mean: np.ndarray
    signal_std: np.ndarray
    daily: np.ndarray
    weekly: np.ndarray
    periodic: np.ndarray
    periodic_std: np.ndarray
    missing: np.ndarray
    acf: np.ndarray
    swing: np.ndarray

    @staticmethod
    def of(p: FrequencyProfile) -> RuleInputs:
        return RuleInputs(
            p.mean_cpu,
            p.signal_std_cpu,
            p.daily_energy_frac,
            p.weekly_energy_frac,
            p.periodic_energy_frac,
            p.periodic_std_cpu,
            p.missing_frac,
            p.acf,
            p.swing,
        )


def _acf_hill(acf: np.ndarray, period: int, thresholds: PatternThresholds) -> np.ndarray:
    """The autocorrelation at the candidate period is high and rises to it from 3/4 of the period
    (a cycle, not a slow drift whose autocorrelation only falls with the lag; 3/4 rather than 1/2
    so that a cycle of half the period, e.g. 12 h, also counts)."""
    at, before = acf[:, 2 * period], acf[:, 2 * period + 1]
    return (at >= thresholds.periodic_min_acf) & (at - before >= thresholds.periodic_min_acf_rise)


def pattern_rule(f: RuleInputs, thresholds: PatternThresholds) -> np.ndarray:
    """Pattern of each row by the rule of the module docstring (object array of ``Pattern``)."""
    out = np.empty(f.mean.shape, dtype=object)
    out[...] = Pattern.UNPREDICTABLE  # (np.full would store a plain str)
    has_data = f.missing < 1.0
    level = np.where(f.mean > 0, f.mean, 0.0)
    visible = f.swing >= thresholds.periodic_min_swing * level[:, None]
    visible &= f.swing > 0  # 0: the series is too short for the period (or flat)
    day = _acf_hill(f.acf, 0, thresholds) & visible[:, 0]
    week = _acf_hill(f.acf, 1, thresholds) & visible[:, 1]
    cycle = (
        (day & (f.daily >= thresholds.periodic_acf_energy_frac))
        | (week & (f.weekly >= thresholds.periodic_acf_energy_frac))
        | ((f.periodic >= thresholds.periodic_min_energy_frac) & (day | week))
    )
    periodic = (
        has_data
        & cycle
        & (f.periodic_std >= thresholds.periodic_min_cv * f.mean)
        & (f.periodic_std >= thresholds.periodic_min_std_cpu)
    )
    small = f.signal_std <= np.maximum(thresholds.constant_max_cv * f.mean, thresholds.constant_max_std_cpu)
    out[has_data & ~periodic & small] = Pattern.CONSTANT
    out[periodic] = Pattern.PERIODIC
    return out


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
