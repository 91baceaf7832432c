"""Synthetic CPU series of one primary tenant's average server, per utilization pattern.

Pure numpy, driven by a caller-owned ``np.random.Generator``. The three patterns follow Section 3 of
the harvesting paper (OSDI'16) and are described with every number in ``docs/generator.md``:

- **periodic** (user-facing services): a strong daily cycle -- a smooth sine, a business-hours bump or
  a morning + evening double peak -- at a random peak hour, peak-to-trough 0.08..0.45 of the cores,
  day-to-day amplitude jitter, a slow drift, a few short spikes; ``weekly=True`` adds a weekend
  (2 of every 7 days) with a smaller cycle and a lower level, i.e. weekly and daily peaks in the FFT;
- **constant** (crawlers, scrubbers, storage back ends): a flat level with small slow fluctuation
  (std 0.004..0.012), at most two small persistent steps (0.01..0.03), an optional barely visible
  diurnal ripple (<= 0.01 peak-to-trough);
- **unpredictable** (testing, development, ad-hoc analytics): a low base plus one to three irregular
  components -- regime changes (piecewise levels, ~12 a month), bursts (random start, random
  length, random height) and a mean-reverting random walk (correlation time 6 h..2 days) -- scaled
  so their std is at least 0.05; some carry a weak diurnal component (<= 0.06 peak-to-trough), so
  "has some daily energy" alone is not enough.

Every pattern gets white measurement noise of std ``noise`` and is clipped to [0, 1]. The classes
are separable by their frequency profile (a dominant daily/weekly line; almost no energy outside
white noise; energy falling off with frequency) but overlap in level, noise and phase, so a
classifier has to look at the spectrum, not at the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from placement_service.core.types import Pattern, TenantSeries

DAY_S = 86400.0
WEEK_S = 7 * DAY_S
DEFAULT_START_S = 1456790400.0
"""2016-03-01T00:00:00Z, a Tuesday: the default first slot of generated series (a midnight)."""
DEFAULT_NOISE = 0.01
"""Default std of the white measurement noise, as a fraction of the server's cores."""


@dataclass(frozen=True)
class PatternMix:
    """Shares of tenants per pattern for :func:`labelled_tenant_series` (normalized when used)."""

    periodic: float = 0.3
    constant: float = 0.4
    unpredictable: float = 0.3
    weekly_frac: float = 0.3
    """Share of periodic tenants with a weekly (weekday / weekend) cycle on top of the daily one."""


def ar1(n: int, sigma: float, tau_s: float, interval_s: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) (discretized Ornstein-Uhlenbeck) noise: std ``sigma``, correlation time ``tau_s``."""
    phi = float(np.exp(-interval_s / max(tau_s, 1e-9)))
    e = rng.standard_normal(n) * sigma * np.sqrt(1.0 - phi * phi)
    if n:
        e[0] = rng.standard_normal() * sigma
    return np.asarray(lfilter([1.0], [1.0, -phi], e))


def _daily_shape(hour: np.ndarray, kind: int, width_h: float) -> np.ndarray:
    """A daily profile in [0, 1] peaking at hour 0 (the caller shifts hours by the tenant's phase)."""
    x = 2 * np.pi * hour / 24.0
    if kind == 0:  # smooth sine
        return 0.5 + 0.5 * np.cos(x)
    if kind == 1:  # business hours: raised cosine bump of width_h hours around the peak
        d = np.abs(((hour + 12.0) % 24.0) - 12.0)
        return np.where(d < width_h / 2, 0.5 + 0.5 * np.cos(np.pi * d / (width_h / 2)), 0.0)
    # two peaks (morning and evening, the evening one higher), 10 h apart
    a = 0.5 + 0.5 * np.cos(x)
    b = 0.5 + 0.5 * np.cos(x + 2 * np.pi * 10.0 / 24.0)
    s = a**3 + 0.7 * b**3
    return s / s.max()


def _bursts(
    n: int, interval_s: float, rng: np.random.Generator, per_day: float, median_s: float, height: tuple[float, float]
) -> np.ndarray:
    """Rectangular bursts (softened edges): Poisson arrivals, log-normal lengths, uniform heights."""
    days = n * interval_s / DAY_S
    k = int(rng.poisson(per_day * days))
    delta = np.zeros(n + 1)
    starts = rng.integers(0, max(n, 1), size=k)
    lengths = np.maximum(1, np.rint(rng.lognormal(np.log(median_s), 0.8, size=k) / interval_s)).astype(np.int64)
    heights = rng.uniform(height[0], height[1], size=k)
    np.add.at(delta, starts, heights)
    np.add.at(delta, np.minimum(starts + lengths, n), -heights)
    out = np.cumsum(delta[:n])
    return np.convolve(out, np.ones(3) / 3.0, mode="same") if n >= 3 else out


def synth_tenant_cpu(
    pattern: Pattern,
    n_slots: int,
    interval_s: float,
    rng: np.random.Generator,
    *,
    level: float | None = None,
    noise: float = DEFAULT_NOISE,
    phase_s: float | None = None,
    weekly: bool = False,
    start_s: float = DEFAULT_START_S,
) -> np.ndarray:
    """One tenant's average-server CPU fraction (0..1) in ``n_slots`` slots of ``interval_s`` seconds.

    ``level``: the mean utilization before noise (drawn per pattern when None). ``phase_s``: the
    daily peak is at ``phase_s mod 1 day`` (UTC); for weekly tenants its whole days also shift the
    week: days run midnight to midnight UTC, and day ``d`` (since the epoch, a Thursday) is a weekend
    day when ``(d - floor(phase_s / 1 day)) mod 7`` is 5 or 6 (a phase of 4 days + h hours: Saturday
    and Sunday, peak at h). Uniform over a day (a week when ``weekly``) when None. ``weekly`` only
    applies to periodic tenants. ``start_s`` is the epoch time of slot 0.
    """
    n = int(n_slots)
    t = start_s + np.arange(n, dtype=np.float64) * interval_s
    pattern = Pattern(pattern)
    if pattern is Pattern.PERIODIC:
        x = _periodic(t, interval_s, rng, level, phase_s, weekly)
    elif pattern is Pattern.CONSTANT:
        x = _constant(t, interval_s, rng, level, phase_s)
    else:
        x = _unpredictable(t, interval_s, rng, level, phase_s)
    if noise > 0:
        x = x + rng.normal(0.0, noise, size=n)
    return np.clip(x, 0.0, 1.0)


def _periodic(
    t: np.ndarray, interval_s: float, rng: np.random.Generator, level: float | None, phase_s: float | None, weekly: bool
) -> np.ndarray:
    n = len(t)
    mean = float(rng.uniform(0.15, 0.45)) if level is None else float(level)
    phase = float(rng.uniform(0, WEEK_S if weekly else DAY_S)) if phase_s is None else float(phase_s)
    kind = int(rng.integers(0, 3))
    width_h = float(rng.uniform(8.0, 14.0))
    swing = float(rng.uniform(0.08, 0.45))  # peak-to-trough of a weekday
    swing = min(swing, 2 * max(mean - 0.02, 0.02), 2 * (0.95 - mean))
    # The peak is at t = phase (mod 1 day); days run midnight to midnight (UTC), counted from the
    # epoch shifted by the whole days of the phase, and days 5 and 6 of each 7 are the weekend.
    hour = ((t - phase) % DAY_S) / 3600.0
    shape = _daily_shape(hour, kind, width_h)
    shape = shape - shape.mean()
    abs_day = np.floor((t - np.floor(phase / DAY_S) * DAY_S) / DAY_S).astype(np.int64)
    day = abs_day - (abs_day.min() if n else 0)
    # Day-to-day jitter of the swing (each day's peak differs a little).
    n_days = int(day.max()) + 1 if n else 0
    amp = swing * (1.0 + 0.08 * rng.standard_normal(n_days))
    base = np.full(n_days, mean)
    if weekly:
        weekend = (abs_day % 7) >= 5
        wk_days = np.unique(day[weekend])
        amp[wk_days] *= rng.uniform(0.2, 0.6)
        base[wk_days] -= rng.uniform(0.02, 0.08) * mean / 0.3
    x = base[day] + amp[day] * shape
    x += np.linspace(0.0, float(rng.uniform(-0.03, 0.03)), n)  # slow drift over the window
    x += ar1(n, float(rng.uniform(0.006, 0.015)), 1800.0, interval_s, rng)
    x += _bursts(n, interval_s, rng, per_day=0.07, median_s=1200.0, height=(0.04, 0.12))
    return x


def _constant(
    t: np.ndarray, interval_s: float, rng: np.random.Generator, level: float | None, phase_s: float | None
) -> np.ndarray:
    n = len(t)
    mean = float(np.clip(rng.lognormal(np.log(0.2), 0.6), 0.03, 0.8)) if level is None else float(level)
    x = np.full(n, mean)
    x += ar1(n, float(rng.uniform(0.004, 0.012)), 3600.0, interval_s, rng)
    for _ in range(min(int(rng.poisson(0.7)), 2)):  # small persistent steps (a redeploy, a config change)
        at = int(rng.integers(0, max(n, 1)))
        x[at:] += float(rng.choice([-1.0, 1.0]) * rng.uniform(0.01, 0.03))
    if rng.random() < 0.5:  # a barely visible diurnal ripple
        phase = float(rng.uniform(0, DAY_S)) if phase_s is None else float(phase_s)
        x += 0.5 * float(rng.uniform(0.0, 0.01)) * np.cos(2 * np.pi * (t - phase) / DAY_S)
    return x


def _unpredictable(
    t: np.ndarray, interval_s: float, rng: np.random.Generator, level: float | None, phase_s: float | None
) -> np.ndarray:
    n = len(t)
    base = float(rng.uniform(0.03, 0.3)) if level is None else float(level)
    parts = rng.permutation(3)[: int(rng.integers(1, 4))]
    irregular = np.zeros(n)
    for part in parts:
        if part == 0:  # regime changes: piecewise-constant levels
            k = max(4, int(rng.poisson(12.0 * n * interval_s / (30 * DAY_S))))
            cuts = np.sort(rng.integers(0, max(n, 1), size=k))
            levels = rng.uniform(0.0, 0.4, size=k + 1)
            irregular += levels[np.searchsorted(cuts, np.arange(n), side="right")]
        elif part == 1:  # bursts of activity (test runs, ad-hoc jobs)
            irregular += _bursts(
                n, interval_s, rng, per_day=float(rng.uniform(0.3, 3.0)), median_s=7200.0, height=(0.1, 0.5)
            )
        else:  # slow mean-reverting random walk
            irregular += ar1(n, float(rng.uniform(0.06, 0.15)), float(rng.uniform(0.25, 2.0)) * DAY_S, interval_s, rng)
    irregular -= irregular.mean() if n else 0.0
    std = float(irregular.std()) if n else 0.0
    target = float(rng.uniform(0.05, 0.15))
    if 0 < std < target:
        irregular *= target / std
    x = base + irregular
    if n and float(x.min()) < 0.01:  # lift so the quietest moment is still ~1% busy, not clipped
        x += 0.01 - float(x.min())
    if rng.random() < 0.3:  # weak diurnal component: testers work in the daytime, loosely
        phase = float(rng.uniform(0, DAY_S)) if phase_s is None else float(phase_s)
        x += 0.5 * float(rng.uniform(0.01, 0.06)) * np.cos(2 * np.pi * (t - phase) / DAY_S)
    x += ar1(n, float(rng.uniform(0.005, 0.015)), 1800.0, interval_s, rng)
    return x


def _missing_mask(n: int, frac: float, max_gap_slots: int, rng: np.random.Generator) -> np.ndarray:
    """Mark about ``frac`` of ``n`` slots missing in runs of 1..max_gap_slots that never touch.

    The row is cut into blocks of ``max_gap_slots + 1`` slots; a chosen block loses a run at its
    start, so at least one sample separates two runs.
    """
    mask = np.zeros(n, dtype=bool)
    if frac <= 0 or n == 0:
        return mask
    g = max(1, int(max_gap_slots))
    n_blocks = n // (g + 1)
    lengths = rng.integers(1, g + 1, size=n_blocks)
    mean_len = (g + 1) / 2.0
    p = min(1.0, frac * (g + 1) / mean_len)
    chosen = np.flatnonzero(rng.random(n_blocks) < p)
    starts = chosen * (g + 1)
    lens = lengths[chosen]
    idx = np.repeat(starts, lens) + (np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens))
    mask[idx] = True
    return mask


def labelled_tenant_series(
    n_tenants: int,
    *,
    seed: int,
    days: float = 30,
    interval_s: float = 120,
    noise: float = DEFAULT_NOISE,
    missing_frac: float = 0.0,
    max_gap_slots: int = 3,
    mix: PatternMix = PatternMix(),
    start_s: float = DEFAULT_START_S,
) -> tuple[TenantSeries, dict[str, Pattern]]:
    """``n_tenants`` synthetic average-server series with their true pattern, for testing clustering.

    Patterns are assigned by exact counts from ``mix`` (largest remainder), then shuffled. Each
    tenant gets a random level, phase (peak hour; weekend placement for weekly tenants) and shape.
    With ``missing_frac`` > 0, about that share of each tenant's slots is dropped in runs of
    1..``max_gap_slots`` slots and then filled exactly as :func:`tenant_series` fills short gaps
    (linear interpolation); with the default ``max_gap_slots=3`` no NaN remains. Tenants are named
    ``tenant-00000`` ... in order; the result is a pure function of the arguments.
    """
    from placement_service.traces.series import fill_gaps

    n_slots = int(round(days * DAY_S / interval_s))
    shares = np.array([mix.periodic, mix.constant, mix.unpredictable], dtype=np.float64)
    shares = shares / shares.sum()
    counts = np.floor(shares * n_tenants).astype(np.int64)
    rest = n_tenants - int(counts.sum())
    counts[np.argsort(-(shares * n_tenants - counts), kind="stable")[:rest]] += 1
    order_rng = np.random.default_rng([seed, 0])
    kinds = np.repeat(np.arange(3), counts)
    order_rng.shuffle(kinds)
    patterns = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)
    names = tuple(f"tenant-{i:05d}" for i in range(n_tenants))
    cpu = np.empty((n_tenants, n_slots), dtype=np.float64)
    truth: dict[str, Pattern] = {}
    for i in range(n_tenants):
        rng = np.random.default_rng([seed, 1, i])
        pattern = patterns[int(kinds[i])]
        weekly = pattern is Pattern.PERIODIC and rng.random() < mix.weekly_frac
        row = synth_tenant_cpu(pattern, n_slots, interval_s, rng, noise=noise, weekly=weekly, start_s=start_s)
        if missing_frac > 0:
            row[_missing_mask(n_slots, missing_frac, max_gap_slots, rng)] = np.nan
        cpu[i] = row
        truth[names[i]] = pattern
    gaps: list[tuple[int, int, int]] = []
    if missing_frac > 0:
        cpu, gaps = fill_gaps(cpu, max_fill_slots=3)
    series = TenantSeries(
        tenants=names,
        start_s=float(start_s),
        interval_s=float(interval_s),
        cpu=cpu,
        long_gaps=tuple((names[r], c, k) for r, c, k in gaps),
    )
    return series, truth
