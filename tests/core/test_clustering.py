"""Pattern classification and the utilization-clustering estimator (placement_service/core/clustering.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from placement_service.core.clustering import (
    FrequencyProfile,
    PatternThresholds,
    UtilizationClustering,
    classify_patterns,
    frequency_profile,
    harmonic_windows,
)
from placement_service.core.types import ClassTable, Pattern, PolicyError, TenantSeries
from placement_service.traces.synth import labelled_tenant_series

DAY_S = 86400.0
INTERVAL_S = 120.0
N_SLOTS = int(30 * DAY_S / INTERVAL_S)  # 30 days of 2-minute slots


def _t(n_slots: int = N_SLOTS, interval_s: float = INTERVAL_S) -> np.ndarray:
    return np.arange(n_slots) * interval_s


def _daily(level: float, amplitude: float, phase_s: float = 0.0, **kw: float) -> np.ndarray:
    return level + amplitude * np.sin(2 * np.pi * (_t(**kw) - phase_s) / DAY_S)  # type: ignore[arg-type]


def _random_walk(rng: np.random.Generator, level: float, step: float, n_slots: int = N_SLOTS) -> np.ndarray:
    return np.clip(level + np.cumsum(rng.normal(0.0, step, n_slots)), 0.0, 1.0)


# --- the pattern rule on clear, hand-made cases -------------------------------------------------


def test_clear_daily_cycles_are_periodic_whatever_their_phase() -> None:
    rng = np.random.default_rng(1)
    rows = [_daily(0.3, 0.1, phase_s=p) + rng.normal(0, 0.01, N_SLOTS) for p in np.linspace(0, DAY_S, 7)]
    patterns = classify_patterns(np.array(rows), INTERVAL_S)
    assert list(patterns) == [Pattern.PERIODIC] * 7


def test_business_hours_square_wave_is_periodic() -> None:
    hour = (_t() % DAY_S) / 3600.0
    row = np.where((hour >= 9) & (hour < 17), 0.6, 0.2)
    assert classify_patterns(row[None, :], INTERVAL_S)[0] is Pattern.PERIODIC


def test_weekday_weekend_cycle_without_daily_cycle_is_periodic() -> None:
    day = (_t() // DAY_S) % 7
    row = np.where(day < 5, 0.5, 0.15) + np.random.default_rng(2).normal(0, 0.01, N_SLOTS)
    profile = frequency_profile(row[None, :], INTERVAL_S)
    assert profile.weekly_energy_frac[0] > profile.daily_energy_frac[0]
    assert profile.patterns()[0] is Pattern.PERIODIC


def test_flat_series_with_white_noise_is_constant_even_when_noisy() -> None:
    rng = np.random.default_rng(3)
    levels = [0.05, 0.2, 0.5, 0.8]
    rows = [np.full(N_SLOTS, lvl) + rng.normal(0, 0.04, N_SLOTS) for lvl in levels]
    profile = frequency_profile(np.array(rows), INTERVAL_S)
    # The white-noise floor explains nearly all of the variation.
    assert np.allclose(profile.noise_std_cpu, 0.04, rtol=0.05)
    assert np.all(profile.signal_std_cpu < 0.015)  # the floor is estimated, so not exactly 0
    assert list(profile.patterns()) == [Pattern.CONSTANT] * 4


def test_random_walks_and_regime_changes_are_unpredictable() -> None:
    rng = np.random.default_rng(4)
    rows = [_random_walk(rng, 0.3, 0.004) for _ in range(5)]
    steps = np.repeat(rng.uniform(0.05, 0.6, size=12), N_SLOTS // 12)
    rows.append(np.resize(steps, N_SLOTS))
    patterns = classify_patterns(np.array(rows), INTERVAL_S)
    assert list(patterns) == [Pattern.UNPREDICTABLE] * 6


def test_tiny_daily_ripple_on_a_flat_level_is_constant() -> None:
    row = _daily(0.4, 0.003) + np.random.default_rng(5).normal(0, 0.005, N_SLOTS)
    assert classify_patterns(row[None, :], INTERVAL_S)[0] is Pattern.CONSTANT


def test_one_day_trace_cannot_be_periodic() -> None:
    n = int(DAY_S / 300.0)
    row = _daily(0.3, 0.2, n_slots=n, interval_s=300.0)
    assert harmonic_windows(n, 300.0, PatternThresholds()) == []
    assert classify_patterns(row[None, :], 300.0)[0] is Pattern.UNPREDICTABLE


def test_all_missing_row_is_unpredictable_and_nan_is_filled_by_the_row_mean() -> None:
    rng = np.random.default_rng(6)
    cpu = np.vstack([np.full(N_SLOTS, np.nan), _daily(0.3, 0.1) + rng.normal(0, 0.01, N_SLOTS)])
    cpu[1, rng.random(N_SLOTS) < 0.2] = np.nan  # 20% scattered holes
    profile = frequency_profile(cpu, INTERVAL_S)
    assert profile.missing_frac[0] == 1.0
    assert profile.missing_frac[1] == pytest.approx(0.2, abs=0.01)
    assert profile.mean_cpu[1] == pytest.approx(np.nanmean(cpu[1]), abs=1e-6)
    assert list(profile.patterns()) == [Pattern.UNPREDICTABLE, Pattern.PERIODIC]


def test_std_from_the_spectrum_matches_numpy() -> None:
    rng = np.random.default_rng(7)
    cpu = np.vstack([_random_walk(rng, 0.4, 0.003), _daily(0.3, 0.1), np.full(N_SLOTS, 0.2)])
    profile = frequency_profile(cpu, INTERVAL_S)
    assert np.allclose(profile.std_cpu, cpu.std(axis=1), atol=1e-4)
    assert np.allclose(profile.mean_cpu, cpu.mean(axis=1), atol=1e-6)
    assert profile.cv[2] == pytest.approx(0.0, abs=1e-9)


def test_thresholds_are_parameters() -> None:
    row = _daily(0.3, 0.03) + np.random.default_rng(8).normal(0, 0.03, N_SLOTS)  # cycle std 0.021
    assert classify_patterns(row[None, :], INTERVAL_S)[0] is Pattern.PERIODIC
    strict = PatternThresholds(periodic_min_std_cpu=0.05)
    assert classify_patterns(row[None, :], INTERVAL_S, thresholds=strict)[0] is Pattern.CONSTANT
    neither = PatternThresholds(periodic_min_std_cpu=0.05, constant_max_std_cpu=0.01, constant_max_cv=0.01)
    assert classify_patterns(row[None, :], INTERVAL_S, thresholds=neither)[0] is Pattern.UNPREDICTABLE
    with pytest.raises(PolicyError, match="periodic_min_energy_frac"):
        classify_patterns(row[None, :], INTERVAL_S, thresholds=PatternThresholds(periodic_min_energy_frac=0))


def test_bad_input_shapes_are_rejected() -> None:
    with pytest.raises(PolicyError, match="2-D"):
        classify_patterns(np.zeros(10), INTERVAL_S)
    with pytest.raises(PolicyError, match="interval_s"):
        classify_patterns(np.zeros((2, 10)), 0.0)
    cpu = np.zeros((3, 10))
    cpu[2, 4] = np.inf
    with pytest.raises(PolicyError, match="row 2 holds an infinite value"):
        classify_patterns(cpu, 60.0)


def _nightly_spikes(rng: np.random.Generator, height: float, n_days: int = 28) -> np.ndarray:
    """A month of 5-minute slots: a low level with noise and, every night, a one-hour job at about
    02:00 (start jittered by up to 20 minutes, height jittered by 20%)."""
    per_day = int(DAY_S / 300.0)
    row = 0.05 + rng.normal(0.0, 0.01, n_days * per_day)
    for d in range(n_days):
        start = d * per_day + 24 + int(rng.integers(-4, 5))
        row[start : start + 12] += height * rng.uniform(0.8, 1.2)
    return np.clip(row, 0.0, 1.0)


def test_nightly_spikes_are_periodic() -> None:
    # A one-hour spike a day holds little of its energy in the first few daily harmonics (0.2-0.3 in
    # the first four), so a spectrum-only rule called it unpredictable; the autocorrelation at one
    # day (about 0.8 here) and the harmonics up to 24 per day find it.
    rng = np.random.default_rng(21)
    cpu = np.array([_nightly_spikes(rng, h) for h in (0.2, 0.4, 0.7)])
    assert list(classify_patterns(cpu, 300.0)) == [Pattern.PERIODIC] * 3
    assert np.all(frequency_profile(cpu, 300.0).acf[:, 0] > 0.5)
    few = PatternThresholds(daily_harmonics=4, weekly_harmonics=3)
    assert np.all(frequency_profile(cpu, 300.0, thresholds=few).daily_energy_frac < 0.5)


def test_random_walk_with_high_daily_autocorrelation_is_not_periodic() -> None:
    rng = np.random.default_rng(22)
    rows = np.array([_random_walk(rng, 0.3, 0.002, n_slots=8064) for _ in range(8)])
    profile = frequency_profile(rows, 300.0)
    assert np.sum(profile.acf[:, 0] > 0.5) >= 5  # a slow drift: the autocorrelation is high at every lag
    assert Pattern.PERIODIC not in set(profile.patterns())


def test_labels_do_not_depend_on_the_series_scale() -> None:
    series, _ = labelled_tenant_series(40, seed=23, noise=0.02, interval_s=300.0)
    rng = np.random.default_rng(23)
    spikes = np.array([_nightly_spikes(rng, 0.5, n_days=series.n_slots // 288)[: series.n_slots]])
    cpu = np.vstack([series.cpu, spikes])
    peak = np.nanmax(cpu, axis=1, keepdims=True)
    labels = [classify_patterns(cpu / peak * top, 300.0) for top in (0.25, 1.0)]
    assert len(set(labels[0])) == 3  # all three patterns are present
    assert list(labels[0]) == list(labels[1])


# --- accuracy on labelled synthetic tenants -----------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "noise", "missing_frac", "max_gap_slots", "interval_s"),
    [
        (11, 0.01, 0.0, 3, 120.0),  # clean-ish, 2-minute slots
        (12, 0.03, 0.05, 3, 120.0),  # noisy, short holes filled by interpolation
        (13, 0.02, 0.10, 40, 120.0),  # 10% missing in runs up to 80 minutes, left as NaN
        (14, 0.02, 0.05, 10, 300.0),  # 5-minute slots like the public traces
    ],
)
def test_pattern_accuracy_on_labelled_synthetic_tenants(
    seed: int, noise: float, missing_frac: float, max_gap_slots: int, interval_s: float
) -> None:
    series, truth = labelled_tenant_series(
        240,
        seed=seed,
        noise=noise,
        missing_frac=missing_frac,
        max_gap_slots=max_gap_slots,
        interval_s=interval_s,
    )
    if max_gap_slots > 3:
        assert np.isnan(series.cpu).any()  # the estimator really sees missing samples
    patterns = classify_patterns(series.cpu, series.interval_s)
    expected = np.array([truth[t] for t in series.tenants], dtype=object)
    accuracy = float(np.mean(patterns == expected))
    assert accuracy >= 0.95, f"accuracy {accuracy:.3f}"
    for pattern in Pattern:  # and no pattern is sacrificed for the others
        mask = expected == pattern
        assert mask.any()
        assert float(np.mean(patterns[mask] == pattern)) >= 0.9, pattern


def test_float32_input_gives_the_same_patterns() -> None:
    series, _ = labelled_tenant_series(60, seed=21, noise=0.02)
    p64 = classify_patterns(series.cpu, series.interval_s)
    p32 = classify_patterns(series.cpu.astype(np.float32), series.interval_s)
    assert list(p64) == list(p32)


# --- the estimator ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic() -> tuple[TenantSeries, dict[str, Pattern]]:
    return labelled_tenant_series(150, seed=31, noise=0.02, days=14, interval_s=300.0)


def _servers(series: TenantSeries) -> dict[str, int]:
    return {t: 1 + (i * 7) % 13 for i, t in enumerate(series.tenants)}


def test_fit_tags_classes_consistently(synthetic: tuple[TenantSeries, dict[str, Pattern]]) -> None:
    series, truth = synthetic
    servers = _servers(series)
    cores = {t: 16.0 * n for t, n in servers.items()}
    model = UtilizationClustering(random_state=0)
    assert model.fit(series, servers_per_tenant=servers, cores_per_tenant=cores) is model
    # Every tenant is in exactly one class, of its own pattern.
    members = [t for c in model.classes_ for t in c.tenants]
    assert sorted(members) == sorted(series.tenants)
    for c in model.classes_:
        assert all(model.tenant_class_[t] == c.id for t in c.tenants)
        assert all(model.patterns_[t] is c.pattern for t in c.tenants)
        assert 0.0 <= c.avg_cpu <= c.peak_cpu <= 1.0
        assert 0.0 <= c.current_cpu <= 1.0
        assert c.servers == sum(servers[t] for t in c.tenants)
        assert c.cores == pytest.approx(sum(cores[t] for t in c.tenants))
    # Ids are <pattern>-<k>, k = 0.. in ascending avg_cpu, patterns in a fixed order.
    seen_patterns = []
    for pattern in Pattern:
        ours = [c for c in model.classes_ if c.pattern is pattern]
        assert [c.id for c in ours] == [f"{pattern.value}-{k}" for k in range(len(ours))]
        assert [c.avg_cpu for c in ours] == sorted(c.avg_cpu for c in ours)
        if ours:
            seen_patterns.append(pattern)
    order = [c.pattern for c in model.classes_]
    assert order == sorted(order, key=[Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE].index)
    assert len(seen_patterns) == 3
    assert all(len(c.tenants) >= 1 for c in model.classes_)
    assert np.mean([model.patterns_[t] is truth[t] for t in series.tenants]) >= 0.95


def test_class_series_is_the_server_weighted_average(
    synthetic: tuple[TenantSeries, dict[str, Pattern]],
) -> None:
    series, _ = synthetic
    servers = _servers(series)
    model = UtilizationClustering().fit(series, servers_per_tenant=servers)
    index = {t: i for i, t in enumerate(series.tenants)}
    for c, row in zip(model.classes_, model.class_cpu_, strict=True):
        idx = [index[t] for t in c.tenants]
        w = np.array([servers[t] for t in c.tenants], dtype=float)
        expected = (w[:, None] * series.cpu[idx]).sum(axis=0) / w.sum()
        assert np.allclose(row, expected, atol=1e-5)
        assert c.avg_cpu == pytest.approx(float(expected.mean()), abs=1e-5)
        assert c.current_cpu == pytest.approx(float(expected[-1]), abs=1e-5)


def test_same_seed_gives_the_same_ids(synthetic: tuple[TenantSeries, dict[str, Pattern]]) -> None:
    series, _ = synthetic
    a = UtilizationClustering(random_state=5).fit(series)
    b = UtilizationClustering(random_state=5).fit(series)
    assert a.classes_ == b.classes_
    assert a.tenant_class_ == b.tenant_class_


def test_tolerance_rule_finds_well_separated_groups() -> None:
    rng = np.random.default_rng(41)
    levels = np.repeat([0.1, 0.4, 0.7], 10)
    cpu = levels[:, None] + rng.normal(0, 0.01, (30, 2000))
    series = TenantSeries(tuple(f"t{i:02d}" for i in range(30)), 0.0, 300.0, cpu)
    for rule in ("tolerance", "silhouette"):
        model = UtilizationClustering(k_rule=rule).fit(series)
        assert [c.id for c in model.classes_] == ["constant-0", "constant-1", "constant-2"], rule
        assert [len(c.tenants) for c in model.classes_] == [10, 10, 10]
        assert [round(c.avg_cpu, 1) for c in model.classes_] == [0.1, 0.4, 0.7]
    fixed = UtilizationClustering(k_rule="fixed", n_classes_per_pattern=2).fit(series)
    assert len(fixed.classes_) == 2
    capped = UtilizationClustering(max_classes_per_pattern=1).fit(series)
    assert len(capped.classes_) == 1 and len(capped.classes_[0].tenants) == 30
    assert capped.k_scores_ == {"constant": {}}


def test_single_tenant_and_identical_tenants() -> None:
    cpu = np.full((3, 1000), 0.25)
    model = UtilizationClustering().fit(TenantSeries(("a", "b", "c"), 0.0, 300.0, cpu))
    assert [(c.id, c.tenants) for c in model.classes_] == [("constant-0", ("a", "b", "c"))]
    one = UtilizationClustering().fit(TenantSeries(("solo",), 0.0, 300.0, cpu[:1]))
    assert one.tenant_class_ == {"solo": "constant-0"}


def test_class_table_round_trips_through_json(synthetic: tuple[TenantSeries, dict[str, Pattern]]) -> None:
    series, _ = synthetic
    model = UtilizationClustering().fit(series)
    table = model.class_table()
    doc = table.to_json()
    assert "grid" not in doc
    back = ClassTable.from_json(doc)
    assert back.classes == table.classes
    assert dict(back.tenant_class) == model.tenant_class_
    assert dict(back.tenant_pattern) == model.patterns_


def test_estimator_follows_scikit_learn_conventions() -> None:
    model = UtilizationClustering(max_classes_per_pattern=3, random_state=7)
    params = model.get_params()
    assert params["max_classes_per_pattern"] == 3 and params["random_state"] == 7
    assert clone(model).get_params() == params
    with pytest.raises(TypeError):
        UtilizationClustering(3)  # type: ignore[misc]  # keyword-only
    with pytest.raises(PolicyError, match="fit"):
        model.class_table()
    assert isinstance(frequency_profile(np.zeros((1, 10)), 60.0), FrequencyProfile)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_classes_per_pattern": 0}, "max_classes_per_pattern"),
        ({"k_rule": "elbow"}, "k_rule"),
        ({"peak_percentile": 0.0}, "peak_percentile"),
        ({"class_tolerance_cpu": -1.0}, "class_tolerance_cpu"),
        ({"constant_max_cv": -0.1}, "constant_max_cv"),
    ],
)
def test_bad_parameters_fail_in_fit(params: dict[str, object], message: str) -> None:
    model = UtilizationClustering(**params)  # type: ignore[arg-type]  # stored as given
    series = TenantSeries(("a",), 0.0, 300.0, np.full((1, 100), 0.2))
    with pytest.raises(PolicyError, match=message):
        model.fit(series)


def test_bad_inputs_fail_in_fit() -> None:
    cpu = np.full((2, 100), 0.2)
    with pytest.raises(PolicyError, match="duplicate"):
        UtilizationClustering().fit(TenantSeries(("a", "a"), 0.0, 300.0, cpu))
    with pytest.raises(PolicyError, match="one row per tenant"):
        UtilizationClustering().fit(TenantSeries(("a",), 0.0, 300.0, cpu))
    with pytest.raises(PolicyError, match="servers_per_tenant has no entry.*'b'"):
        UtilizationClustering().fit(TenantSeries(("a", "b"), 0.0, 300.0, cpu), servers_per_tenant={"a": 3})
    with pytest.raises(PolicyError, match=r"cores_per_tenant\['a'\]"):
        UtilizationClustering().fit(
            TenantSeries(("a", "b"), 0.0, 300.0, cpu), cores_per_tenant={"a": -1.0, "b": 2.0}
        )


def test_weekly_harmonics_need_three_weeks() -> None:
    two_weeks = harmonic_windows(int(14 * DAY_S / 300.0), 300.0, PatternThresholds())
    month = harmonic_windows(N_SLOTS, INTERVAL_S, PatternThresholds())
    assert {w.kind for w in two_weeks} == {"daily"}
    assert [w.kind for w in month].count("weekly") == PatternThresholds().weekly_harmonics == 6
    assert [w.kind for w in month].count("daily") == PatternThresholds().daily_harmonics == 24
    claimed = np.concatenate([w.bins for w in month])
    assert len(claimed) == len(set(claimed.tolist()))  # a bin belongs to one harmonic at most
    for w in month:
        assert not set(w.background.tolist()) & set(claimed.tolist())


def test_periodic_tenants_with_opposite_peak_hours_get_different_classes() -> None:
    rng = np.random.default_rng(51)
    day_peakers = [_daily(0.3, 0.12, phase_s=0.0) + rng.normal(0, 0.01, N_SLOTS) for _ in range(6)]
    night_peakers = [_daily(0.3, 0.12, phase_s=DAY_S / 2) + rng.normal(0, 0.01, N_SLOTS) for _ in range(6)]
    names = tuple(f"day{i}" for i in range(6)) + tuple(f"night{i}" for i in range(6))
    series = TenantSeries(names, 0.0, INTERVAL_S, np.array(day_peakers + night_peakers))
    model = UtilizationClustering().fit(series)
    assert set(model.patterns_.values()) == {Pattern.PERIODIC}
    day_classes = {model.tenant_class_[t] for t in names[:6]}
    night_classes = {model.tenant_class_[t] for t in names[6:]}
    assert len(day_classes) == 1 and len(night_classes) == 1 and day_classes != night_classes


def test_peak_is_never_below_the_average() -> None:
    rows = np.full((4, 4000), 0.1)
    rows[:, ::150] = 1.0  # 0.67% of the slots at full load: the 99th percentile is 0.1, the mean higher
    series = TenantSeries(tuple("abcd"), 0.0, 300.0, rows)
    model = UtilizationClustering().fit(series)
    for t in series.tenants:
        assert model.tenant_peak_cpu_[t] >= model.tenant_avg_cpu_[t] > 0.1
    assert all(c.peak_cpu >= c.avg_cpu for c in model.classes_)


def test_saturated_class_tags_stay_within_unit_interval():
    # Tenants pinned at 100% CPU with these server counts make the float32 weighted class series sum to
    # 1.0000001 (found by search); the tags are fractions of the cores and must stay within [0, 1].
    servers = [75, 256, 449, 464, 134, 33, 247, 420, 312, 34, 325, 172, 113, 215, 436, 483, 71, 281, 380, 130, 137, 121, 105]
    tenants = tuple(f"t{i}" for i in range(len(servers)))
    series = TenantSeries(tenants, 0.0, 120.0, np.ones((len(servers), 720)))
    model = UtilizationClustering(random_state=0).fit(series, servers_per_tenant=dict(zip(tenants, servers, strict=True)))
    for cls in model.classes_:
        assert 0.0 <= cls.avg_cpu <= cls.peak_cpu <= 1.0
        assert 0.0 <= cls.current_cpu <= 1.0


def test_grid_peak_raises_only_unpredictable_tenants() -> None:
    """A bursty tenant whose p99 looks low ranks higher in the placement grid; others keep their p99."""
    rng = np.random.default_rng(7)
    quiet = 0.15 + rng.normal(0.0, 0.004, N_SLOTS)
    daily = _daily(0.4, 0.15) + rng.normal(0.0, 0.005, N_SLOTS)
    bursty = 0.1 + 0.0 * _t()
    for start in rng.choice(N_SLOTS - 200, 6, replace=False):  # six bursts, under 1% of the slots
        bursty[start : start + 30] = 0.9
    bursty = bursty + rng.normal(0.0, 0.03, N_SLOTS)
    series = TenantSeries(("quiet", "daily", "bursty"), 0.0, INTERVAL_S, np.clip(np.array([quiet, daily, bursty]), 0, 1))
    assert UtilizationClustering(random_state=0).fit(series).tenant_grid_peak_cpu_["bursty"] < 0.3  # off by default
    model = UtilizationClustering(random_state=0, unpredictable_peak_sigmas=4.0).fit(series)
    assert model.patterns_ == {"quiet": Pattern.CONSTANT, "daily": Pattern.PERIODIC, "bursty": Pattern.UNPREDICTABLE}
    for t in ("quiet", "daily"):
        assert model.tenant_grid_peak_cpu_[t] == model.tenant_peak_cpu_[t]
    assert model.tenant_peak_cpu_["bursty"] < 0.3  # the percentile misses the bursts...
    x = series.cpu[2]
    grid_peak = model.tenant_grid_peak_cpu_["bursty"]
    assert grid_peak == pytest.approx(x.mean() + 4.0 * x.std(), abs=0.02)  # ...mean + 4 std does not
    assert grid_peak > 1.5 * model.tenant_peak_cpu_["bursty"]
    plain = UtilizationClustering(random_state=0, unpredictable_peak_sigmas=0.0).fit(series)
    assert plain.tenant_grid_peak_cpu_ == plain.tenant_peak_cpu_
    with pytest.raises(PolicyError, match="unpredictable_peak_sigmas"):
        UtilizationClustering(unpredictable_peak_sigmas=-1.0).fit(series)
