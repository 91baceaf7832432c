"""Second phase: rack spread (expression 2) for the reservations with the worst rack spread.

Phase 1 fixed how many servers of each class (hardware x datacenter x MSB) every entity holds; that
already guarantees capacity after any MSB loss, the shared buffers and the affinity. Phase 2 only
chooses *which racks* inside each class, for the reservations whose rack excess is worst
(``sum_k max(0, cap_{r,k} - alpha^K C_r)``, in servers), at most ``rack_phase_share`` of them:

  variables   z[r, c, k] >= 0 integer: servers of class c in rack k given to reservation r
              e[r, k] >= 0: RRU of r in rack k above alpha^K C_r
              d_idle / d_inuse[r, c, k] >= 0: servers of r's previous ones in (c, k) that leave it
  constraints sum_k z[r, c, k] = y[c, r]                       (phase-1 counts unchanged)
              sum_r z[r, c, k] <= pool[c, k]                   (servers of the selected reservations
                                                                 and unassigned ones in (c, k))
              sum_c v z[r, c, k] - e[r, k] <= alpha^K C_r      (rack spread)
              z + d_idle + d_inuse >= previous[r, c, k]        (moves, idle ones first)
  objective   rack_spread_cost * e / mean_rru + move costs
Servers of the pool that no selected reservation takes become unassigned (harvestable).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping

import highspy
import numpy as np

from placement_service.capacity.highs import highs_for
from placement_service.capacity.ras.aggregate import Aggregate
from placement_service.capacity.ras.domain import Region, Request, Settings
from placement_service.capacity.ras.rows import ConstraintRows

logger = logging.getLogger(__name__)


def rack_excess_servers(region: Region, req: Request, members: np.ndarray, limit: float) -> float:
    """sum over racks of max(0, cap_k - limit * C_r), in servers (RRU / mean RRU)."""
    value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
    per_rack = np.bincount(region.rack[members], weights=value[region.hardware[members]], minlength=len(region.rack_names))
    return float(np.maximum(0.0, per_rack - limit * req.capacity_rru).sum() / req.mean_rru())


def improve(
    region: Region, agg: Aggregate, requests: tuple[Request, ...], settings: Settings, assign: np.ndarray
) -> tuple[np.ndarray, tuple[Mapping[str, object], ...]]:
    """Re-place the worst-spread reservations over racks; returns the new assignment and a phase record."""
    t0 = time.monotonic()
    # ---- data: pick the reservations with the worst rack excess
    limits = [r.rack_spread_limit if r.rack_spread_limit is not None else settings.rack_spread_limit for r in requests]
    excess = np.array([
        rack_excess_servers(region, req, np.flatnonzero(assign == r), limits[r]) if not agg.fixed[r] else 0.0
        for r, req in enumerate(requests)
    ])  # fmt: skip
    n_pick = math.ceil(settings.rack_phase_share * len(requests))
    cls = agg.server_class
    # size budget: a reservation brings about (racks of its classes) variables; worst first until full
    class_racks = np.bincount(np.unique(cls[cls >= 0] * len(region.rack_names) + region.rack[cls >= 0])
                              // len(region.rack_names), minlength=agg.n_classes)  # fmt: skip
    chosen: list[int] = []
    budget = settings.rack_phase_max_vars
    for r in np.argsort(-excess, kind="stable")[:n_pick]:
        if excess[r] <= 1e-9:
            break
        size = int(class_racks[np.unique(cls[assign == r])].sum())
        if size > budget:
            continue
        budget -= size
        chosen.append(int(r))
    if not chosen or settings.rack_phase_share <= 0:
        return assign, ()
    sel = np.zeros(agg.n_entities, dtype=bool)
    sel[chosen] = True
    in_pool = (cls >= 0) & ((assign == -1) | ((assign >= 0) & sel[np.maximum(assign, 0)]))
    pool_idx = np.flatnonzero(in_pool)
    # cells (class, rack) of the pool, and the (reservation, cell) variables
    cell_key = cls[pool_idx] * len(region.rack_names) + region.rack[pool_idx]
    cells, cell_of = np.unique(cell_key, return_inverse=True)
    cell_class = cells // len(region.rack_names)
    cell_rack = cells % len(region.rack_names)
    cell_size = np.bincount(cell_of, minlength=len(cells))
    var_r, var_cell, var_val, var_prev, var_prev_idle = [], [], [], [], []
    in_use = region.in_use.astype(bool)
    for r in chosen:
        value = np.array([requests[r].rru.get(h, 0.0) for h in region.hardware_names])
        held_classes = np.unique(cls[assign == r])
        ok = np.flatnonzero(np.isin(cell_class, held_classes))
        prev_here = agg.prev_entity[pool_idx] == r
        prev_cnt = np.bincount(cell_of[prev_here], minlength=len(cells))
        prev_idle = np.bincount(cell_of[prev_here & ~in_use[pool_idx]], minlength=len(cells))
        var_r.append(np.full(len(ok), r))
        var_cell.append(ok)
        var_val.append(value[agg.class_hw[cell_class[ok]]])
        var_prev.append(prev_cnt[ok])
        var_prev_idle.append(prev_idle[ok])
    vr, vc = np.concatenate(var_r), np.concatenate(var_cell)
    vv, vp, vpi = np.concatenate(var_val), np.concatenate(var_prev), np.concatenate(var_prev_idle)
    n_vars = len(vr)
    if n_vars == 0 or n_vars > settings.rack_phase_max_vars:
        return assign, ({"phase": "racks", "skipped": True, "variables": n_vars},)
    # ---- variables: z (integer), e per (r, rack), d_idle and d_inuse per z
    rk_key = vr * len(region.rack_names) + cell_rack[vc]
    rks, rk_of = np.unique(rk_key, return_inverse=True)
    rk_res = rks // len(region.rack_names)
    z0, e0 = 0, n_vars
    di0 = e0 + len(rks)
    du0 = di0 + n_vars
    n_cols = du0 + n_vars
    lower, upper = np.zeros(n_cols), np.full(n_cols, np.inf)
    upper[z0:e0] = cell_size[vc]
    upper[di0:du0] = vpi
    upper[du0:] = vp - vpi
    constraints = ConstraintRows()
    add = constraints.add

    iv = np.arange(n_vars)
    # ---- constraints
    # phase-1 counts per (reservation, class) are kept
    rc_key = vr * agg.n_classes + cell_class[vc]
    rcs, rc_of = np.unique(rc_key, return_inverse=True)
    held = assign >= 0
    held_count = np.bincount(assign[held] * agg.n_classes + cls[held], minlength=agg.n_entities * agg.n_classes)
    target = held_count[rcs].astype(float)
    add(rc_of, z0 + iv, np.ones(n_vars), target, target)
    # each cell holds at most its pool servers
    add(vc, z0 + iv, np.ones(n_vars), np.full(len(cells), -np.inf), cell_size.astype(float))
    # rack spread: sum_c v z - e <= alpha C
    lim = np.array([limits[r] * requests[r].capacity_rru for r in rk_res])
    add(np.concatenate([rk_of, np.arange(len(rks))]), np.concatenate([z0 + iv, e0 + np.arange(len(rks))]),
        np.concatenate([vv, -np.ones(len(rks))]), np.full(len(rks), -np.inf), lim)  # fmt: skip
    # departures from the previous assignment: z + d_idle + d_inuse >= previous
    add(np.concatenate([iv, iv, iv]), np.concatenate([z0 + iv, di0 + iv, du0 + iv]), np.ones(3 * n_vars),
        vp.astype(float), np.full(n_vars, np.inf))  # fmt: skip
    # ---- objective
    cost = np.zeros(n_cols)
    cost[e0:di0] = settings.rack_spread_cost / np.array([requests[r].mean_rru() for r in rk_res])
    cost[di0:du0] = settings.move_cost_idle
    cost[du0:] = settings.move_cost_in_use
    # ---- solve
    matrix = constraints.matrix(n_cols)
    n_rows = constraints.n_rows
    h = highs_for(time_limit_s=10.0, threads=int(settings.threads), seed=0, output=False, mip_rel_gap=0.01)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, n_rows
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, lower, upper
    lp.row_lower_, lp.row_upper_ = constraints.bounds()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_cols, n_rows
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n_vars + [highspy.HighsVarType.kContinuous] * (n_cols - n_vars)
    h.passModel(lp)
    h.run()
    # ---- check status
    status = h.modelStatusToString(h.getModelStatus())
    if h.getInfo().primal_solution_status != 2:
        return assign, ({"phase": "racks", "status": status, "wall_s": time.monotonic() - t0},)
    # ---- extract: concrete servers per (reservation, cell), previous ones (in use first) kept first
    z = np.rint(np.asarray(h.getSolution().col_value)[z0:e0]).astype(np.int64)
    before = sum(excess[r] for r in chosen)
    out = assign.copy()
    out[pool_idx] = -1
    for cell in range(len(cells)):
        servers = pool_idx[cell_of == cell]
        taken = np.zeros(len(servers), dtype=bool)
        jobs = [(int(vr[j]), int(z[j])) for j in np.flatnonzero((vc == cell) & (z > 0))]
        need = {}
        for r, k in jobs:  # 1. each keeps its previous servers (in-use first)
            mine = np.flatnonzero((agg.prev_entity[servers] == r) & ~taken)
            mine = mine[np.argsort(~in_use[servers[mine]], kind="stable")][:k]
            taken[mine] = True
            out[servers[mine]] = r
            need[r] = k - len(mine)
        for r, k in need.items():  # 2. the rest: servers nobody held before, idle first
            rest = np.flatnonzero(~taken)
            rest = rest[np.lexsort((in_use[servers[rest]], agg.prev_entity[servers[rest]] >= 0))][:k]
            taken[rest] = True
            out[servers[rest]] = r
    after = sum(rack_excess_servers(region, requests[r], np.flatnonzero(out == r), limits[r]) for r in chosen)
    logger.info("rack phase: %d reservations, excess %.1f -> %.1f servers", len(chosen), before, after)
    return out, ({"phase": "racks", "status": status, "reservations": len(chosen), "variables": n_vars,
                  "rack_excess_before": before, "rack_excess_after": after, "wall_s": time.monotonic() - t0},)  # fmt: skip
