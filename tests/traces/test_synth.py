"""Synthetic per-pattern series: realistic ranges, and each pattern has the frequency profile it claims."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.types import Pattern
from placement_service.traces.synth import DAY_S, PatternMix, labelled_tenant_series, synth_tenant_cpu

INTERVAL_S = 120.0
DAYS = 28
N = int(DAYS * DAY_S / INTERVAL_S)


def spectrum(x: np.ndarray) -> np.ndarray:
    return np.abs(np.fft.rfft(x - x.mean())) ** 2


def daily_share(x: np.ndarray, days: float = DAYS) -> float:
    """Share of the non-DC energy on the first 4 daily harmonics and the first 3 weekly ones (+-1 bin)."""
    p = spectrum(x)
    bins = set()
    for k in [round(days * h) for h in range(1, 5)] + [round(days / 7 * h) for h in range(1, 4)]:
        bins.update({k - 1, k, k + 1})
    return float(p[sorted(b for b in bins if b >= 1)].sum() / p[1:].sum())


def daily_line_share(x: np.ndarray, days: int = DAYS) -> float:
    """Share of the non-DC energy on the first 4 daily harmonics only (+-1 bin)."""
    p = spectrum(x)
    return float(p[[days * h + d for h in range(1, 5) for d in (-1, 0, 1)]].sum() / p[1:].sum())


def low_over_high(x: np.ndarray) -> float:
    """Mean energy per bin below 4 cycles/day over the mean energy in the top half of the spectrum."""
    p = spectrum(x)
    return float(p[1 : 4 * DAYS].mean() / p[len(p) // 2 :].mean())


def series(pattern: Pattern, seed: int, **kw) -> np.ndarray:
    return synth_tenant_cpu(pattern, N, INTERVAL_S, np.random.default_rng(seed), **kw)


@pytest.mark.parametrize("pattern", list(Pattern))
def test_values_are_fractions_and_deterministic(pattern):
    a, b = series(pattern, 5), series(pattern, 5)
    assert a.shape == (N,) and np.array_equal(a, b)
    assert a.min() >= 0.0 and a.max() <= 1.0
    assert not np.array_equal(a, series(pattern, 6))


def test_periodic_tenants_put_most_energy_on_daily_or_weekly_lines():
    shares = [daily_share(series(Pattern.PERIODIC, s, weekly=s % 3 == 0)) for s in range(40)]
    assert min(shares) > 0.5


def test_constant_tenants_are_flat():
    for s in range(40):
        x = series(Pattern.CONSTANT, s)
        assert x.std() < 0.04
        assert daily_line_share(x) < 0.2


def test_unpredictable_tenants_vary_a_lot_at_low_frequencies_without_a_daily_line():
    for s in range(40):
        x = series(Pattern.UNPREDICTABLE, s)
        assert x.std() >= 0.04
        assert daily_line_share(x) < 0.2  # at most a weak diurnal component
        assert low_over_high(x) > 100.0  # energy falls with frequency (constant: white, ratio ~ 1-100)


def test_constant_and_unpredictable_differ_in_spectral_shape_not_only_level():
    const = [low_over_high(series(Pattern.CONSTANT, s)) for s in range(30)]
    unpred = [low_over_high(series(Pattern.UNPREDICTABLE, s)) for s in range(30)]
    assert max(const) < min(unpred)
    levels_c = [series(Pattern.CONSTANT, s).mean() for s in range(30)]
    levels_u = [series(Pattern.UNPREDICTABLE, s).mean() for s in range(30)]
    assert max(levels_c) > min(levels_u) and max(levels_u) > min(levels_c)  # levels overlap


def test_weekly_tenants_show_the_week_and_the_weekend():
    x = series(Pattern.PERIODIC, 11, weekly=True, phase_s=0.0, start_s=0.0)
    p = spectrum(x)
    k_week = DAYS // 7
    assert p[k_week] > 20 * np.median(p[1 : 2 * DAYS])
    day_mean = x.reshape(DAYS, -1).mean(axis=1)
    weekend = (np.arange(DAYS) % 7) >= 5  # epoch day 0 (a Thursday) shifted by phase 0: days 5, 6 of 7
    assert day_mean[weekend].mean() < day_mean[~weekend].mean()


def test_phase_moves_the_daily_peak():
    hours = []
    for s in range(24):
        x = series(Pattern.PERIODIC, s, noise=0.0, start_s=0.0)
        profile = x.reshape(DAYS, -1).mean(axis=0)
        hours.append(int(np.argmax(profile) * INTERVAL_S // 3600))
    assert len(set(hours)) >= 8


def test_noise_parameter_adds_white_noise():
    quiet = series(Pattern.CONSTANT, 1, noise=0.0)
    noisy = series(Pattern.CONSTANT, 1, noise=0.05)
    assert np.std(np.diff(noisy)) > 5 * np.std(np.diff(quiet))


def test_labelled_series_follow_the_mix_and_are_reproducible():
    s1, truth1 = labelled_tenant_series(50, seed=3, days=7, interval_s=300, mix=PatternMix(0.2, 0.5, 0.3))
    s2, truth2 = labelled_tenant_series(50, seed=3, days=7, interval_s=300, mix=PatternMix(0.2, 0.5, 0.3))
    assert s1.cpu.shape == (50, 7 * 288) and s1.interval_s == 300.0
    assert np.array_equal(s1.cpu, s2.cpu) and truth1 == truth2
    counts = {p: sum(1 for v in truth1.values() if v is p) for p in Pattern}
    assert counts == {Pattern.PERIODIC: 10, Pattern.CONSTANT: 25, Pattern.UNPREDICTABLE: 15}
    assert set(truth1) == set(s1.tenants)


def test_missing_samples_are_filled_like_tenant_series():
    full, _ = labelled_tenant_series(20, seed=4, days=7, interval_s=300)
    holes, _ = labelled_tenant_series(20, seed=4, days=7, interval_s=300, missing_frac=0.1)
    assert not np.isnan(holes.cpu).any() and holes.long_gaps == ()
    changed = full.cpu != holes.cpu
    assert 0.05 < changed.mean() < 0.15  # about missing_frac of the slots were re-created
    long, _ = labelled_tenant_series(20, seed=4, days=7, interval_s=300, missing_frac=0.1, max_gap_slots=8)
    assert long.long_gaps and all(n > 3 for _, _, n in long.long_gaps)
    assert np.isnan(long.cpu).sum() == sum(n for _, _, n in long.long_gaps)
