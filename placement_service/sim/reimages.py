"""A year of reimages from a shorter trace: circular block bootstrap of the observed window.

The traces we have (the generator's, or a user's file) cover about a month; durability needs a year.
The observed span ``W`` runs from the earlier of the utilization window's start and the first
event to the later of the window's end and the last event: a reimage log longer than the
utilization export keeps its own span (its events are never clipped to the utilization window).
When ``W`` covers the simulated days (at least ``1 - COVER_SHORTFALL`` of them: a log of the whole
horizon ends at its last event, shortly before the horizon's end), the trace is used as it is (its
first ``days`` from the start of ``W``; the days past ``W``, if any, continue it from its start). Otherwise the year is cut into consecutive windows of length ``W``; window ``k`` replays
the observed events with their own random circular shift ``u_k ~ U[0, W)``::

    time = k * W + ((t - t0 + u_k) mod W)

Every server keeps its own events (so its reimage rate, and its tenant's rank among tenants, carry
over month to month, as the paper observed of real tenants), and events that hit many servers at
once (an environment being repurposed) stay together, so correlated loss keeps its structure; only
their timing changes from window to window. What this cannot produce is a server or a correlated
group that the observed window never saw reimaged; ``docs/simulator.md`` says so. When the trace
already covers the simulated span (e.g. ``generate_datacenter(..., reimage_days=365)``, whose
tenant rates drift month to month), it is used as it is. ``ReimageSchedule.how`` says which was
done (the simulator's records and logs carry it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from placement_service.core.types import Inventory, ReimageEvents
from placement_service.sim.datacenter import SimInputError

logger = logging.getLogger(__name__)


COVER_SHORTFALL = 0.05
"""A trace whose span reaches at least ``1 - COVER_SHORTFALL`` of the simulated days covers them:
it is used as it is. A log of a whole year ends at its last event, about one mean gap before the
year's end (for a sparse log, days: 60 events a year end ~6 days early), and was bootstrapped when
it fell short by any margin (issue 39, finding 8)."""


@dataclass(frozen=True)
class ReimageSchedule:
    time_s: np.ndarray  # float64, ascending, seconds from the simulation start
    server: np.ndarray  # int64 inventory index
    how: str = "given"  # "as-is", "bootstrap" or "none" from extend_reimages; "given" when built by hand
    source_span_s: float = 0.0  # the observed span the schedule came from


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
    """``days`` of reimages from the trace: as it is when it covers them, else by circular block
    bootstrap of its own span (module docstring)."""
    idx = server_indices(events, inventory)
    keep = idx >= 0
    ts = np.asarray(events.timestamp_s, dtype=np.float64)[keep]
    idx = idx[keep]
    if ts.size == 0:
        return ReimageSchedule(np.zeros(0), np.zeros(0, dtype=np.int64), "none", 0.0)
    if window_s is not None and not window_s > 0:
        raise SimInputError(f"the reimage window must be longer than 0 s, got {window_s}")
    t0 = float(ts.min()) if window_start_s is None else min(float(window_start_s), float(ts.min()))
    end = float(ts.max())
    if window_s is not None:
        end = max(end, (float(window_start_s) if window_start_s is not None else t0) + float(window_s))
    span = end - t0
    if end == float(ts.max()):
        # The span ends at the last event: add one mean gap between events, so that the trace's
        # first and last events do not land on the same instant when it is replayed circularly.
        span += span / max(ts.size - 1, 1)
    if span <= 0:
        raise SimInputError("the reimage window must be longer than 0 s (one event, or all at one time)")
    rel = ts - t0
    total_s = days * 86400.0
    if span >= (1.0 - COVER_SHORTFALL) * total_s:  # the trace covers the horizon: use it as it is
        # A log of the whole horizon ends at its last event, which comes before the horizon's end
        # (by about one mean gap): the few days past its span continue it from its own start.
        rel = np.minimum(rel, np.nextafter(span, 0.0))
        tail = rel < total_s - span
        t = np.concatenate([rel, rel[tail] + span])
        s = np.concatenate([idx, idx[tail]])
        inside = t < total_s
        order = np.argsort(t[inside], kind="stable")
        logger.info(
            "reimages: used as they are (%d of %d events; the trace spans %.1f days, %.1f simulated)",
            int((rel < total_s).sum()), ts.size, span / 86400.0, days,
        )
        return ReimageSchedule(t[inside][order], s[inside][order], "as-is", span)
    rel = np.minimum(rel, np.nextafter(span, 0.0))  # an event exactly at the end wraps to the start
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
    logger.info(
        "reimages: bootstrapped from the trace's own %.1f-day span (%d events, %d windows) to %.1f days",
        span / 86400.0, ts.size, n_windows, days,
    )
    return ReimageSchedule(t[keep2][order], s[keep2][order], "bootstrap", span)
