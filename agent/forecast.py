"""The headroom forecast on a node: this primary tenant's hourly forecast peaks, read from
``forecast_file`` (``core/headroom_policy.TenantForecast``, written on the server side from the
history), turned into the cores the primary is forecast to take back within the hour.

Per tick (``core/headroom_policy.growth_cores``, the simulator's YARN-H-forecast's formula)::

    growth = max(0, ceil(hourly_peak_frac[hour(now)] * capacity_cores) - primary_cores)

``decide`` then advertises ``capacity - reserve - primary - growth`` (never below what running
containers hold), so YARN hands out the risky cores last: not until the forecast hour has passed.

The file is read again whenever its modification time or size changes. A missing, unreadable or
malformed file, or one for another tenant, means no forecast (growth 0, the paper's YARN-H
advertising): logged (throttled), counted as ``errors_total{kind="forecast"}`` and named in
``/explain``; the last good forecast is dropped, since it may belong to a tenant the node left.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

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
