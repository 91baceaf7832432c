"""Headroom forecast (core/forecast.py): per tenant and UTC hour, a quantile of the next hour's peak."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.forecast import fit_headroom_forecast, hour_of_day
from placement_service.core.types import PolicyError, TenantSeries

DAY_S = 86400.0
STEP_S = 300.0


def _series(rows: list[np.ndarray], start_s: float = 0.0) -> TenantSeries:
    return TenantSeries(tuple(f"t{i}" for i in range(len(rows))), start_s, STEP_S, np.array(rows, dtype=np.float64))


def _daily_peak(days: int, peak_hour: int, low: float = 0.2, high: float = 0.8) -> np.ndarray:
    """``low`` all day except ``high`` during UTC hour ``peak_hour``."""
    t = np.arange(int(days * DAY_S / STEP_S)) * STEP_S
    return np.where((t // 3600) % 24 == peak_hour, high, low)


def test_periodic_peak_is_announced_an_hour_ahead_and_constant_stays_flat() -> None:
    rng = np.random.default_rng(0)
    flat = 0.35 + rng.normal(0.0, 0.002, int(7 * DAY_S / STEP_S))
    fc = fit_headroom_forecast(_series([_daily_peak(7, 14), flat]), horizon_s=3600.0, quantile=0.9)
    periodic, constant = fc.hourly
    # From any moment of hour 13 the next hour reaches into hour 14's peak; hour 14 itself too.
    assert periodic[13] == pytest.approx(0.8) and periodic[14] == pytest.approx(0.8)
    # Far from the peak nothing is expected beyond the low level.
    assert periodic[2] == pytest.approx(0.2) and periodic[20] == pytest.approx(0.2)
    assert np.all(np.abs(constant - 0.35) < 0.02)


def test_quantile_ignores_a_one_off_spike_but_not_a_recurring_one() -> None:
    base = np.full(int(10 * DAY_S / STEP_S), 0.3)
    once = base.copy()
    once[int(2 * DAY_S / STEP_S) + 10 * 12] = 0.95  # day 2, 10:00, one slot
    fc = fit_headroom_forecast(_series([once, _daily_peak(10, 10, 0.3, 0.95)]), quantile=0.9)
    assert fc.hourly[0, 10] == pytest.approx(0.3)  # one day in ten: below the 0.9 quantile
    assert fc.hourly[1, 10] == pytest.approx(0.95)  # every day
    assert fit_headroom_forecast(_series([once]), quantile=1.0).hourly[0, 10] == pytest.approx(0.95)


def test_growth_cores_counts_whole_cores_above_the_current_primary() -> None:
    fc = fit_headroom_forecast(_series([_daily_peak(3, 5, 0.25, 0.75)]), horizon_s=3600.0)
    cores = np.array([16, 16, 8])
    tenant = np.zeros(3, dtype=np.int64)
    at_4h = 4 * 3600.0 + 60.0
    got = fc.growth_cores(tenant, cores, np.array([4, 12, 2]), at_4h)
    assert got.tolist() == [8, 0, 4]  # ceil(0.75 * 16) = 12; ceil(0.75 * 8) = 6
    assert fc.growth_cores(tenant, cores, np.array([4, 4, 2]), 20 * 3600.0).tolist() == [0, 0, 0]


def test_hours_follow_the_series_start_time() -> None:
    # The series starts at 06:00 UTC: its slot 0 belongs to hour 6, not 0.
    fc = fit_headroom_forecast(_series([_daily_peak(4, 3)], start_s=6 * 3600.0), horizon_s=STEP_S)
    assert int(np.argmax(fc.hourly[0])) == 9  # the generator's hour 3 is 03:00 after 06:00 = 09:00 UTC
    assert hour_of_day(9 * 3600.0 + 5.0 + 3 * DAY_S) == 9


def test_gaps_fall_back_and_an_unknown_tenant_is_all_risk() -> None:
    row = np.full(int(2 * DAY_S / STEP_S), 0.4)
    row[(np.arange(row.shape[0]) * STEP_S // 3600) % 24 == 7] = np.nan  # hour 7 never observed
    empty = np.full(row.shape[0], np.nan)
    fc = fit_headroom_forecast(_series([row, empty]))
    assert np.all(np.isfinite(fc.hourly))
    assert fc.hourly[0, 7] == pytest.approx(0.4)  # the tenant's overall forward peak
    assert np.all(fc.hourly[1] == 1.0)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"horizon_s": 0.0}, "horizon_s"),
    ({"horizon_s": float("nan")}, "horizon_s"),
    ({"quantile": 0.0}, "quantile"),
    ({"quantile": 1.5}, "quantile"),
])
def test_bad_parameters_are_named(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(PolicyError, match=needle):
        fit_headroom_forecast(_series([np.full(10, 0.2)]), **kwargs)
