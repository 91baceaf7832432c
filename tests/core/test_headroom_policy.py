"""The headroom forecast's shared policy (``core/headroom_policy.py``): growth, safe cores, the agent's
advertised cores, the safe-first choice, and the tenant forecast's JSON form."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.headroom_policy import (
    ForecastFormatError,
    TenantForecast,
    advertised_cores,
    choose_safe_first,
    growth_cores,
    safe_cores,
)


@pytest.mark.parametrize(("peak", "cores", "primary", "growth"), [
    (0.5, 12, 2, 4),      # ceil(6) - 2
    (0.5, 12, 8, 0),      # already above the forecast peak
    (0.51, 12, 2, 5),     # ceil(6.12) - 2
    (0.5 + 1e-9, 12, 2, 4),  # a hair above a whole core is that core
    (0.0, 12, 0, 0),
    (1.0, 16, 0, 16),
])
def test_growth_is_the_forecast_peak_in_whole_cores_above_the_primary(peak: float, cores: int, primary: int,
                                                                      growth: int) -> None:
    assert int(growth_cores(peak, cores, primary)) == growth


def test_safe_cores_are_the_free_cores_beyond_the_growth() -> None:
    assert safe_cores(np.array([4, 4, 1, 0]), np.array([1, 6, 0, 3])).tolist() == [3, 0, 1, 0]


@pytest.mark.parametrize(("harvestable", "allocated", "growth", "advertised"), [
    (8, 0, 0, 8),   # no forecast growth: everything harvestable
    (8, 0, 3, 5),   # capacity - reserve - primary - growth
    (8, 2, 3, 5),   # running containers keep their cores; the free ones lose the growth
    (8, 6, 3, 6),   # the growth exceeds the free cores: only what runs, never a preemption
    (8, 8, 5, 8),
    (3, 6, 2, 3),   # a spike ate into the harvestable: the forecast adds nothing to take back
    (0, 0, 4, 0),
    (8, 0, 20, 0),
])
def test_the_agent_advertises_what_runs_plus_the_safe_cores(harvestable: int, allocated: int, growth: int,
                                                            advertised: int) -> None:
    assert advertised_cores(harvestable, allocated, growth) == advertised


def test_advertised_cores_against_the_simulators_safe_cores() -> None:
    """The agent's single node and the simulator's arrays agree: advertised = running + safe."""
    rng = np.random.default_rng(3)
    harvestable = rng.integers(0, 20, 500)
    allocated = rng.integers(0, 20, 500)
    growth = rng.integers(0, 10, 500)
    free = np.maximum(0, harvestable - allocated)
    expected = np.minimum(harvestable, allocated) + safe_cores(free, growth)
    got = [advertised_cores(int(h), int(a), int(g)) for h, a, g in zip(harvestable, allocated, growth, strict=True)]
    assert got == expected.tolist()
    assert all(g <= h for g, h in zip(got, harvestable, strict=True))


def test_forecast_choice_takes_safe_cores_first_preferred_servers_first() -> None:
    rng = np.random.default_rng(1)
    free = np.array([4, 4, 4, 4])
    safe = np.array([2, 0, 3, 1])  # server 1's free cores are all expected to go back to its primary
    f, sf = free.copy(), safe.copy()
    got = choose_safe_first(f, sf, np.array([0, 1]), 2, True, rng)
    assert sorted(got.tolist()) == [0, 0]  # the preferred servers' safe cores (only server 0 has some)
    got = choose_safe_first(f, sf, np.array([0, 1]), 4, True, rng)
    counts = np.bincount(got, minlength=4)
    assert counts[1] == 0 and counts[2] + counts[3] == 4  # then safe cores anywhere
    got = choose_safe_first(f, sf, None, 10, True, rng)
    assert got.shape == (10,)  # then any free core (spill)
    assert np.all(f >= 0) and np.all(sf >= 0) and f.sum() == 16 - 16 and sf.sum() == 0
    # without spill, never more than the safe cores
    f, sf = free.copy(), safe.copy()
    got = choose_safe_first(f, sf, None, 10, False, rng)
    assert np.all(np.bincount(got, minlength=4) == safe)


def test_a_tenant_forecast_round_trips_and_gives_the_hours_growth() -> None:
    hourly = tuple(0.1 if h < 12 else 0.75 for h in range(24))
    fc = TenantForecast("web", hourly, 3600.0, 0.9)
    back = TenantForecast.from_json(fc.to_json())
    assert back == fc
    assert back.growth_cores(16, 2, 11 * 3600.0 + 59) == 0   # ceil(1.6) = 2 cores at 11:59
    assert back.growth_cores(16, 2, 12 * 3600.0) == 10       # ceil(12) - 2 at 12:00
    assert back.growth_cores(16, 2, 12 * 3600.0 + 86400 * 3) == 10


@pytest.mark.parametrize(("doc", "names"), [
    ("{", "not JSON"),
    ("[]", "JSON object"),
    ('{"hourly_peak_frac": []}', "'tenant'"),
    ('{"tenant": "a", "hourly_peak_frac": [0.1]}', "list of 24"),
    ('{"tenant": "a", "hourly_peak_frac": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, '
     '0, 0, 0, 0, 0, 1.5]}', "[23]"),
    ('{"tenant": "a", "hourly_peak_frac": [NaN, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}',
     "[0]"),
    ('{"tenant": "a", "hourly_peak_frac": [' + ", ".join(["0"] * 24) + '], "horizon_s": -1}', "'horizon_s'"),
])
def test_a_bad_tenant_forecast_is_refused_naming_the_field(doc: str, names: str) -> None:
    with pytest.raises(ForecastFormatError, match=f"^f.json: .*{names.replace('[', '.').replace(']', '.')}"):
        TenantForecast.from_json(doc, "f.json")
