"""The simulated datacenter: servers, their primary tenants' CPU series, reimages, and load scaling.

A server's primary CPU in slot ``j`` is its tenant's "average server" series in that slot (the series
the clustering learns from): every server of a tenant moves together, as in a load-balanced service.
Long gaps (NaN) are filled with the tenant's mean so the simulator always has a value.

Utilization sweep (the x-axis of the scheduling and availability figures): the datacenter's average
primary utilization is the core-weighted mean ``U = sum_t cores_t * mean(x_t) / sum_t cores_t``.
Two scalings move ``U`` to a target level ``L``:

- ``linear``: ``y = min(1, a * x)``; ``a`` found by bisection so ``U(y) = L`` (saturation makes the
  mapping non-linear at high levels, which is why the second scaling exists);
- ``root``: ``y = x ** p``; ``p < 1`` (an n-th root, ``n = 1 / p``) raises low values more than high
  ones, so series get flatter and saturate less; ``p > 1`` lowers the level below the native one.
  ``p`` is found by bisection on ``log p``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from placement_service import HarvestError
from placement_service.core.types import Inventory, ReimageEvents, TenantSeries

if TYPE_CHECKING:
    from placement_service.traces.generate import GeneratedDatacenter

logger = logging.getLogger(__name__)


class SimInputError(HarvestError):
    """The simulator's inputs are inconsistent (unknown tenant, unreachable utilization level, ...)."""


class Scaling(StrEnum):
    LINEAR = "linear"
    ROOT = "root"


@dataclass(frozen=True)
class SimDatacenter:
    """Inputs of every simulation: inventory, tenant series and (optionally) reimage events.

    ``server_tenant[i]`` is the row of ``series.cpu`` that drives server ``i``; ``cpu`` is
    ``series.cpu`` with NaN replaced by each tenant's mean, as float32 [n_tenants, n_slots].
    """

    name: str
    inventory: Inventory
    series: TenantSeries
    server_tenant: np.ndarray
    cpu: np.ndarray
    reimages: ReimageEvents | None = None
    reimage_window_s: float | None = None  # span the reimage events cover (None: the series' span)

    @property
    def n_servers(self) -> int:
        return len(self.inventory)

    @property
    def n_tenants(self) -> int:
        return len(self.series.tenants)

    def tenant_cores(self) -> np.ndarray:
        """Total cores of each tenant's servers (rows in ``series.tenants`` order)."""
        return np.bincount(self.server_tenant, weights=self.inventory.cores, minlength=self.n_tenants)

    def tenant_servers(self) -> np.ndarray:
        return np.bincount(self.server_tenant, minlength=self.n_tenants)

    def average_utilization(self, cpu: np.ndarray | None = None) -> float:
        """Core-weighted mean primary utilization of the datacenter over all slots."""
        x = self.cpu if cpu is None else cpu
        w = self.tenant_cores()
        return float((x.mean(axis=1, dtype=np.float64) * w).sum() / w.sum())


def build_datacenter(
    name: str,
    inventory: Inventory,
    series: TenantSeries,
    reimages: ReimageEvents | None = None,
    *,
    reimage_window_s: float | None = None,
) -> SimDatacenter:
    """Tie servers to their tenant's series; every inventory tenant needs a series."""
    if len(inventory) == 0:
        raise SimInputError(f"{name}: the inventory has no servers")
    row = {t: i for i, t in enumerate(series.tenants)}
    missing = sorted({t for t in inventory.tenant if t not in row})
    if missing:
        raise SimInputError(
            f"{name}: {len(missing)} inventory tenant(s) have no utilization series "
            f"(e.g. {', '.join(missing[:5])})"
        )
    server_tenant = np.fromiter((row[t] for t in inventory.tenant), dtype=np.int64, count=len(inventory))
    cpu = np.array(series.cpu, dtype=np.float64)
    means = np.nanmean(np.where(np.isnan(cpu).all(axis=1, keepdims=True), 0.0, cpu), axis=1)
    cpu = np.where(np.isnan(cpu), means[:, None], cpu)
    cpu = np.clip(cpu, 0.0, 1.0).astype(np.float32)
    return SimDatacenter(name, inventory, series, server_tenant, cpu, reimages, reimage_window_s)


def load_datacenter(
    utilization: str | Path, inventory: str | Path, reimages: str | Path | None = None, *, name: str | None = None,
    interval_s: float | None = None,
) -> SimDatacenter:
    """Read the trace files (the data contracts of ``DESIGN.md``) into a ``SimDatacenter``;
    ``interval_s``: the sampling interval of the series (None: inferred, ``traces.series``)."""
    from placement_service.traces import io
    from placement_service.traces.series import tenant_series

    if interval_s is not None and not (np.isfinite(interval_s) and interval_s > 0):
        raise SimInputError(f"--interval-s must be a positive number of seconds, got {interval_s}")
    inv = io.load_inventory(inventory)
    samples = io.load_utilization(utilization, optional_columns=False)
    try:
        series = tenant_series(samples, interval_s=interval_s)
    except ValueError as exc:
        raise SimInputError(f"{utilization}: {exc}") from None
    del samples
    events = io.load_reimages(reimages) if reimages is not None else None
    return build_datacenter(name or Path(utilization).stem, inv, series, events)


def from_generated(gen: GeneratedDatacenter, name: str = "generated") -> SimDatacenter:
    """A ``SimDatacenter`` from ``traces.generate.generate_datacenter`` output (no files involved)."""
    from placement_service.traces.series import tenant_series

    series = tenant_series(gen.utilization, interval_s=gen.interval_s)
    days = getattr(gen, "reimage_days", None) or gen.days
    return build_datacenter(name, gen.inventory, series, gen.reimages, reimage_window_s=float(days) * 86400.0)


def _scaled(x: np.ndarray, scaling: Scaling, param: float) -> np.ndarray:
    if scaling is Scaling.LINEAR:
        return np.minimum(np.float32(1.0), x * np.float32(param))
    return np.power(x, np.float32(param))


def scale_cpu(
    cpu: np.ndarray, weights: np.ndarray, level: float, scaling: Scaling, *, tol: float = 1e-4
) -> tuple[np.ndarray, float]:
    """Scale tenant series so the weighted mean utilization is ``level``; returns (series, parameter).

    ``weights`` are the tenants' cores. Raises ``SimInputError`` when ``level`` cannot be reached
    (e.g. every series is 0, or a level of 1.0 with idle tenants under root scaling).
    """
    if not 0.0 < level < 1.0:
        raise SimInputError(f"utilization level must be in (0, 1), got {level}")
    w = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    row_mean = cpu.mean(axis=1, dtype=np.float64)

    def mean_of(param: float) -> float:
        if scaling is Scaling.LINEAR and param <= 1.0:
            return float((row_mean * param * w).sum())  # no saturation below factor 1
        return float((_scaled(cpu, scaling, param).mean(axis=1, dtype=np.float64) * w).sum())

    if scaling is Scaling.LINEAR:
        lo, hi = 0.0, 1.0
        while mean_of(hi) < level:
            hi *= 2.0
            if hi > 1e6:
                raise SimInputError(f"linear scaling cannot reach utilization {level:.2f} (series are ~0)")
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if mean_of(mid) < level else (lo, mid)
            if hi - lo < tol * max(hi, 1e-9):
                break
        param = 0.5 * (lo + hi)
    else:
        # mean(x ** p) decreases with p; search log p in [-12, 6].
        lo_l, hi_l = -12.0, 6.0
        if not (mean_of(float(np.exp(hi_l))) <= level <= mean_of(float(np.exp(lo_l)))):
            raise SimInputError(f"root scaling cannot reach utilization {level:.2f}")
        for _ in range(60):
            mid = 0.5 * (lo_l + hi_l)
            lo_l, hi_l = (mid, hi_l) if mean_of(float(np.exp(mid))) > level else (lo_l, mid)
            if hi_l - lo_l < tol:
                break
        param = float(np.exp(0.5 * (lo_l + hi_l)))
    out = _scaled(cpu, scaling, param).astype(np.float32)
    logger.debug("scaled to level %.3f with %s parameter %.4f", level, scaling.value, param)
    return out, param


def tenant_index(dc: SimDatacenter) -> Mapping[str, int]:
    return {t: i for i, t in enumerate(dc.series.tenants)}
