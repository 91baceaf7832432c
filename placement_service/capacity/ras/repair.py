"""Integer counts from a fractional point: round down, then repair greedily.

Rounding down keeps every class within its size and frees the fractional servers. Repair then adds
servers to each entity still short of its need, one choice at a time, scoring each candidate class
by (all in servers):

    score = buffer_cost * gain / mean_rru + restore_saving - affinity_cost * breaks_affinity
            + 0.01 * fractional_part

where ``gain = v - max(0, cap_F + v - M)`` is how much the capacity left after the worst MSB grows
(``v`` the server's RRU value, ``cap_F`` its MSB's current capacity, ``M`` the largest MSB's), and
``restore_saving`` is the move cost saved by giving back a server the entity held before. While a
class's MSB stays below the largest one the step adds several servers at once.

The same routine from the previous counts (no LP) is the constructive warm start: keep every server
that may stay, then repair.
"""

from __future__ import annotations

import math

import numpy as np

from placement_service.capacity.ras.aggregate import Aggregate
from placement_service.capacity.ras.domain import Settings


def round_and_repair(agg: Aggregate, y_frac: np.ndarray, settings: Settings) -> np.ndarray:
    """Integer counts per pair: floor of ``y_frac`` (fixed entities at their previous counts), repaired."""
    y = np.floor(np.asarray(y_frac, dtype=float) + 1e-6).astype(np.int64)
    y = np.clip(y, 0, agg.class_size[agg.pair_class])
    fixed = agg.fixed[agg.pair_entity]
    y[fixed] = agg.pair_prev[fixed]
    used = np.bincount(agg.pair_class, weights=y, minlength=agg.n_classes).astype(np.int64)
    over = np.flatnonzero(used > agg.class_size)
    for c in over:  # only possible from hand-made points; take back from non-fixed pairs
        for p in np.flatnonzero((agg.pair_class == c) & ~fixed):
            take = min(int(y[p]), int(used[c] - agg.class_size[c]))
            y[p] -= take
            used[c] -= take
    free = agg.class_size - used
    frac = np.asarray(y_frac, dtype=float) - y
    # largest remainder: the fractional parts round up where they are largest (trimmed afterwards)
    # (reservations with a datacenter affinity round every fraction up, first: their shares are tight)
    has_aff = ~np.isnan(agg.dc_share[:, 0]) if agg.n_dc and agg.n_reservations else np.zeros(0, bool)
    aff_pair = np.zeros(agg.n_pairs, dtype=bool)
    res_pair = agg.pair_entity < agg.n_reservations
    aff_pair[res_pair] = has_aff[agg.pair_entity[res_pair]]
    for p in np.argsort(-(frac + aff_pair * (frac > 1e-6)), kind="stable"):
        if frac[p] < 0.5 and not (aff_pair[p] and frac[p] > 1e-6):
            break
        c = agg.pair_class[p]
        if free[c] > 0 and not fixed[p]:
            y[p] += 1
            free[c] -= 1
            frac[p] = 0.0
    by_entity = _pairs_by_entity(agg)
    for r in range(agg.n_reservations):  # give back what rounding up made surplus before repairing
        if not agg.fixed[r]:
            _trim(agg, r, by_entity[r], y, free, settings)
    order = _entity_order(agg, y, free, by_entity)
    for e in order:
        if agg.fixed[e]:
            continue
        if e < agg.n_reservations:
            _repair_reservation(agg, e, by_entity[e], y, free, frac, settings)
        else:
            _repair_buffer(agg, e, by_entity[e], y, free, settings)
    for r in range(agg.n_reservations):
        if not agg.fixed[r]:
            _trim(agg, r, by_entity[r], y, free, settings)
    return y


def greedy(agg: Aggregate, settings: Settings) -> np.ndarray:
    """Constructive solution: keep previous servers where still eligible, then repair."""
    return round_and_repair(agg, agg.pair_prev.astype(float), settings)


def _pairs_by_entity(agg: Aggregate) -> list[np.ndarray]:
    order = np.argsort(agg.pair_entity, kind="stable")
    bounds = np.searchsorted(agg.pair_entity[order], np.arange(agg.n_entities + 1))
    return [order[bounds[e] : bounds[e + 1]] for e in range(agg.n_entities)]


def _entity_order(agg: Aggregate, y: np.ndarray, free: np.ndarray, by_entity: list[np.ndarray]) -> list[int]:
    """Scarcest first: entities whose eligible free capacity covers their deficit the fewest times."""
    ratios = []
    for e in range(agg.n_entities):
        pairs = by_entity[e]
        supply = float(np.sum(free[agg.pair_class[pairs]] * agg.pair_value[pairs]))
        if e < agg.n_reservations:
            need = agg.capacity_rru[e] - _after_worst_msb(agg, pairs, y)
        else:
            need = float(agg.buffer_need[e - agg.n_reservations] - y[pairs].sum())
        ratios.append(supply / need if need > 1e-9 else math.inf)
    return [int(e) for e in np.argsort(ratios, kind="stable")]


def _after_worst_msb(agg: Aggregate, pairs: np.ndarray, y: np.ndarray) -> float:
    contrib = agg.pair_value[pairs] * y[pairs]
    per_msb = np.bincount(agg.class_msb[agg.pair_class[pairs]], weights=contrib, minlength=agg.n_msb)
    return float(contrib.sum() - (per_msb.max() if len(per_msb) else 0.0))


def _repair_reservation(
    agg: Aggregate, r: int, pairs: np.ndarray, y: np.ndarray, free: np.ndarray, frac: np.ndarray,
    settings: Settings,
) -> None:  # fmt: skip
    if len(pairs) == 0:
        return
    v = agg.pair_value[pairs]
    cls = agg.pair_class[pairs]
    msb = agg.class_msb[cls]
    dc = agg.class_dc[cls]
    cap_f = np.bincount(msb, weights=v * y[pairs], minlength=agg.n_msb)
    cap_d = np.bincount(dc, weights=v * y[pairs], minlength=agg.n_dc)
    total = float(cap_f.sum())
    shares = agg.dc_share[r]
    has_aff = not np.isnan(shares[0]) if len(shares) else False
    theta = settings.affinity_tolerance
    mean = agg.mean_rru[r]
    prev = agg.pair_prev[pairs]
    prev_idle = agg.pair_prev_idle[pairs]
    C = agg.capacity_rru[r]
    for _ in range(1_000_000):
        top = float(cap_f.max())
        deficit = C - (total - top)
        if deficit <= 1e-9:
            break
        cand = free[cls] > 0
        if not cand.any():
            if any(_free_up(agg, int(c), y, free) for c in np.unique(cls)):
                continue
            break
        gain = v - np.maximum(0.0, cap_f[msb] + v - top)
        leaving = prev - y[pairs]
        saving = np.where(
            leaving > 0,
            np.where(leaving > prev_idle, settings.move_cost_in_use, settings.move_cost_idle),
            0.0,
        )
        score = settings.buffer_cost_per_server * gain / mean + saving + 0.01 * frac[pairs]
        score += 1e-6 * free[cls]
        if has_aff:
            breaks = cap_d[dc] + v > (shares[dc] + theta) * (total + v) + 1e-9
            score -= settings.affinity_cost_per_server * breaks
        score = np.where(cand, score, -np.inf)
        i = int(np.argmax(score))
        room = top - cap_f[msb[i]]
        k = 1
        if gain[i] >= v[i] - 1e-9:  # its MSB stays at or below the largest: add up to the room left
            k_max = min(int(free[cls[i]]), max(1, math.ceil(deficit / v[i])), max(1, math.floor(room / v[i])))
            k = int(min(k_max, leaving[i])) if leaving[i] > 0 else int(k_max)
        p = pairs[i]
        y[p] += k
        free[cls[i]] -= k
        frac[p] = 0.0
        cap_f[msb[i]] += k * v[i]
        cap_d[dc[i]] += k * v[i]
        total += k * v[i]
    if has_aff:
        _repair_affinity(agg, pairs, y, free, shares, theta, cap_f, cap_d, C)


def _repair_affinity(
    agg: Aggregate, pairs: np.ndarray, y: np.ndarray, free: np.ndarray, shares: np.ndarray, theta: float,
    cap_f: np.ndarray, cap_d: np.ndarray, capacity: float,
) -> None:  # fmt: skip
    """Add servers to the datacenter furthest below (A - theta) * total (or outside the one above
    (A + theta) * total), least buffer growth first, until every share is within its tolerance."""
    v = agg.pair_value[pairs]
    cls = agg.pair_class[pairs]
    msb = agg.class_msb[cls]
    dc = agg.class_dc[cls]
    for _ in range(100_000):
        total = float(cap_d.sum())
        low = (shares - theta) * total - cap_d
        high = cap_d - (shares + theta) * total
        if low.max() <= 1e-9 and high.max() <= 1e-9:
            return
        if low.max() > 1e-9:
            target = dc == int(np.argmax(low))
        else:
            target = dc != int(np.argmax(high))
        cand = np.flatnonzero(target & (free[cls] > 0))
        if len(cand) == 0 and any(_free_up(agg, int(c), y, free) for c in np.unique(cls[target])):
            continue
        if len(cand) == 0:  # nothing to add there: give back a server elsewhere if capacity allows
            order = np.sort(cap_f)
            top, second = float(order[-1]), float(order[-2]) if len(order) > 1 else 0.0
            new_top = np.where(cap_f[msb] >= top, np.maximum(cap_f[msb] - v, second), top)
            ok = ~target & (y[pairs] > agg.pair_prev[pairs]) & ((total - v) - new_top >= capacity - 1e-9)
            drop = np.flatnonzero(ok)
            if len(drop) == 0:
                return
            i = int(drop[int(np.argmax(top - new_top[drop]))])
            y[pairs[i]] -= 1
            free[cls[i]] += 1
            cap_f[msb[i]] -= v[i]
            cap_d[dc[i]] -= v[i]
            continue
        top = float(cap_f.max())
        growth = np.maximum(0.0, cap_f[msb[cand]] + v[cand] - top)
        i = int(cand[int(np.argmin(growth - 1e-6 * free[cls[cand]]))])
        y[pairs[i]] += 1
        free[cls[i]] -= 1
        cap_f[msb[i]] += v[i]
        cap_d[dc[i]] += v[i]


def _trim(agg: Aggregate, r: int, pairs: np.ndarray, y: np.ndarray, free: np.ndarray, settings: Settings) -> None:
    """Give back servers the reservation does not need, largest MSB first (shrinks its buffer).

    Only servers it did not hold before are given back (no move); a removal must keep
    ``total - max_F cap_F >= C``; the one saving the most (allocation + buffer cost) goes first.
    """
    if len(pairs) == 0:
        return
    v = agg.pair_value[pairs]
    cls = agg.pair_class[pairs]
    msb = agg.class_msb[cls]
    cap_f = np.bincount(msb, weights=v * y[pairs], minlength=agg.n_msb)
    C = agg.capacity_rru[r]
    mean = agg.mean_rru[r]
    has_aff = bool(len(agg.dc_share[r])) and not np.isnan(agg.dc_share[r][0])
    if has_aff:
        return  # removals could break the affinity shares; the model handles those reservations
    for _ in range(1_000_000):
        total = float(cap_f.sum())
        order = np.argsort(cap_f)
        top, second = float(cap_f[order[-1]]), float(cap_f[order[-2]]) if len(cap_f) > 1 else 0.0
        if total - top - C <= 1e-9:
            return
        removable = y[pairs] > agg.pair_prev[pairs]
        if not removable.any():
            return
        new_cap = cap_f[msb] - v
        new_top = np.where(msb == order[-1], np.maximum(new_cap, second), top)
        ok = removable & ((total - v) - new_top >= C - 1e-9)
        if not ok.any():
            return
        gain = settings.allocation_cost_per_server + settings.buffer_cost_per_server * (top - new_top) / mean
        i = int(np.argmax(np.where(ok, gain, -np.inf)))
        y[pairs[i]] -= 1
        free[cls[i]] += 1
        cap_f[msb[i]] -= v[i]


def _free_up(agg: Aggregate, c: int, y: np.ndarray, free: np.ndarray) -> bool:
    """Free one server of class ``c`` by moving a shared-buffer server of ``c`` to another class of the
    same hardware type that has a free server (the buffer only needs a count per hardware type)."""
    e = agg.n_reservations + int(agg.class_hw[c])
    pairs = np.flatnonzero(agg.pair_entity == e)
    here = pairs[agg.pair_class[pairs] == c]
    if len(here) == 0 or y[here[0]] <= 0:
        return False
    others = pairs[(agg.pair_class[pairs] != c) & (free[agg.pair_class[pairs]] > 0)]
    if len(others) == 0:
        return False
    q = int(others[int(np.argmax(free[agg.pair_class[others]]))])
    y[here[0]] -= 1
    free[c] += 1
    y[q] += 1
    free[agg.pair_class[q]] -= 1
    return True


def _repair_buffer(
    agg: Aggregate, e: int, pairs: np.ndarray, y: np.ndarray, free: np.ndarray, settings: Settings
) -> None:
    """Shared buffer: restore previous buffer servers first, then spread over MSBs (fewest first)."""
    need = int(agg.buffer_need[e - agg.n_reservations]) - int(y[pairs].sum())
    if need <= 0 or len(pairs) == 0:
        return
    cls = agg.pair_class[pairs]
    leaving = agg.pair_prev[pairs] - y[pairs]
    for i in np.argsort(-leaving, kind="stable"):
        if leaving[i] <= 0 or need <= 0:
            break
        k = int(min(leaving[i], free[cls[i]], need))
        y[pairs[i]] += k
        free[cls[i]] -= k
        need -= k
    while need > 0:
        cand = np.flatnonzero(free[cls] > 0)
        if len(cand) == 0:
            return
        per_msb = np.bincount(agg.class_msb[cls], weights=y[pairs], minlength=agg.n_msb)
        i = cand[np.lexsort((-free[cls[cand]], per_msb[agg.class_msb[cls[cand]]]))[0]]
        y[pairs[i]] += 1
        free[cls[i]] -= 1
        need -= 1
