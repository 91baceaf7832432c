"""Busy-hour profiles: per tenant, the hours of the day at which its history was busy.

A tenant's profile is a 24-bit mask: bit ``h`` is set when its CPU was above ``busy_cpu -
margin_cpu`` in more than ``min_share`` of the history's samples at hour-of-day ``h`` (UTC of the
series' clock). The replica placer (``ReplicaPlacer(busy_hours=...)``) prefers, for a block's
remaining replicas, tenants whose masks do not overlap those of the replicas already chosen, so a
block's replicas are not all on tenants that are busy at the same hours. Pure: numbers in, masks out;
the simulator (``sim.policy``) and the service's re-clustering both call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from placement_service.core.types import TenantSeries

HOURS = 24
ALL_HOURS = (1 << HOURS) - 1

BUSY_PROFILE_MARGIN_CPU = 0.0
"""An hour counts as busy when the CPU came within this of the busy threshold there (the history is
a sample: a margin keeps near-busy hours in the profile). Margins of 0.05-0.3 measured no better on
the real traces (docs/results.md)."""
BUSY_PROFILE_MIN_SHARE = 0.05
"""... in more than this share of the history's samples at that hour of day (0: any sample)."""


def busy_hour_masks(
    cpu: np.ndarray,
    start_s: float,
    interval_s: float,
    busy_cpu: float,
    min_share: float | None = None,
    margin_cpu: float | None = None,
) -> np.ndarray:
    """Masks (int64, one per row of ``cpu`` [tenant, slot], slot k at ``start_s + k * interval_s``);
    a NaN sample (a gap) counts as a sample that was not busy."""
    min_share = BUSY_PROFILE_MIN_SHARE if min_share is None else float(min_share)
    margin_cpu = BUSY_PROFILE_MARGIN_CPU if margin_cpu is None else float(margin_cpu)
    if not (np.isfinite(busy_cpu) and np.isfinite(min_share) and np.isfinite(margin_cpu)) or interval_s <= 0:
        raise ValueError("busy_cpu, min_share and margin_cpu must be finite and interval_s > 0")
    x = np.asarray(cpu)
    if x.ndim != 2:
        raise ValueError(f"cpu must be [tenant, slot], got shape {x.shape}")
    if x.shape[1] == 0:
        return np.zeros(x.shape[0], dtype=np.int64)
    t_s = start_s + np.arange(x.shape[1]) * interval_s
    hour = ((t_s % 86400.0) // 3600.0).astype(np.int64)
    # Compared in the series' own precision (float32 traces: the same threshold as their busy test).
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    busy = x > np.asarray(busy_cpu - margin_cpu, dtype=dtype)
    share = np.zeros((x.shape[0], HOURS))
    for h in range(HOURS):
        cols = hour == h
        if cols.any():
            share[:, h] = busy[:, cols].mean(axis=1)
    bits = share > min_share
    return (bits * (np.int64(1) << np.arange(HOURS, dtype=np.int64))).sum(axis=1).astype(np.int64)


def busy_hour_profiles(series: TenantSeries, busy_cpu: float) -> dict[str, int]:
    """:func:`busy_hour_masks` of a tenant series, by tenant (what a class table's ``busy_hours`` holds)."""
    masks = busy_hour_masks(series.cpu, series.start_s, series.interval_s, busy_cpu)
    return {t: int(m) for t, m in zip(series.tenants, masks.tolist(), strict=True)}
