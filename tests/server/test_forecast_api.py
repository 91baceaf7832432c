"""The headroom forecast from the service to the node agent: every re-clustering fits it on the
tenants' history (``core.forecast``), ``GET /v1/tenants/<tenant>/forecast`` serves one tenant's, and
the agent's fetcher writes it where the agent reads it (``agent/forecast.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.forecast import ForecastFetcher, ForecastSource
from tests.server.conftest import TOKEN, start_server
from tests.server.test_cobusy_service import CORES, ingest_history, recluster, static_files, tenant_of  # noqa: F401

BUSY_HOUR_S = 2 * 3600.0 + 86400.0 * 20_000  # 02:00 UTC: every tenant's busy hours (00-06) on some days
QUIET_HOUR_S = 14 * 3600.0 + 86400.0 * 20_000


def test_the_service_serves_each_tenants_forecast_and_the_agent_fetches_it(
    tmp_path: Path, static_files: tuple[Path, Path]  # noqa: F811
) -> None:
    inv, reimages = static_files
    server = start_server(tmp_path / "data", "--inventory-file", str(inv), "--reimages-file", str(reimages),
                          "--recluster-interval-s", "0", "--recluster-priority", "normal")
    try:
        tenant = tenant_of(1, 2)
        status, doc = server.call("GET", f"/v1/tenants/{tenant}/forecast")
        assert status == 404 and "no headroom forecast" in doc["error"]["message"], doc  # no class table yet
        ingest_history(server, time.time())
        version = recluster(server)["class_table_version"]
        status, doc = server.call("GET", f"/v1/tenants/{tenant}/forecast")
        assert status == 200 and doc["tenant"] == tenant and doc["class_table_version"] == version, doc
        hourly = doc["hourly_peak_frac"]
        # busy (0.85 + 0.03 * 2) from 00:00 to 06:00 on one day in three, 0.2-0.22 otherwise
        assert all(h >= 0.9 for h in hourly[:5]) and all(0.2 <= h <= 0.23 for h in hourly[8:22]), hourly
        assert server.call("GET", "/v1/tenants/nobody/forecast")[0] == 404
        assert server.call("GET", "/v1/tenants/bad%20name/forecast")[0] == 400

        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        path = tmp_path / "agent-state" / "forecast.json"
        path.parent.mkdir()
        fetcher = ForecastFetcher(server.http, tenant, str(path), str(token))
        fetcher.fetch_once()
        assert fetcher.fetched == 1 and fetcher.last_error == ""
        source = ForecastSource(str(path), tenant)
        assert source.use(CORES, 2, BUSY_HOUR_S).growth_cores == 6  # ceil(0.91 * 8) = 8 cores, 2 in use
        assert source.use(CORES, 2, QUIET_HOUR_S).growth_cores == 0  # ceil(0.22 * 8) = 2
        bad = ForecastFetcher(server.http, "nobody", str(tmp_path / "other.json"), str(token))
        with pytest.raises(OSError):
            bad.fetch_once()
        assert "HTTP 404" in bad.last_error and not (tmp_path / "other.json").exists()
    finally:
        server.stop()
