"""Headroom forecast: how far each primary tenant is likely to climb in the next hour, from its history.

Class selection (``selection.py``) decides *which classes* a job should use; it does not say which
servers inside them are about to lose cores. A container placed on a server's last free core is
killed as soon as that server's primary grows by one core, so the cheapest kill to avoid is the one
the primary's own history announces: a periodic service about to reach its daily peak, or a tenant
whose load at this hour often jumps.

For every tenant ``i`` and hour of day ``h`` (UTC), the forecast is the ``quantile`` (default 0.9),
over the history, of the tenant's **peak CPU over the following** ``horizon_s`` (default one hour)
measured from every history slot that starts in hour ``h``::

    forward_peak[i, j] = max(cpu[i, j : j + horizon_slots])
    hourly[i, h]       = quantile_q(forward_peak[i, j] for slots j in hour h)

The expected growth of a server of tenant ``i`` at time ``t`` is then
``max(0, ceil(hourly[i, hour(t)] * cores) - primary_cores_now)``; a scheduler treats a server's cores
beyond ``capacity - growth`` as *risky* and uses them last. That policy, and the fitted
``HeadroomForecast``, live in ``core/headroom_policy.py`` (numpy only), which the simulator's
``YARN-H-forecast`` and the node agent both call.

- Constant tenants get a forecast at their level (no growth expected), periodic ones their coming
  daily peak, unpredictable ones a high quantile of their jumps (conservative, as they should be).
- Slots inside long gaps (NaN) are ignored; an hour of day with no observation falls back to the
  tenant's overall forward peak quantile, and a tenant with no observation at all to 1.0 (nothing is
  known, so every core is risky).

Pure numpy (plus ``scipy.ndimage`` for the sliding maximum); deterministic.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.ndimage import maximum_filter1d

from placement_service.core.headroom_policy import HOURS, HeadroomForecast, hour_of_day
from placement_service.core.types import PolicyError, TenantSeries

__all__ = ["HOURS", "HeadroomForecast", "fit_headroom_forecast", "hour_of_day"]


def fit_headroom_forecast(
    series: TenantSeries, *, horizon_s: float = 3600.0, quantile: float = 0.9
) -> HeadroomForecast:
    """Fit the per-tenant, per-hour forecast on ``series`` (the history the service has seen)."""
    if not (math.isfinite(horizon_s) and horizon_s > 0):
        raise PolicyError(f"headroom forecast: horizon_s must be a finite number > 0, got {horizon_s}")
    if not 0.0 < quantile <= 1.0:
        raise PolicyError(f"headroom forecast: quantile must be in (0, 1], got {quantile}")
    cpu = np.asarray(series.cpu, dtype=np.float64)
    n_tenants, n_slots = cpu.shape
    if n_slots == 0:
        raise PolicyError("headroom forecast: the series has no slots")
    width = max(1, int(round(horizon_s / series.interval_s)))
    missing = np.isnan(cpu)
    # Forward sliding max over [j, j + width): NaN slots count as -inf so they never win.
    filled = np.where(missing, -np.inf, cpu)
    # origin -(width // 2) puts the window at [j, j + width) (past the end: the last value repeats).
    forward = maximum_filter1d(filled, size=width, axis=1, origin=-(width // 2), mode="nearest")
    forward = np.where(np.isfinite(forward) & ~missing, forward, np.nan)
    hours = np.floor((series.start_s + np.arange(n_slots) * series.interval_s) / 3600.0).astype(np.int64) % HOURS
    overall = _nanquantile_rows(forward, quantile)
    hourly = np.empty((n_tenants, HOURS), dtype=np.float64)
    for h in range(HOURS):
        cols = np.flatnonzero(hours == h)
        hourly[:, h] = _nanquantile_rows(forward[:, cols], quantile) if cols.size else np.nan
    hourly = np.where(np.isnan(hourly), overall[:, None], hourly)
    hourly = np.clip(np.nan_to_num(hourly, nan=1.0), 0.0, 1.0)
    return HeadroomForecast(tuple(series.tenants), hourly, float(horizon_s), float(quantile))


def _nanquantile_rows(x: np.ndarray, q: float) -> np.ndarray:
    """Row-wise ``nanquantile`` that returns NaN (without a warning) for rows with no value."""
    out = np.full(x.shape[0], np.nan)
    has = ~np.isnan(x).all(axis=1) if x.shape[1] else np.zeros(x.shape[0], dtype=bool)
    if has.any():
        out[has] = np.nanquantile(x[has], q, axis=1)
    return out
