"""Pattern detection on spiky tenants and on tenants observed in different windows
(placement_service/core/patterns.py, pattern_rule.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from placement_service.core.clustering import UtilizationClustering
from placement_service.core.patterns import PatternThresholds, classify_patterns, frequency_profile
from placement_service.core.types import Pattern, TenantSeries
from placement_service.traces.synth import synth_tenant_cpu
from tests.fixtures.clustering.spiky import DAY_S, START_S, _ar1, _jobs, bursty, nightly, spiky_labelled_set

# --- spiky periodic tenants: a labelled set (tests/fixtures/clustering/spiky.py) ----------------


@pytest.mark.parametrize(("seed", "days", "interval_s"), [(1, 28, 300.0), (2, 14, 60.0)])
def test_nightly_jobs_are_periodic_and_bursts_are_not(seed: int, days: float, interval_s: float) -> None:
    cpu, truth, kinds, _ = spiky_labelled_set(seed=seed, days=days, interval_s=interval_s)
    patterns = classify_patterns(cpu, interval_s)
    expected = np.array(truth, dtype=object)
    kind = np.array(kinds)
    positive = expected == Pattern.PERIODIC
    called = patterns == Pattern.PERIODIC
    recall = float(np.mean(called[positive]))
    accuracy = float(np.mean(patterns == expected))
    binary_accuracy = float(np.mean(called == positive))
    assert recall >= 0.95, f"periodic recall {recall:.3f}"
    assert accuracy >= 0.95, f"accuracy {accuracy:.3f}"
    assert binary_accuracy >= 0.95, f"periodic-or-not accuracy {binary_accuracy:.3f}"
    for negative in ("constant", "bursty", "drifting"):  # no negative kind is called periodic
        assert float(np.mean(called[kind == negative])) <= 0.05, negative


def _row(
    generator: Callable[..., tuple[np.ndarray, dict[str, float]]],
    seed: int,
    days: float = 21.0,
    interval_s: float = 300.0,
) -> np.ndarray:
    t = START_S + np.arange(int(days * DAY_S / interval_s)) * interval_s
    return generator(t, interval_s, np.random.default_rng(seed))[0]


def test_a_short_job_a_day_on_a_fluctuating_base_is_periodic() -> None:
    # An eight-minute job at about 02:00 (+-4 minutes) on a base that wanders by 20% with a one-hour
    # correlation time: the job holds a few percent of the variance, so the autocorrelation of the
    # raw 5-minute slots at one day is low; the 30-minute block maxima keep the job whole.
    interval_s, days = 300.0, 21
    t = START_S + np.arange(int(days * DAY_S / interval_s)) * interval_s
    rows = []
    for seed in range(20):
        rng = np.random.default_rng([7, seed])
        base = 0.2 + _ar1(t.size, 0.04, 3600.0, interval_s, rng)
        starts = START_S + np.arange(days) * DAY_S + 2 * 3600.0 + rng.uniform(-240.0, 240.0, days)
        _jobs(base, t, starts, np.full(days, 480.0), rng.uniform(0.25, 0.35, days), interval_s)
        rows.append(np.clip(base + rng.normal(0.0, 0.01, t.size), 0.0, 1.0))
    cpu = np.array(rows)
    profile = frequency_profile(cpu, interval_s)
    assert list(profile.patterns()) == [Pattern.PERIODIC] * len(rows)
    raw = _raw_acf(cpu, int(DAY_S / interval_s))
    assert float(np.median(raw)) < 0.3  # what the former rule (raw slots, >= 0.3) saw
    assert np.all(profile.acf[:, 0] > raw + 0.1)


def _raw_acf(cpu: np.ndarray, lag: int) -> np.ndarray:
    y = cpu - cpu.mean(axis=1, keepdims=True)
    return np.mean(y[:, :-lag] * y[:, lag:], axis=1) / np.mean(y * y, axis=1)


def test_bursts_at_random_hours_are_not_periodic_whatever_their_rate() -> None:
    cpu = np.array([_row(bursty, seed) for seed in range(40)])
    profile = frequency_profile(cpu, 300.0)
    assert Pattern.PERIODIC not in set(profile.patterns())
    assert float(np.max(profile.acf[:, 0] - profile.acf[:, 1])) < 0.15


def test_a_visible_daily_ripple_needs_a_swing_next_to_the_level() -> None:
    # The same clean daily cycle on a high level: 2% peak-to-trough is a ripple (constant), 40% a cycle.
    t = np.arange(int(14 * DAY_S / 300.0)) * 300.0
    rng = np.random.default_rng(5)
    rows = [0.5 + a / 2 * np.sin(2 * np.pi * t / DAY_S) + rng.normal(0, 0.001, t.size) for a in (0.01, 0.2)]
    profile = frequency_profile(np.array(rows), 300.0)
    assert list(profile.patterns()) == [Pattern.CONSTANT, Pattern.PERIODIC]
    np.testing.assert_allclose(profile.swing[:, 0], [0.02, 0.4], rtol=0.1)
    assert list(
        classify_patterns(np.array(rows), 300.0, thresholds=PatternThresholds(periodic_min_swing=0.0))
    ) == [
        Pattern.PERIODIC,
        Pattern.PERIODIC,
    ]


# --- tenants observed in different windows --------------------------------------------------------


def _disjoint_windows(interval_s: float = 60.0) -> tuple[TenantSeries, list[Pattern]]:
    """Sixteen tenants on one per-minute grid over 320 days, each observed in its own 8-16 days
    (spread over the year, like traces collected one service at a time): 11 periodic (a daily
    cycle or a nightly job), 5 constant. NaN outside each window."""
    rng = np.random.default_rng(39)
    span_days = 320
    n_slots = int(span_days * DAY_S / interval_s)
    cpu = np.full((16, n_slots), np.nan)
    truth: list[Pattern] = []
    starts = np.sort(rng.choice(np.arange(0, span_days - 16), size=16, replace=False))
    for i, start_day in enumerate(starts):
        days = int(rng.integers(8, 17))
        lo = int(start_day * DAY_S / interval_s)
        n = int(days * DAY_S / interval_s)
        t = START_S + (lo + np.arange(n)) * interval_s
        if i < 11:
            if i % 2:
                row = nightly(t, interval_s, np.random.default_rng([39, i]))[0]
            else:
                row = synth_tenant_cpu(
                    Pattern.PERIODIC, n, interval_s, np.random.default_rng([39, i]), start_s=float(t[0])
                )
            truth.append(Pattern.PERIODIC)
        else:
            row = synth_tenant_cpu(
                Pattern.CONSTANT, n, interval_s, np.random.default_rng([39, i]), start_s=float(t[0])
            )
            truth.append(Pattern.CONSTANT)
        cpu[i, lo : lo + n] = row
    names = tuple(f"svc-{i:02d}" for i in range(16))
    return TenantSeries(names, START_S, interval_s, cpu), truth


def test_patterns_are_found_in_each_tenants_own_window() -> None:
    series, truth = _disjoint_windows()
    patterns = classify_patterns(series.cpu, series.interval_s)
    found = int(np.sum((patterns == Pattern.PERIODIC) & (np.array(truth, dtype=object) == Pattern.PERIODIC)))
    assert found >= 10, f"{found} of 11 periodic traces found"
    assert list(patterns[11:]) == [Pattern.CONSTANT] * 5
    # The same rows, each alone on its own window, give the same labels.
    alone = [classify_patterns(row[~np.isnan(row)][None, :], series.interval_s)[0] for row in series.cpu]
    assert list(patterns) == alone


def test_fit_on_disjoint_windows_reports_them_and_tags_each_tenant_by_its_window() -> None:
    series, truth = _disjoint_windows()
    model = UtilizationClustering().fit(series)
    assert set(model.own_window_tenants_) == set(series.tenants)
    assert sum(model.patterns_[t] is Pattern.PERIODIC for t in series.tenants) >= 10
    for i, tenant in enumerate(series.tenants):  # the average is over the observed window
        assert model.tenant_avg_cpu_[tenant] == pytest.approx(float(np.nanmean(series.cpu[i])), rel=1e-5)
    # A tenant's window is its first to last observed slot: a gap inside it stays a gap.
    cpu = series.cpu.copy()
    row = cpu[0]
    seen = np.flatnonzero(~np.isnan(row))
    row[seen[len(seen) // 2] : seen[len(seen) // 2] + 30] = np.nan
    again = classify_patterns(cpu[:1], series.interval_s)
    assert again[0] is model.patterns_[series.tenants[0]]


def test_rows_observed_over_most_of_the_grid_stay_on_the_grid() -> None:
    rng = np.random.default_rng(3)
    cpu = 0.3 + rng.normal(0.0, 0.01, (2, 4032))
    cpu[0, :200] = np.nan  # 5% missing at the start: under the 10% at which a row gets its own window
    cpu[1, :1000] = np.nan  # 25%
    default = frequency_profile(cpu, 300.0).missing_frac
    np.testing.assert_allclose(default, [200 / 4032, 0.0])
    always = PatternThresholds(own_window_below_frac=1.0)
    np.testing.assert_allclose(frequency_profile(cpu, 300.0, thresholds=always).missing_frac, [0.0, 0.0])
    never = PatternThresholds(own_window_below_frac=0.0)
    np.testing.assert_allclose(
        frequency_profile(cpu, 300.0, thresholds=never).missing_frac, [200 / 4032, 1000 / 4032]
    )
