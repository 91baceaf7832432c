"""A year of reimages from a shorter trace: circular block bootstrap of the observed window.

The traces we have (the generator's, or a user's file) cover about a month; durability needs a year.
The year is cut into consecutive windows as long as the observed span ``W`` (first to last possible
event: the utilization window when known, else the events' span); window ``k`` replays the observed
events with their own random circular shift ``u_k ~ U[0, W)``::

    time = k * W + ((t - t0 + u_k) mod W)

Every server keeps its own events (so its reimage rate, and its tenant's rank among tenants, carry
over month to month, as the paper observed of real tenants), and events that hit many servers at
once (an environment being repurposed) stay together, so correlated loss keeps its structure; only
their timing changes from window to window. What this cannot produce is a server or a correlated
group that the observed window never saw reimaged; ``docs/simulator.md`` says so. When the trace
already covers the simulated span (e.g. ``generate_datacenter(..., reimage_days=365)``, whose
tenant rates drift month to month), it is used as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_service.core.types import Inventory, ReimageEvents
from placement_service.sim.datacenter import SimInputError


@dataclass(frozen=True)
class ReimageSchedule:
    time_s: np.ndarray  # float64, ascending, seconds from the simulation start
    server: np.ndarray  # int64 inventory index


def server_indices(events: ReimageEvents, inventory: Inventory) -> np.ndarray:
    """Inventory index of each event's server (-1 when unknown)."""
    index = inventory.index()
    return np.fromiter((index.get(s, -1) for s in events.server), dtype=np.int64, count=len(events.server))


def extend_reimages(
    events: ReimageEvents,
    inventory: Inventory,
    days: float,
    rng: np.random.Generator,
    *,
    window_start_s: float | None = None,
    window_s: float | None = None,
) -> ReimageSchedule:
    """``days`` of reimages by circular block bootstrap of the observed window (module docstring)."""
    idx = server_indices(events, inventory)
    keep = idx >= 0
    ts = np.asarray(events.timestamp_s, dtype=np.float64)[keep]
    idx = idx[keep]
    if ts.size == 0:
        return ReimageSchedule(np.zeros(0), np.zeros(0, dtype=np.int64))
    t0 = float(ts.min()) if window_start_s is None else float(window_start_s)
    span = float(window_s) if window_s is not None else float(ts.max() - t0)
    if span <= 0:
        raise SimInputError("the reimage window must be longer than 0 s (one event, or all at one time)")
    rel = np.clip(ts - t0, 0.0, np.nextafter(span, 0.0))
    total_s = days * 86400.0
    if span >= total_s:  # the trace already covers the whole span: use it as it is
        raw = ts - t0
        inside = (raw >= 0.0) & (raw < total_s)
        order = np.argsort(raw[inside], kind="stable")
        return ReimageSchedule(raw[inside][order], idx[inside][order])
    n_windows = int(np.ceil(total_s / span))
    times, servers = [], []
    for k in range(n_windows):
        u = rng.uniform(0.0, span)
        times.append(k * span + np.mod(rel + u, span))
        servers.append(idx)
    t = np.concatenate(times)
    s = np.concatenate(servers)
    keep2 = t < total_s
    order = np.argsort(t[keep2], kind="stable")
    return ReimageSchedule(t[keep2][order], s[keep2][order])
