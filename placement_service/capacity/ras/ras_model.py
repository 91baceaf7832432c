"""The aggregated RAS model (phase 1) for HiGHS: integer server counts per (class, entity) pair.

Worst-MSB term (expressions 4 and 6) is linearised exactly and without binaries: one continuous
``b_r`` (the embedded buffer, RRU) with ``b_r >= cap_{r,F}`` for every MSB ``F`` where ``r`` has
eligible classes, and ``total_r - b_r >= C_r``. Because ``b_r`` is only bounded from below and
costed, any optimum sets it to the largest MSB capacity, so the LP relaxation is as tight as the
integer counts allow (no big-M). Soft slacks keep the model always feasible; ``solve`` reports them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from placement_service.capacity.highs import highs_for, pass_model
from placement_service.capacity.ras.aggregate import Aggregate
from placement_service.capacity.ras.domain import Request, Settings
from placement_service.capacity.ras.rows import ConstraintRows

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelIndex:
    """Column offsets of each variable family and the group arrays the completion needs."""

    n_cols: int
    y0: int  # y[p]: servers of pair p's class given to its entity (integer)
    b0: int  # b[r]: embedded buffer of reservation r, RRU
    s0: int  # s[e]: shortfall of entity e (RRU for reservations, servers for shared buffers)
    d_pairs: np.ndarray  # pairs with previous servers (stability columns exist for these)
    di0: int  # d_idle[k]: idle servers leaving pair d_pairs[k]
    du0: int  # d_inuse[k]: in-use servers leaving pair d_pairs[k]
    msb_group: np.ndarray  # per reservation pair: (reservation, MSB) group id, -1 for buffer pairs
    msb_group_res: np.ndarray  # per group: reservation
    aff_pairs_group: np.ndarray  # per reservation pair: (reservation, datacenter) affinity group or -1
    aff_res: np.ndarray  # per affinity group: reservation
    aff_share: np.ndarray  # per affinity group: target share A_{r,D}
    ah0: int  # a_hi[g]: RRU above (A + theta) * total
    al0: int  # a_lo[g]: RRU below (A - theta) * total
    spread_groups: np.ndarray  # msb groups with a spread limit
    spread_limit_rru: np.ndarray  # alpha^F * C_r per spread group
    e0: int  # e[k]: RRU of spread group k above its limit


@dataclass(frozen=True)
class RasModel:
    agg: Aggregate
    index: ModelIndex
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    matrix: sp.csc_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    theta: float


@dataclass(frozen=True)
class ModelResult:
    status: str
    x: np.ndarray | None
    objective: float
    bound: float
    wall_s: float


def build(agg: Aggregate, requests: tuple[Request, ...], settings: Settings) -> RasModel:
    """Build the phase-1 model in fixed sections: data, variables, constraints, objective."""
    # ---- data
    R, P = agg.n_reservations, agg.n_pairs
    n_msb = agg.n_msb
    is_res = agg.pair_entity < R
    v = agg.pair_value
    grp_key = np.where(is_res, agg.pair_entity * n_msb + agg.class_msb[agg.pair_class], -1)
    ukeys, ginv = np.unique(grp_key[is_res], return_inverse=True)
    msb_group = np.full(P, -1, dtype=np.int64)
    msb_group[is_res] = ginv
    msb_group_res = (ukeys // n_msb).astype(np.int64)
    theta = settings.affinity_tolerance
    aff_key_list: list[tuple[int, int, float]] = []
    aff_pairs_group = np.full(P, -1, dtype=np.int64)
    # affinity groups: one per (reservation with affinity, datacenter with a positive share)
    pair_dc = agg.class_dc[agg.pair_class]
    for r, req in enumerate(requests):
        if req.datacenter_affinity is None:
            continue
        mask_r = agg.pair_entity == r
        for d in np.unique(pair_dc[mask_r]):
            share = float(agg.dc_share[r, int(d)])
            aff_pairs_group[mask_r & (pair_dc == d)] = len(aff_key_list)
            aff_key_list.append((r, int(d), share))
    aff_res = np.array([k[0] for k in aff_key_list], dtype=np.int64)
    aff_share = np.array([k[2] for k in aff_key_list], dtype=float)
    limits = np.array(
        [
            (req.msb_spread_limit if req.msb_spread_limit is not None else settings.msb_spread_limit) or -1.0
            for req in requests
        ]
    )
    spread_groups = np.flatnonzero(limits[msb_group_res] > 0) if R else np.zeros(0, np.int64)
    spread_limit_rru = limits[msb_group_res[spread_groups]] * agg.capacity_rru[msb_group_res[spread_groups]]

    # ---- variables (column offsets)
    d_pairs = np.flatnonzero(agg.pair_prev > 0)
    G, A, S = len(msb_group_res), len(aff_res), len(spread_groups)
    y0 = 0  # y[p] integer server counts
    b0 = y0 + P  # b[r] embedded buffer, RRU
    s0 = b0 + R  # s[e] shortfall slack
    di0 = s0 + agg.n_entities  # d_idle[k] idle departures
    du0 = di0 + len(d_pairs)  # d_inuse[k] in-use departures
    ah0 = du0 + len(d_pairs)  # a_hi[g] affinity excess
    al0 = ah0 + A  # a_lo[g] affinity deficit
    e0 = al0 + A  # e[k] MSB spread excess
    n_cols = e0 + S
    lower = np.zeros(n_cols)
    upper = np.full(n_cols, np.inf)
    upper[y0 : y0 + P] = agg.class_size[agg.pair_class]
    fixed_pair = agg.fixed[agg.pair_entity]
    lower[y0 : y0 + P][fixed_pair] = agg.pair_prev[fixed_pair]
    upper[y0 : y0 + P][fixed_pair] = agg.pair_prev[fixed_pair]
    upper[di0 : di0 + len(d_pairs)] = agg.pair_prev_idle[d_pairs]
    upper[du0 : du0 + len(d_pairs)] = agg.pair_prev[d_pairs] - agg.pair_prev_idle[d_pairs]

    constraints = ConstraintRows()
    add = constraints.add

    pidx = np.arange(P)
    res_p = pidx[is_res]
    # ---- constraints
    # (5) one place per server: sum_e y[c, e] <= class size
    add(agg.pair_class, y0 + pidx, np.ones(P), np.full(agg.n_classes, -np.inf), agg.class_size.astype(float))
    # (6a) capacity after the worst MSB: sum_p v y - b_r + s_r >= C_r
    ar = np.arange(R)
    add(
        np.concatenate([agg.pair_entity[res_p], ar, ar]),
        np.concatenate([y0 + res_p, b0 + ar, s0 + ar]),
        np.concatenate([v[res_p], -np.ones(R), np.ones(R)]),
        agg.capacity_rru,
        np.full(R, np.inf),
    )
    # (6b) b_r is at least every MSB's capacity: b_r - sum_{p in (r, F)} v y >= 0
    ag = np.arange(G)
    add(
        np.concatenate([msb_group[res_p], ag]),
        np.concatenate([y0 + res_p, b0 + msb_group_res]),
        np.concatenate([-v[res_p], np.ones(G)]),
        np.zeros(G),
        np.full(G, np.inf),
    )
    # (6c) integer strengthening of the worst-MSB term (valid for integer counts): a reservation spread
    # over n_F MSBs holds in its largest MSB at least K = ceil(C / (v_max (n_F - 1))) servers, so
    # b_r >= K v_min; relaxed through the shortfall s_r once s_r >= eps = C - (K - 1) v_max (n_F - 1):
    # b_r + (K v_min / eps) s_r >= K v_min
    cut_r, cut_k, cut_eps = _buffer_cuts(agg, msb_group_res)
    if len(cut_r) and settings.integer_buffer_cut:
        add(
            np.concatenate([np.arange(len(cut_r)), np.arange(len(cut_r))]),
            np.concatenate([b0 + cut_r, s0 + cut_r]),
            np.concatenate([np.ones(len(cut_r)), cut_k / cut_eps]),
            cut_k,
            np.full(len(cut_r), np.inf),
        )
    # shared random-failure buffer per hardware type: sum y + s >= need
    buf_p = pidx[~is_res]
    H = agg.n_entities - R
    ah = np.arange(H)
    add(
        np.concatenate([agg.pair_entity[buf_p] - R, ah]),
        np.concatenate([y0 + buf_p, s0 + R + ah]),
        np.ones(len(buf_p) + H),
        agg.buffer_need.astype(float),
        np.full(H, np.inf),
    )
    # (1) departures: y + d_idle + d_inuse >= previous count
    K = len(d_pairs)
    ak = np.arange(K)
    add(
        np.concatenate([ak, ak, ak]),
        np.concatenate([y0 + d_pairs, di0 + ak, du0 + ak]),
        np.ones(3 * K),
        agg.pair_prev[d_pairs].astype(float),
        np.full(K, np.inf),
    )
    # (7) datacenter affinity, upper side: cap_{r,D} - (A + theta) * total_r - a_hi <= 0
    # (7) lower side: cap_{r,D} - (A - theta) * total_r + a_lo >= 0
    for side, (sign, a_off) in enumerate(((1.0, ah0), (-1.0, al0))):
        rr_, cc_, vv_ = [], [], []
        for g in range(A):
            r = int(aff_res[g])
            mine = pidx[agg.pair_entity == r]
            in_g = aff_pairs_group[mine] == g
            coef = v[mine] * (in_g.astype(float) - (aff_share[g] + sign * theta))
            rr_.append(np.full(len(mine) + 1, g))
            cc_.append(np.concatenate([y0 + mine, [a_off + g]]))
            vv_.append(np.concatenate([coef, [-sign]]))
        if A:
            lo = np.full(A, -np.inf) if side == 0 else np.zeros(A)
            up = np.zeros(A) if side == 0 else np.full(A, np.inf)
            add(np.concatenate(rr_), np.concatenate(cc_), np.concatenate(vv_), lo, up)
    # (3) MSB spread: cap_{r,F} - e <= alpha^F * C_r
    if S:
        sg_of_group = np.full(G, -1)
        sg_of_group[spread_groups] = np.arange(S)
        in_s = res_p[sg_of_group[msb_group[res_p]] >= 0]
        sk = sg_of_group[msb_group[in_s]]
        add(
            np.concatenate([sk, np.arange(S)]),
            np.concatenate([y0 + in_s, e0 + np.arange(S)]),
            np.concatenate([v[in_s], -np.ones(S)]),
            np.full(S, -np.inf),
            spread_limit_rru,
        )

    # ---- objective (servers): see Settings for the terms
    cost = np.zeros(n_cols)
    mean = agg.mean_rru
    cost[y0 : y0 + P][is_res] = settings.allocation_cost_per_server
    cost[b0 : b0 + R] = settings.buffer_cost_per_server / mean
    cost[s0 : s0 + R] = settings.unmet_cost_per_server / mean
    cost[s0 + R : s0 + agg.n_entities] = settings.unmet_cost_per_server
    cost[di0 : di0 + K] = settings.move_cost_idle
    cost[du0 : du0 + K] = settings.move_cost_in_use
    cost[ah0 : ah0 + A] = settings.affinity_cost_per_server / mean[aff_res] if A else 0.0
    cost[al0 : al0 + A] = settings.affinity_cost_per_server / mean[aff_res] if A else 0.0
    if S:
        cost[e0 : e0 + S] = settings.msb_spread_cost / mean[msb_group_res[spread_groups]]

    matrix = constraints.matrix(n_cols)
    row_lower, row_upper = constraints.bounds()
    index = ModelIndex(
        n_cols=n_cols, y0=y0, b0=b0, s0=s0, d_pairs=d_pairs, di0=di0, du0=du0,
        msb_group=msb_group, msb_group_res=msb_group_res, aff_pairs_group=aff_pairs_group,
        aff_res=aff_res, aff_share=aff_share, ah0=ah0, al0=al0, spread_groups=spread_groups,
        spread_limit_rru=spread_limit_rru, e0=e0,
    )  # fmt: skip
    return RasModel(
        agg=agg, index=index, cost=cost, col_lower=lower, col_upper=upper, matrix=matrix,
        row_lower=row_lower, row_upper=row_upper, theta=theta,
    )  # fmt: skip


def _buffer_cuts(agg: Aggregate, msb_group_res: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per reservation: (reservation, K * v_min, eps) of the integer buffer cut (see constraint 6c)."""
    R = agg.n_reservations
    n_f = np.bincount(msb_group_res, minlength=R)
    res_pairs = agg.pair_entity < R
    v_min = np.full(R, np.inf)
    v_max = np.zeros(R)
    np.minimum.at(v_min, agg.pair_entity[res_pairs], agg.pair_value[res_pairs])
    np.maximum.at(v_max, agg.pair_entity[res_pairs], agg.pair_value[res_pairs])
    out_r, out_k, out_e = [], [], []
    for r in range(R):
        C = agg.capacity_rru[r]
        if n_f[r] < 2 or C <= 0 or not np.isfinite(v_min[r]) or agg.fixed[r]:
            continue
        a = v_max[r] * (n_f[r] - 1)
        k = int(np.ceil(C / a - 1e-9))
        eps = C - (k - 1) * a
        if eps < 1e-3 * a:  # keep the coefficient K v_min / eps moderate: use one server less
            k -= 1
            eps += a
        if k >= 1:
            out_r.append(r)
            out_k.append(k * v_min[r])
            out_e.append(eps)
    return np.array(out_r, dtype=np.int64), np.array(out_k, dtype=float), np.array(out_e, dtype=float)


def complete(model: RasModel, y: np.ndarray) -> np.ndarray:
    """The cheapest full point for integer counts ``y``: every auxiliary at its smallest feasible value."""
    agg, ix = model.agg, model.index
    R = agg.n_reservations
    x = np.zeros(ix.n_cols)
    x[ix.y0 : ix.y0 + agg.n_pairs] = y
    is_res = agg.pair_entity < R
    contrib = agg.pair_value * y
    total = np.bincount(agg.pair_entity[is_res], weights=contrib[is_res], minlength=R)
    per_group = np.bincount(ix.msb_group[is_res], weights=contrib[is_res], minlength=len(ix.msb_group_res))
    b = np.zeros(R)
    np.maximum.at(b, ix.msb_group_res, per_group)
    x[ix.b0 : ix.b0 + R] = b
    x[ix.s0 : ix.s0 + R] = np.maximum(0.0, agg.capacity_rru - (total - b))
    counts = np.bincount(agg.pair_entity[~is_res] - R, weights=y[~is_res], minlength=agg.n_entities - R)
    x[ix.s0 + R : ix.s0 + agg.n_entities] = np.maximum(0.0, agg.buffer_need - counts)
    leave = np.maximum(0, agg.pair_prev[ix.d_pairs] - y[ix.d_pairs])
    idle = np.minimum(leave, agg.pair_prev_idle[ix.d_pairs])
    x[ix.di0 : ix.di0 + len(ix.d_pairs)] = idle
    x[ix.du0 : ix.du0 + len(ix.d_pairs)] = leave - idle
    A = len(ix.aff_res)
    if A:
        has = ix.aff_pairs_group >= 0
        cap_g = np.bincount(ix.aff_pairs_group[has], weights=contrib[has], minlength=A)
        tot_g = total[ix.aff_res]
        x[ix.ah0 : ix.ah0 + A] = np.maximum(0.0, cap_g - (ix.aff_share + model.theta) * tot_g)
        x[ix.al0 : ix.al0 + A] = np.maximum(0.0, (ix.aff_share - model.theta) * tot_g - cap_g)
    S = len(ix.spread_groups)
    if S:
        x[ix.e0 : ix.e0 + S] = np.maximum(0.0, per_group[ix.spread_groups] - ix.spread_limit_rru)
    return x


def objective(model: RasModel, x: np.ndarray) -> float:
    return float(model.cost @ x)


def solve(
    model: RasModel,
    *,
    relax: bool,
    time_limit_s: float,
    settings: Settings,
    start: np.ndarray | None = None,
) -> ModelResult:
    """Solve the LP relaxation (``relax``) or the MIP, optionally from the full point ``start``."""
    # ---- solve
    h = highs_for(time_limit_s=time_limit_s, threads=settings.threads, seed=settings.seed,
                  output=logger.isEnabledFor(logging.DEBUG), mip_rel_gap=float(settings.mip_rel_gap))
    pass_model(h, cost=model.cost, col_lower=model.col_lower, col_upper=model.col_upper, row_lower=model.row_lower,
               row_upper=model.row_upper, matrix=model.matrix,
               integer_cols=() if relax else range(model.index.y0, model.index.y0 + model.agg.n_pairs))
    if start is not None and not relax:
        sol = highspy.HighsSolution()
        sol.col_value = list(start)
        sol.value_valid = True
        h.setSolution(sol)
    t0 = time.monotonic()
    h.run()
    wall = time.monotonic() - t0
    # ---- check status
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    has_point = info.primal_solution_status == 2  # kSolutionStatusFeasible
    # ---- extract
    x = np.asarray(h.getSolution().col_value, dtype=float) if has_point else None
    obj = float(info.objective_function_value) if has_point else float("inf")
    if relax:
        bound = obj if status == "Optimal" else float("-inf")
    else:
        bound = float(info.mip_dual_bound)
    logger.info("HiGHS %s: %s, objective %.3f, bound %.3f, %.1f s", "LP" if relax else "MIP", status, obj,
                bound, wall)  # fmt: skip
    return ModelResult(status=status, x=x, objective=obj, bound=bound, wall_s=wall)
