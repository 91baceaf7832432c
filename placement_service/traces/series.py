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
from dataclasses import dataclass

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
    long_gaps = [
        (int(r), int(c), int(n)) for r, c, n in zip(s_row[~short], s_col[~short], length[~short], strict=True)
    ]
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


@dataclass(frozen=True)
class SamplingSummary:
    """What :func:`build_tenant_series` inferred from the samples and used to build the grid.

    ``server_interval_s``: each server's sampling interval, the median spacing of its consecutive
    samples (servers with a single sample are absent); ``interval_s``: the common grid's slot
    length (given, or the lower median of the per-server intervals); ``tenant_window_s``: each
    tenant's first and last sample; ``span_s``: the first and last sample of the file.
    """

    interval_s: float
    interval_given: bool
    server_interval_s: Mapping[str, float]
    tenant_window_s: Mapping[str, tuple[float, float]]
    span_s: tuple[float, float]
    step_p10_p90_s: tuple[float, float]  # spread of the steps within servers (a sample of them)

    def interval_counts(self) -> list[tuple[float, int]]:
        """Distinct per-server intervals (to 0.1 s) with their server counts, most common first."""
        values = np.round(np.fromiter(self.server_interval_s.values(), dtype=np.float64), 1)
        if values.size == 0:
            return []
        distinct, counts = np.unique(values, return_counts=True)
        order = np.lexsort((distinct, -counts))
        return [(float(distinct[i]), int(counts[i])) for i in order]

    @property
    def mixed_intervals(self) -> bool:
        """Servers sample at intervals more than 10% apart."""
        values = list(self.server_interval_s.values())
        return bool(values) and max(values) > 1.1 * min(values)

    def partial_window_tenants(self, below_frac: float = 0.9) -> list[str]:
        """Tenants whose first-to-last sample covers less than ``below_frac`` of the file's span."""
        span = self.span_s[1] - self.span_s[0] + self.interval_s
        return sorted(
            t for t, (a, b) in self.tenant_window_s.items() if b - a + self.interval_s < below_frac * span
        )

    @property
    def disjoint_windows(self) -> bool:
        """Some tenants' windows do not overlap at all (one ends before another starts)."""
        if len(self.tenant_window_s) < 2:
            return False
        firsts = [a for a, _ in self.tenant_window_s.values()]
        lasts = [b for _, b in self.tenant_window_s.values()]
        return max(firsts) > min(lasts)

    def notes(self) -> list[str]:
        """One line per finding an operator should know (mixed intervals, partial or disjoint windows)."""
        out = []
        if self.interval_given:
            out.append(
                f"grid of {self.interval_s:g} s as given (per-server intervals inferred for resampling)"
            )
        else:
            out.append(
                f"grid of {self.interval_s:g} s: the lower median of {len(self.server_interval_s)} per-server "
                "sampling intervals (each the median spacing of the server's samples)"
            )
        if self.mixed_intervals:
            counts = self.interval_counts()
            listed = ", ".join(f"{v:g} s x{n}" for v, n in counts[:6]) + (", ..." if len(counts) > 6 else "")
            out.append(
                f"mixed sampling intervals: {listed} (servers); each server resampled on its own interval, "
                f"then onto the {self.interval_s:g} s grid"
            )
        lo, hi = self.step_p10_p90_s
        if hi > 1.1 * lo:
            out.append(f"irregular sampling within servers: 10-90% of the steps {lo:g}-{hi:g} s")
        partial = self.partial_window_tenants()
        if partial:
            span_days = (self.span_s[1] - self.span_s[0]) / 86400.0
            lengths = [(b - a) / 86400.0 for t, (a, b) in self.tenant_window_s.items() if t in set(partial)]
            out.append(
                f"{len(partial)} of {len(self.tenant_window_s)} tenants observed over part of the "
                f"{span_days:.1f} days only ({min(lengths):.1f}-{max(lengths):.1f} days"
                + ("; some windows do not overlap at all" if self.disjoint_windows else "")
                + "): patterns are computed on each tenant's own window"
            )
        return out


_STEP_SAMPLE = 256  # steps per server used for its median spacing


@dataclass(frozen=True)
class _ServerSampling:
    interval_s: np.ndarray  # median spacing per server (NaN with a single sample)
    first_s: np.ndarray  # first sample per server
    last_s: np.ndarray  # last sample per server
    first_row: np.ndarray  # a row of each server (its first in time)
    step_sample_s: np.ndarray  # the steps the medians were taken over, all servers


def _server_sampling(ts: np.ndarray, codes: np.ndarray, n_servers: int) -> _ServerSampling:
    """Per server: median spacing, first and last sample; rows taken in (server, time) order.

    The rows are in that order already when the file is grouped by server in time order (no sort);
    a file in time order needs a stable sort of the server codes; any other order a lexsort. The
    median is over at most ``_STEP_SAMPLE`` steps per server, evenly spread over its samples.
    """
    dc = np.diff(codes)
    grouped = 1 + int(np.count_nonzero(dc)) == int(np.count_nonzero(np.bincount(codes, minlength=n_servers)))
    if grouped and bool(np.all((dc != 0) | (np.diff(ts) > 0))):
        order = None
    elif bool(np.all(np.diff(ts) >= 0)):
        order = np.argsort(codes.astype(np.int16) if n_servers < 2**15 else codes, kind="stable")
    else:
        order = np.lexsort((ts, codes))
    del dc
    st = ts if order is None else ts[order]
    sc = codes if order is None else codes[order]
    starts = np.flatnonzero(np.diff(sc, prepend=-1))
    ends = np.append(starts[1:], len(sc))
    server = sc[starts]
    first = np.full(n_servers, np.nan)
    last = np.full(n_servers, np.nan)
    first_row = np.zeros(n_servers, dtype=np.int64)
    first[server], last[server] = st[starts], st[ends - 1]
    first_row[server] = starts if order is None else order[starts]
    interval = np.full(n_servers, np.nan)
    n_steps = ends - starts - 1
    has = n_steps > 0
    k = np.minimum(n_steps[has], _STEP_SAMPLE)
    if k.size == 0:
        return _ServerSampling(interval, first, last, first_row, np.empty(0))
    # Step j of a server: st[start + j + 1] - st[start + j], j evenly spread over its steps.
    offset = np.cumsum(k) - k
    pos = np.arange(int(k.sum())) - np.repeat(offset, k)
    j = (pos * np.repeat(n_steps[has], k)) // np.repeat(k, k)
    idx = np.repeat(starts[has], k) + j
    steps = st[idx + 1] - st[idx]
    # Median per server: sort the (server, step) pairs once and take the middle of each run.
    ordered = steps[np.lexsort((steps, np.repeat(np.arange(k.size), k)))]
    interval[server[has]] = (ordered[offset + (k - 1) // 2] + ordered[offset + k // 2]) / 2.0
    return _ServerSampling(interval, first, last, first_row, steps)


def build_tenant_series(
    samples: UtilizationSamples, *, interval_s: float | None = None, max_fill_slots: int = 3
) -> tuple[TenantSeries, SamplingSummary]:
    """Each tenant's average-server CPU series on a common grid, and what was inferred to build it.

    Steps:
    1. each server's sampling interval is the median spacing of its samples; the grid's slot length
       is ``interval_s`` when given, else the lower median of the per-server intervals (never
       inferred from the union of all servers' timestamps: servers sampling every 60-70 s at
       different offsets would look like a 10 s series); slot j starts at ``start_s + j *
       interval_s``, ``start_s`` = the earliest sample;
    2. each server is resampled on its own grid (slot i at its first sample + i * its interval, a
       sample in the nearest of its slots), then onto the common grid: a server slot covers the
       common slots whose start lies within half a server interval of it (a server sampling every
       300 s holds its value over five 60 s slots; no gaps are invented), or, for a server finer
       than the grid, goes to the nearest common slot with weight ``server interval / interval_s``
       (so ten 6-second samples of one server count as one sample, as a single 60-second one would);
    3. a tenant's value in a slot is the weighted mean of its servers' values in that slot (the
       paper's "average server"); a slot with no value of the tenant is missing;
    4. runs of at most ``max_fill_slots`` missing slots are filled (:func:`fill_gaps`); longer runs
       stay NaN and are listed in ``long_gaps`` (and logged as a warning).
    Tenants come out sorted by name.
    """
    if len(samples) == 0:
        raise ValueError("no utilization samples")
    ts = np.asarray(samples.timestamp_s, dtype=np.float64)
    server_names, s_code = samples.factorize("server")
    s_code = np.asarray(s_code, dtype=np.int64)
    sampling = _server_sampling(ts, s_code, len(server_names))
    measured = np.isfinite(sampling.interval_s)
    known = sampling.interval_s[measured]
    if interval_s is not None:
        step = float(interval_s)
    elif known.size:
        step = float(np.percentile(known, 50, method="lower"))
    else:
        step = infer_interval_s(ts)  # every server has a single sample: nothing else to go on
    if not step > 0:
        raise ValueError(f"interval_s must be positive, got {step}")
    own_iv = np.where(measured, sampling.interval_s, step)
    own_start = sampling.first_s
    start = float(ts.min())
    n_slots = int(np.floor((float(ts.max()) - start) / step + 0.5)) + 1
    tenants, t_code = samples.factorize("tenant")
    size = len(tenants) * n_slots
    total = np.zeros(size)
    weight = np.zeros(size)
    eps = 1e-9
    # Every server at the grid's interval (the usual case): its slot k is common slot k + its
    # offset, one slot per sample, weight 1.
    uniform = bool(np.all(own_iv == step))
    offset_slots = np.floor((own_start - start) / step + 0.5 + eps)
    offset_slots = np.where(np.isfinite(offset_slots), offset_slots, 0).astype(np.int64)
    # In chunks of rows, so the temporaries stay small on tens of millions of samples.
    for lo in range(0, len(ts), _CHUNK_ROWS):
        hi = min(len(ts), lo + _CHUNK_ROWS)
        code = s_code[lo:hi]
        if uniform:
            s0 = own_start[code]
            slot = np.floor((ts[lo:hi] - s0) / step + 0.5).astype(np.int64) + offset_slots[code]
            flat = t_code[lo:hi].astype(np.int64) * n_slots + np.clip(slot, 0, n_slots - 1)
            total += np.bincount(flat, weights=samples.cpu[lo:hi], minlength=size)
            weight += np.bincount(flat, minlength=size)
            continue
        iv, s0 = own_iv[code], own_start[code]
        # 2. The server's own slot, then the common slots it covers (halves round up).
        own_slot_s = s0 + np.floor((ts[lo:hi] - s0) / iv + 0.5) * iv - start
        c_lo = np.floor((own_slot_s - iv / 2) / step + eps).astype(np.int64) + 1
        c_hi = np.floor((own_slot_s + iv / 2) / step + eps).astype(np.int64)
        finer = iv < step  # (a coarser or equal server covers at least one slot)
        nearest = np.floor(own_slot_s / step + 0.5).astype(np.int64)
        c_lo = np.clip(np.where(finer, nearest, c_lo), 0, n_slots - 1)
        c_hi = np.clip(np.where(finer, nearest, c_hi), 0, n_slots - 1)
        w = np.where(finer, iv / step, 1.0)
        row = t_code[lo:hi].astype(np.int64) * n_slots
        value = samples.cpu[lo:hi]
        count = c_hi - c_lo + 1
        # 3. Weighted sum and weight per (tenant, slot): each sample to each slot it covers, in
        # pieces of at most _CHUNK_ROWS entries (a coarse server covers several slots per sample).
        ends = np.cumsum(count)
        a = 0
        while a < len(count):
            b = max(a + 1, int(np.searchsorted(ends, (ends[a - 1] if a else 0) + _CHUNK_ROWS, side="right")))
            n = count[a:b]
            rep = np.repeat(np.arange(a, b), n)
            offset = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
            flat = row[rep] + c_lo[rep] + offset
            total += np.bincount(flat, weights=(value * w)[rep], minlength=size)
            weight += np.bincount(flat, weights=w[rep], minlength=size)
            a = b
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (total / weight).reshape(len(tenants), n_slots)
    del total, weight
    # 4. Short gaps filled, long gaps reported.
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
    series = TenantSeries(
        tenants=tuple(str(t) for t in names),
        start_s=start,
        interval_s=step,
        cpu=filled,
        long_gaps=long_gaps,
    )
    summary = SamplingSummary(
        interval_s=step,
        interval_given=interval_s is not None,
        server_interval_s={
            str(server_names[i]): float(sampling.interval_s[i]) for i in np.flatnonzero(measured)
        },
        tenant_window_s=_tenant_windows(sampling, np.asarray(t_code), names),
        span_s=(start, float(ts.max())),
        step_p10_p90_s=(
            (
                float(np.percentile(sampling.step_sample_s, 10)),
                float(np.percentile(sampling.step_sample_s, 90)),
            )
            if sampling.step_sample_s.size
            else (step, step)
        ),
    )
    for note in summary.notes():
        logger.info("%s", note)
    return series, summary


def _tenant_windows(
    sampling: _ServerSampling, t_code: np.ndarray, names: list[str]
) -> dict[str, tuple[float, float]]:
    """Each tenant's first and last sample, from its servers' (a server belongs to one tenant)."""
    present = np.flatnonzero(np.isfinite(sampling.first_s))
    tenant = t_code[sampling.first_row[present]].astype(np.int64)
    first = np.full(len(names), np.inf)
    last = np.full(len(names), -np.inf)
    np.minimum.at(first, tenant, sampling.first_s[present])
    np.maximum.at(last, tenant, sampling.last_s[present])
    return {str(names[i]): (float(first[i]), float(last[i])) for i in range(len(names))}


def tenant_series(
    samples: UtilizationSamples, *, interval_s: float | None = None, max_fill_slots: int = 3
) -> TenantSeries:
    """Each tenant's average-server CPU series on a regular grid (:func:`build_tenant_series`
    without the summary)."""
    return build_tenant_series(samples, interval_s=interval_s, max_fill_slots=max_fill_slots)[0]


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


def server_reimage_rates(
    events: ReimageEvents, inventory: Inventory, *, span_s: float | None = None
) -> np.ndarray:
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
    total = np.bincount(
        code, weights=np.asarray(inventory.storage_gb, dtype=np.float64), minlength=len(tenants)
    )
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
