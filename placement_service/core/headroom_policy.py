"""The headroom forecast's policy: which cores are *safe* to hand out, shared by the simulator's
YARN-H-forecast (``sim/schedule.py``) and the node agent (``agent/decide.py``).

Numpy only (no scipy): the node installs the agent alone, and the agent imports this module. The
forecast itself is fitted from a history on the server side (``core/forecast.fit_headroom_forecast``);
what reaches a node is one tenant's 24 hourly peaks (:class:`TenantForecast`, a small JSON file).

Per server, in whole cores, at time ``t`` (``peak`` = the forecast peak CPU fraction of the server's
primary tenant over the next horizon, for the UTC hour of ``t``)::

    growth = max(0, ceil(peak * cores) - primary)    cores the primary is forecast to take back
    safe   = max(0, free - growth)                   free cores beyond that growth

A scheduler hands out safe cores first and the others (*risky*: the primary is expected to claim
them within the horizon) last:

- the simulator draws a job's containers from safe cores on its classes' servers, then safe cores
  anywhere, then (spill) any free core (:func:`choose_safe_first`);
- the agent, which cannot see other nodes, tells YARN only what is allocated plus the safe cores
  (:func:`advertised_cores`): ``capacity - reserve - primary - growth``, never below what running
  containers hold (a forecast never takes a core back; only a real spike does, through the reserve).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

HOURS = 24
_CEIL_EPS = 1e-6  # a fraction that lands a hair above a whole core still counts as that core


class ForecastFormatError(ValueError):
    """A tenant forecast document breaks its format (the message names the field)."""


def hour_of_day(t_s: float) -> int:
    """UTC hour of day (0..23) of a Unix timestamp."""
    return int(math.floor(t_s / 3600.0)) % HOURS


def growth_cores(peak_frac: np.ndarray | float, cores: np.ndarray | float,
                 primary_cores: np.ndarray | int) -> np.ndarray:
    """Cores each server's primary is forecast to add within the horizon: ``max(0, ceil(peak * cores)
    - primary)`` (whole cores, >= 0; ``primary_cores`` rounded up, as the agent reports it)."""
    expected = np.ceil(np.asarray(peak_frac) * np.asarray(cores) - _CEIL_EPS).astype(np.int64)
    return np.maximum(0, expected - np.asarray(primary_cores, dtype=np.int64))


def safe_cores(free: np.ndarray | int, growth: np.ndarray | int) -> np.ndarray:
    """Free cores beyond the forecast growth: ``max(0, free - growth)``."""
    return np.maximum(0, np.asarray(free) - np.asarray(growth))


def advertised_cores(harvestable: int, allocated: int, growth: int) -> int:
    """What one node tells YARN it may hand out: what running containers hold plus its safe cores.

    ``harvestable`` = capacity - reserve - primary (>= 0), ``allocated`` = cores held by running
    containers, ``growth`` = :func:`growth_cores`. The free cores are ``max(0, harvestable -
    allocated)``; the result ``min(harvestable, allocated) + safe`` is at most ``harvestable`` and
    never below ``min(harvestable, allocated)``, so the forecast alone never preempts a container.
    """
    harvestable, allocated = max(0, int(harvestable)), max(0, int(allocated))
    free = max(0, harvestable - allocated)
    return min(harvestable, allocated) + int(safe_cores(free, max(0, int(growth))))


def choose_proportional(free: np.ndarray, servers: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` free cores drawn uniformly without replacement (server weight = its free cores)."""
    slots = np.repeat(servers, free[servers])
    if n >= slots.shape[0]:
        return slots
    return slots[rng.choice(slots.shape[0], n, replace=False)]


def choose_safe_first(
    free: np.ndarray,
    safe: np.ndarray,
    prefer: np.ndarray | None,
    n: int,
    spill: bool,
    rng: np.random.Generator,
) -> np.ndarray:
    """Up to ``n`` cores for one job, *safe* cores first (free beyond the forecast growth).

    Pools in order, each drawn proportionally to its cores: safe cores on the ``prefer`` servers
    (the job's classes), safe cores anywhere, then (``spill``) any free core. ``free`` and ``safe``
    are updated in place.
    """
    pools: list[tuple[bool, np.ndarray | None]] = []
    if prefer is not None:
        pools.append((True, prefer))
    pools.append((True, None))
    if spill:
        pools.append((False, None))
    got: list[np.ndarray] = []
    for use_safe, pool in pools:
        weights = safe if use_safe else free
        cand = np.flatnonzero(weights > 0) if pool is None else pool[weights[pool] > 0]
        if n <= 0 or cand.size == 0:
            continue
        c = choose_proportional(weights, cand, n, rng)
        np.subtract.at(free, c, 1)
        if use_safe:
            np.subtract.at(safe, c, 1)
        np.minimum(safe, free, out=safe)
        got.append(c)
        n -= c.shape[0]
    return np.concatenate(got) if got else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class HeadroomForecast:
    """``hourly[i, h]``: the forecast peak CPU fraction of ``tenants[i]`` over the ``horizon_s`` after
    any moment in UTC hour ``h`` (fitted by ``core.forecast.fit_headroom_forecast``)."""

    tenants: tuple[str, ...]
    hourly: np.ndarray  # float64 [n_tenants, 24], in [0, 1]
    horizon_s: float
    quantile: float

    def peak_at(self, t_s: float) -> np.ndarray:
        """Forecast peak of every tenant (in ``tenants`` order) over the horizon after time ``t_s``."""
        return self.hourly[:, hour_of_day(t_s)]

    def growth_cores(self, tenant_index: np.ndarray, cores: np.ndarray, primary_cores: np.ndarray, t_s: float) -> np.ndarray:
        """Per server: cores its primary is forecast to add within the horizon (:func:`growth_cores`).

        ``tenant_index[k]`` is server ``k``'s row in ``tenants``.
        """
        return growth_cores(self.hourly[tenant_index, hour_of_day(t_s)], cores, primary_cores)

    def tenant(self, name: str) -> TenantForecast:
        """The one tenant's forecast, as a node's agent reads it."""
        try:
            i = self.tenants.index(name)
        except ValueError:
            raise KeyError(f"headroom forecast: no tenant {name!r}") from None
        return TenantForecast(name, tuple(float(x) for x in self.hourly[i]), self.horizon_s, self.quantile)


@dataclass(frozen=True)
class TenantForecast:
    """One primary tenant's forecast: ``hourly_peak_frac[h]`` is its forecast peak CPU fraction over the
    ``horizon_s`` after any moment in UTC hour ``h``.

    JSON form (the agent's ``forecast_file``)::

        {"tenant": "web", "horizon_s": 3600, "quantile": 0.9, "hourly_peak_frac": [24 numbers in [0, 1]]}
    """

    tenant: str
    hourly_peak_frac: tuple[float, ...]
    horizon_s: float = 3600.0
    quantile: float = 0.9

    def peak_frac_at(self, t_s: float) -> float:
        return self.hourly_peak_frac[hour_of_day(t_s)]

    def growth_cores(self, cores: float, primary_cores: int, t_s: float) -> int:
        """Cores this tenant's primary on a node of ``cores`` is forecast to add after ``t_s``."""
        return int(growth_cores(self.peak_frac_at(t_s), cores, primary_cores))

    def to_json(self) -> str:
        return json.dumps({"tenant": self.tenant, "horizon_s": self.horizon_s, "quantile": self.quantile,
                           "hourly_peak_frac": list(self.hourly_peak_frac)})

    @classmethod
    def from_json(cls, text: str, where: str = "forecast") -> TenantForecast:
        """Parse and check a document (``where`` names it in errors)."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ForecastFormatError(f"{where}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ForecastFormatError(f"{where}: expected a JSON object")
        tenant = doc.get("tenant")
        if not isinstance(tenant, str) or not tenant:
            raise ForecastFormatError(f"{where}: 'tenant' must be a non-empty string")
        hourly = doc.get("hourly_peak_frac")
        if not isinstance(hourly, list) or len(hourly) != HOURS:
            raise ForecastFormatError(f"{where}: 'hourly_peak_frac' must be a list of {HOURS} numbers")
        for h, x in enumerate(hourly):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0:
                raise ForecastFormatError(f"{where}: 'hourly_peak_frac'[{h}] must be a number in [0, 1], got {x!r}")
        horizon_s = doc.get("horizon_s", 3600.0)
        quantile = doc.get("quantile", 0.9)
        for key, value in (("horizon_s", horizon_s), ("quantile", quantile)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ForecastFormatError(f"{where}: '{key}' must be a finite number > 0, got {value!r}")
        return cls(tenant, tuple(float(x) for x in hourly), float(horizon_s), float(quantile))
