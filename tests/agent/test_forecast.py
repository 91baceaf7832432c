"""The agent's forecast source (``agent/forecast.py``): the file read when it changes, its errors."""

from __future__ import annotations

import os
from pathlib import Path

from agent.forecast import ForecastSource
from placement_service.core.headroom_policy import TenantForecast

NOON = 12 * 3600.0 + 86400.0 * 100


def _write(path: Path, tenant: str, peak: float, stamp: float) -> None:
    path.write_text(TenantForecast(tenant, tuple([peak] * 24)).to_json())
    os.utime(path, (stamp, stamp))


def test_growth_follows_the_file_and_its_changes(tmp_path: Path) -> None:
    f = tmp_path / "forecast.json"
    _write(f, "web", 0.75, 1_000.0)
    src = ForecastSource(str(f), "web")
    used = src.use(8.0, 2, NOON)
    assert (used.growth_cores, used.peak_frac, used.error) == (4, 0.75, "")  # ceil(6) - 2
    _write(f, "web", 0.25, 2_000.0)
    assert src.use(8.0, 1, NOON).growth_cores == 1
    assert src.explain()["tenant"] == "web" and src.explain()["growth_cores"] == 1


def test_no_usable_forecast_means_no_growth_and_says_why(tmp_path: Path) -> None:
    f = tmp_path / "forecast.json"
    src = ForecastSource(str(f), "web")
    used = src.use(8.0, 0, NOON)
    assert used.growth_cores == 0 and "forecast.json" in used.error
    _write(f, "db", 0.9, 1_000.0)
    used = src.use(8.0, 0, NOON)
    assert used.growth_cores == 0 and "is for tenant 'db', this node's tenant is 'web'" in used.error
    f.write_text('{"tenant": "web", "hourly_peak_frac": [2]}')
    os.utime(f, (3_000.0, 3_000.0))
    used = src.use(8.0, 0, NOON)
    assert used.growth_cores == 0 and "'hourly_peak_frac'" in used.error
    _write(f, "web", 0.5, 4_000.0)  # a good file again is picked up
    assert src.use(8.0, 0, NOON).growth_cores == 4
