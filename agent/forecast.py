"""The headroom forecast on a node: this primary tenant's hourly forecast peaks, read from
``forecast_file`` (``core/headroom_policy.TenantForecast``, written on the server side from the
history), turned into the cores the primary is forecast to take back within the hour.

Per tick (``core/headroom_policy.growth_cores``, the simulator's YARN-H-forecast's formula)::

    growth = max(0, ceil(hourly_peak_frac[hour(now)] * capacity_cores) - primary_cores)

``decide`` then advertises ``capacity - reserve - primary - growth`` (never below what running
containers hold), so YARN hands out the risky cores last: not until the forecast hour has passed.

With ``forecast_from_service`` a :class:`ForecastFetcher` thread keeps the file fresh: every
``forecast_refresh_s`` (an hour) it asks the placement service (``GET
{service_http}/v1/tenants/<tenant>/forecast``, fitted at every re-clustering from the tenant's
history) and writes the answer atomically; a failed fetch keeps the last file and is retried after a
minute.

The file is read again whenever its modification time or size changes. A missing, unreadable or
malformed file, or one for another tenant, means no forecast (growth 0, the paper's YARN-H
advertising): logged (throttled), counted as ``errors_total{kind="forecast"}`` and named in
``/explain``; the last good forecast is dropped, since it may belong to a tenant the node left.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from placement_service.atomic import atomic_write_text
from placement_service.core.headroom_policy import ForecastFormatError, TenantForecast

logger = logging.getLogger(__name__)

_MAX_BYTES = 64 * 1024  # 24 numbers and a name: anything larger is not a forecast


@dataclass(frozen=True)
class ForecastUse:
    """What the forecast said at one tick (for ``decide`` and ``/explain``)."""

    growth_cores: int
    peak_frac: float | None
    error: str


class ForecastSource:
    def __init__(self, path: str, tenant: str) -> None:
        self.path = path
        self.tenant = tenant
        self._stamp: tuple[float, int] | None = None
        self._forecast: TenantForecast | None = None
        self.error = ""
        self.last: ForecastUse = ForecastUse(0, None, "not read yet")

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._stamp, self._forecast = None, None
            self.error = f"forecast_file {self.path}: {exc.strerror or exc}"
            return
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp, self._forecast = stamp, None
        try:
            if st.st_size > _MAX_BYTES:
                raise ForecastFormatError(f"forecast_file {self.path}: {st.st_size} bytes, more than {_MAX_BYTES}")
            with open(self.path, encoding="utf-8") as handle:
                forecast = TenantForecast.from_json(handle.read(), f"forecast_file {self.path}")
        except (OSError, UnicodeDecodeError) as exc:
            self.error = f"forecast_file {self.path}: {exc}"
            return
        except ForecastFormatError as exc:
            self.error = str(exc)
            return
        if self.tenant and forecast.tenant != self.tenant:
            self.error = (f"forecast_file {self.path} is for tenant {forecast.tenant!r}, this node's tenant is "
                          f"{self.tenant!r}")
            return
        self._forecast, self.error = forecast, ""
        logger.info("headroom forecast for tenant %s read from %s", forecast.tenant, self.path)

    def use(self, capacity_cores: float, primary_cores: int, now_s: float) -> ForecastUse:
        """The growth to hold back now (0 without a usable forecast; ``error`` says why)."""
        self._refresh()
        if self._forecast is None:
            self.last = ForecastUse(0, None, self.error)
        else:
            self.last = ForecastUse(self._forecast.growth_cores(capacity_cores, primary_cores, now_s),
                                    self._forecast.peak_frac_at(now_s), "")
        return self.last

    def explain(self) -> dict[str, Any]:
        return {"file": self.path, "tenant": self._forecast.tenant if self._forecast else None,
                "peak_frac_this_hour": self.last.peak_frac, "growth_cores": self.last.growth_cores,
                "error": self.last.error,
                "formula": "advertised cores = capacity - reserve - primary - growth (never below what "
                           "running containers hold); growth = max(0, ceil(peak_frac * capacity) - primary)"}


class ForecastFetcher:
    """Fetches the tenant's forecast from the placement service into ``path`` (see the module docstring)."""

    RETRY_S = 60.0

    def __init__(self, service_http: str, tenant: str, path: str, token_file: str | None, *,
                 refresh_s: float = 3600.0, timeout_s: float = 5.0) -> None:
        self.url = f"{service_http.rstrip('/')}/v1/tenants/{urllib.parse.quote(tenant, safe='')}/forecast"
        self.tenant, self.path, self.token_file = tenant, path, token_file
        self.refresh_s, self.timeout_s = refresh_s, timeout_s
        self.last_error = ""
        self.fetched = 0
        self.last_round_s: float | None = None  # monotonic time of the last finished round
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="forecast-fetcher", daemon=True)

    def fetch_once(self) -> None:
        """One fetch; raises on failure (``last_error`` says what), writes the file on success."""
        req = urllib.request.Request(self.url, method="GET")
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as f:
                req.add_header("Authorization", f"Bearer {f.read().strip()}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                text = resp.read(_MAX_BYTES + 1).decode("utf-8")
        except urllib.error.HTTPError as exc:
            self.last_error = f"{self.url}: HTTP {exc.code}: {exc.read(300)!r}"
            raise
        except (OSError, UnicodeDecodeError) as exc:
            self.last_error = f"{self.url}: {exc}"
            raise
        try:
            if len(text) > _MAX_BYTES:
                raise ForecastFormatError(f"{self.url}: answer longer than {_MAX_BYTES} bytes")
            forecast = TenantForecast.from_json(text, self.url)
            if forecast.tenant != self.tenant:
                raise ForecastFormatError(f"{self.url}: answered tenant {forecast.tenant!r}")
        except ForecastFormatError as exc:
            self.last_error = str(exc)
            raise
        atomic_write_text(self.path, forecast.to_json())
        self.fetched += 1
        self.last_error = ""
        self.last_round_s = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait_s = self.refresh_s
            try:
                self.fetch_once()
            except Exception as exc:  # the last file stays in use; retried soon
                self.last_error = self.last_error or f"{self.url}: {exc}"
                logger.warning("headroom forecast not fetched (the last one stays in use; retried in %.0f s): %s",
                               min(self.RETRY_S, self.refresh_s), self.last_error)
                wait_s = min(self.RETRY_S, self.refresh_s)
            self._stop.wait(wait_s)

    def start(self) -> ForecastFetcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + 1.0)
