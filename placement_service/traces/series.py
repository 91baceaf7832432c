"""From validated traces to what the policy core consumes.

- :func:`tenant_series`: each tenant's "average server" CPU series on a regular grid of slots (the
  paper's input to the FFT), short gaps filled, long gaps reported;
- :func:`reimage_rates` / :func:`server_reimage_counts`: reimages per server per 30-day month;
- :func:`tenant_storage_gb`, :func:`tenant_environment`, :func:`tenant_server_counts`: per-tenant
  facts of the inventory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from placement_service.core.types import Inventory, ReimageEvents, TenantSeries
from placement_service.traces.io import UtilizationSamples

logger = logging.getLogger(__name__)

MONTH_S = 30 * 86400.0
"""One month, as the paper counts reimages "per month": 30 days in seconds."""


_CHUNK_ROWS = 4_000_000


def infer_interval_s(timestamp_s: np.ndarray, server_codes: np.ndarray | None = None) -> float:
    """The sampling interval: the most common positive step between a server's consecutive samples.

    With ``server_codes`` the steps are taken within each server (the first 256 servers suffice),
    so servers sampling at different offsets (one on the minute, one on the half minute) do not
    halve the estimate; without them, between distinct sample times. Missing samples make some
    steps longer, but as long as most slots are present the mode is the interval (e.g. 120 s for
    the paper's telemetry, 300 s for the Azure / PlanetLab traces).
    """
    ts = np.asarray(timestamp_s, dtype=np.float64)
    steps = np.empty(0)
    if server_codes is not None and len(ts) > 1:
        keep = np.asarray(server_codes) < 256
        sub_ts, sub_codes = ts[keep], np.asarray(server_codes)[keep]
        order = np.lexsort((sub_ts, sub_codes))
        st, sc = sub_ts[order], sub_codes[order]
        d = np.diff(st)
        steps = d[(sc[1:] == sc[:-1]) & (d > 0)]
    if len(steps) == 0:
        uniq = np.unique(ts)
        if len(uniq) < 2:
            raise ValueError("cannot infer the sampling interval from fewer than two distinct timestamps")
        steps = np.diff(uniq)
    values, counts = np.unique(np.round(steps, 6), return_counts=True)
    return float(values[np.argmax(counts)])


def fill_gaps(cpu: np.ndarray, max_fill_slots: int = 3) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Fill runs of NaN of at most ``max_fill_slots`` slots per row; report the longer runs.

    Interior runs are filled by linear interpolation between the slots either side; runs touching
    the start or the end of a row copy the nearest value. Returns the filled copy and the long gaps
    as (row, first slot, slot count). Vectorized over all rows at once.
    """
    out = np.array(cpu, dtype=np.float64, copy=True)
    if out.ndim != 2:
        raise ValueError("cpu must be a 2-D array [rows, slots]")
    n_rows, n_slots = out.shape
    missing = np.isnan(out)
    if not missing.any():
        return out, []
    # Run boundaries on a zero-padded copy of each row, flattened: +1 = run start, -1 = run end.
    padded = np.zeros((n_rows, n_slots + 2), dtype=np.int8)
    padded[:, 1:-1] = missing
    edges = np.diff(padded, axis=1)
    s_row, s_col = np.nonzero(edges == 1)
    e_row, e_col = np.nonzero(edges == -1)  # same order as starts (row-major)
    length = e_col - s_col
    all_missing = length == n_slots
    short = (length <= max_fill_slots) & ~all_missing
    long_gaps = [(int(r), int(c), int(n)) for r, c, n in zip(s_row[~short], s_col[~short], length[~short], strict=True)]
    if short.any():
        r, c0, n = s_row[short], s_col[short], length[short]
        left = np.where(c0 > 0, out[r, np.maximum(c0 - 1, 0)], np.nan)
        right_col = c0 + n
        right = np.where(right_col < n_slots, out[r, np.minimum(right_col, n_slots - 1)], np.nan)
        left = np.where(np.isnan(left), right, left)
        right = np.where(np.isnan(right), left, right)
        # One entry per filled slot: its run, its offset k = 1..n inside the run.
        rep = np.repeat(np.arange(len(r)), n)
        k = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n) + 1
        frac = k / (n[rep] + 1.0)
        out[r[rep], c0[rep] + k - 1] = left[rep] + (right[rep] - left[rep]) * frac
    return out, long_gaps


def tenant_series(
    samples: UtilizationSamples, *, interval_s: float | None = None, max_fill_slots: int = 3
) -> TenantSeries:
    """Each tenant's average-server CPU series on a regular grid.

    Steps:
    1. the interval is ``interval_s`` or inferred (:func:`infer_interval_s`); slot j starts at
       ``start_s + j * interval_s`` where ``start_s`` is the earliest sample; a sample goes to the
       nearest slot;
    2. a tenant's value in a slot is the mean CPU of the samples of its servers in that slot (the
       paper's "average server"); a slot with no sample of the tenant is missing;
    3. runs of at most ``max_fill_slots`` missing slots are filled (:func:`fill_gaps`); longer runs
       stay NaN and are listed in ``long_gaps`` (and logged as a warning).
    Tenants come out sorted by name.
    """
    if len(samples) == 0:
        raise ValueError("no utilization samples")
    ts = np.asarray(samples.timestamp_s, dtype=np.float64)
    step = float(interval_s) if interval_s is not None else infer_interval_s(ts, samples.factorize("server")[1])
    if step <= 0:
        raise ValueError(f"interval_s must be positive, got {step}")
    start = float(ts.min())
    n_slots = int(np.floor((float(ts.max()) - start) / step + 0.5)) + 1
    tenants, t_code = samples.factorize("tenant")
    size = len(tenants) * n_slots
    total = np.zeros(size)
    count = np.zeros(size, dtype=np.int64)
    # In chunks of rows, so the temporaries stay small on tens of millions of samples.
    for lo in range(0, len(ts), _CHUNK_ROWS):
        hi = min(len(ts), lo + _CHUNK_ROWS)
        slot = np.floor((ts[lo:hi] - start) / step + 0.5).astype(np.int64)  # nearest slot, halves round up
        flat = t_code[lo:hi].astype(np.int64) * n_slots + slot
        total += np.bincount(flat, weights=samples.cpu[lo:hi], minlength=size)
        count += np.bincount(flat, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (total / count).reshape(len(tenants), n_slots)
    del total, count
    filled, gaps = fill_gaps(mean, max_fill_slots)
    names = tenants.tolist()
    long_gaps = tuple((str(names[r]), c, n) for r, c, n in gaps)
    if long_gaps:
        logger.warning(
            "%d gap(s) longer than %d slots (%d slots in all) in %d of %d tenants left as NaN",
            len(long_gaps),
            max_fill_slots,
            sum(g[2] for g in long_gaps),
            len({g[0] for g in long_gaps}),
            len(names),
        )
    return TenantSeries(
        tenants=tuple(str(t) for t in names),
        start_s=start,
        interval_s=step,
        cpu=filled,
        long_gaps=long_gaps,
    )


def server_reimage_counts(events: ReimageEvents, inventory: Inventory) -> np.ndarray:
    """Number of reimages of each inventory server (index i = ``inventory.server[i]``).

    Events of servers missing from the inventory are ignored (and counted in a warning).
    """
    index = inventory.index()
    idx = np.fromiter((index.get(s, -1) for s in events.server), dtype=np.int64, count=len(events.server))
    unknown = int((idx < 0).sum())
    if unknown:
        logger.warning("%d reimage event(s) of servers not in the inventory ignored", unknown)
    return np.bincount(idx[idx >= 0], minlength=len(inventory)).astype(np.int64)


def observed_span_s(events: ReimageEvents) -> float:
    """First to last event, or one month when that is zero (0 or 1 events)."""
    if len(events.timestamp_s) < 2:
        return MONTH_S
    span = float(np.max(events.timestamp_s) - np.min(events.timestamp_s))
    return span if span > 0 else MONTH_S


def server_reimage_rates(events: ReimageEvents, inventory: Inventory, *, span_s: float | None = None) -> np.ndarray:
    """Reimages per server per 30-day month, per inventory server.

    ``span_s`` is the length of the observation window; pass it when known (e.g. the utilization
    window). By default it is the first-to-last event span (:func:`observed_span_s`).
    """
    months = (span_s if span_s is not None else observed_span_s(events)) / MONTH_S
    return server_reimage_counts(events, inventory) / months


def reimage_rates(
    events: ReimageEvents, inventory: Inventory, *, span_s: float | None = None
) -> dict[str, float]:
    """Per tenant, the average number of reimages per server per 30-day month (paper Figure 5).

    Every tenant of the inventory is present (0.0 when its servers saw no reimage).
    """
    counts = server_reimage_counts(events, inventory)
    months = (span_s if span_s is not None else observed_span_s(events)) / MONTH_S
    tenants, code = np.unique(np.asarray(inventory.tenant, dtype=str), return_inverse=True)
    per_tenant = np.bincount(code, weights=counts, minlength=len(tenants))
    servers = np.bincount(code, minlength=len(tenants))
    return {str(t): float(c / n / months) for t, c, n in zip(tenants, per_tenant, servers, strict=True)}


def tenant_storage_gb(inventory: Inventory) -> dict[str, float]:
    """Per tenant, the storage its servers let HDFS use (sum of ``storage_gb``)."""
    tenants, code = np.unique(np.asarray(inventory.tenant, dtype=str), return_inverse=True)
    total = np.bincount(code, weights=np.asarray(inventory.storage_gb, dtype=np.float64), minlength=len(tenants))
    return {str(t): float(v) for t, v in zip(tenants, total, strict=True)}


def tenant_server_counts(inventory: Inventory) -> dict[str, int]:
    tenants, counts = np.unique(np.asarray(inventory.tenant, dtype=str), return_counts=True)
    return {str(t): int(n) for t, n in zip(tenants, counts, strict=True)}


def tenant_environment(inventory: Inventory) -> dict[str, str]:
    """Per tenant, its environment (a tenant is an <environment, machine function> pair).

    If a tenant's servers name several environments, the most common one wins (ties: by name) and
    a warning is logged.
    """
    votes: dict[str, dict[str, int]] = {}
    for t, e in zip(inventory.tenant, inventory.environment, strict=True):
        d = votes.setdefault(t, {})
        d[e] = d.get(e, 0) + 1
    out: dict[str, str] = {}
    mixed = 0
    for t, d in votes.items():
        mixed += len(d) > 1
        out[t] = min(d.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    if mixed:
        logger.warning("%d tenant(s) span several environments; using each one's most common", mixed)
    return out


def tenant_servers(inventory: Inventory) -> Mapping[str, tuple[int, ...]]:
    """Per tenant, the inventory indices of its servers (in inventory order)."""
    out: dict[str, list[int]] = {}
    for i, t in enumerate(inventory.tenant):
        out.setdefault(t, []).append(i)
    return {t: tuple(v) for t, v in out.items()}
