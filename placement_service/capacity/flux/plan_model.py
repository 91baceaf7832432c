"""The joint capacity and traffic plan (the appendix's formulation) as one HiGHS linear model.

Sets: regions r, services s, hardware h, products p, timesteps t (t0 = baseline). Capacity columns
exist only for the (service, hardware) pairs k the fungibility ratios allow. Every absolute value
and max is linearised with an auxiliary column bounded from below by each side; each auxiliary is
costed, so at an optimum it equals the absolute value / max it stands for. No integer columns are
needed: shares and RRUs are continuous (``integer_capacity`` makes c whole RRUs when asked).

Minimise (weights in ``Weights``; capacity terms per pool, see there)
  (2) e1 sum |x[p,r,t] - xi[p,r]|             dx >= x - xi, dx >= xi - x
  (3) e2 sum_{p,t} max_r x[p,r,t]               m[p,t] >= x[p,r,t]
  (4) e3 sum d[r,h,t]
  (5) e4 sum o[r,h,t]
  (6) e5 sum |res[s,r,t]|                       a >= res, a >= -res
  (7) e6 sum |spare[r,h,t] - w[r,h,t] sum_r' spare[r',h,t]|   w = region's share of h's supply
  + capacity_hold * sum c[k,r,t]                 (keeps c at the requirement unless a goal pays)
Subject to
  (8)  t0 columns fixed to the baseline: c = kappa, x = xi, res = rho0
  (9)  sum_h ratio[s,h] c[s,r,h,t] >= sum_p phi[s,p,t] x[p,r,t] + res[s,r,t] + fixed_growth[s,r,t]
       (not for opted-out services, whose capacity stays at the baseline)
  (10) res[s,r,t] >= min(rho0[s,r], 0)          (a column bound; = rho0 when the residual is kept)
  (11) sum_s c[s,r,h,t] + spare[r,h,t] - d[r,h,t] = supply[r,h,t]
  (12) sum_r x[p,r,t] = 1 + tau[p,t]
  (13) inorganic growth folded into phi (see ``domain.growth_factors``)
  (14) o[r,h,t] = sum_s dn[s,r,h,t],  dn >= c[t-1] - c[t],  dn >= 0
  (15) sum_s c[s,r,h,t] + o[r,h,t] - d[r,h,t] <= max(supply[r,h,t-1], supply[r,h,t])

(14) as written uses an indicator ``[c_t < c_{t-1}]``; ``dn >= max(0, c_{t-1} - c_t)`` is its linear
form. It is conservative: any feasible dn is at least the true downsize, so (15) with dn implies (15)
with the true double occupancy; at an optimum dn is exactly the downsize (it is costed). (15) is the
spare-pool form ``spare + growth >= o`` written against the supply present during the upsize and
shift phases: hardware leaving at t is decommissioned after the downsizes of step t, hardware
arriving at t is installed before its upsizes (inorganic growth is part of c here, so it is not
counted as headroom: conservative).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from placement_service.capacity.flux.domain import Instance, baseline_residual, growth_factors, residual_floor
from placement_service.capacity.ras.rows import ConstraintRows


@dataclass(frozen=True)
class Index:
    """Column offsets; every family is laid out as its named axes in order (t last)."""

    pairs_s: np.ndarray  # (K,) service of pair k
    pairs_h: np.ndarray  # (K,) hardware of pair k
    x0: int  # x[p, r, t]
    c0: int  # c[k, r, t]
    res0: int  # res[s, r, t]
    ares0: int  # |res|[s, r, t>=1]
    dx0: int  # |x - xi|[p, r, t>=1]
    m0: int  # max_r x[p, t>=1]
    sp0: int  # spare[r, h, t]
    d0: int  # deficit[r, h, t]
    o0: int  # o[r, h, t>=1]
    dn0: int  # downsize[k, r, t>=1]
    b0: int  # |spare imbalance|[r, h, t>=1]
    n_cols: int


@dataclass(frozen=True)
class PlanModel:
    inst: Instance
    index: Index
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integer_cols: np.ndarray
    matrix: sp.csc_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    pool_rru: float


def pool_size_rru(inst: Instance) -> float:
    """Mean supply of one (region, hardware) pool at t0 (the scale of capacity-valued terms)."""
    S, R, H, P, T = inst.shape
    return max(1e-9, float(inst.supply[:, :, 0].sum()) / max(1, R * H))


def build(inst: Instance, *, integer_capacity: bool = False, phase_supply: np.ndarray | None = None) -> PlanModel:
    """Build the model in fixed sections: data, variables, constraints, objective.

    ``phase_supply`` (R, H, T-1) replaces ``max(supply[t-1], supply[t])`` in (15): a POP part's share
    of the transition headroom (``pop.flux_pop``), so the parts' shares add up to the whole's.
    """
    # ---- data
    S, R, H, P, T = inst.shape
    T1 = T - 1
    pairs_s, pairs_h = np.nonzero(inst.ratio > 0)
    K = len(pairs_s)
    phi, fixed_growth = growth_factors(inst)
    rho0 = baseline_residual(inst)
    floor = residual_floor(inst)
    keep = np.array([f.keep_residual or f.opt_out for f in inst.flags], dtype=bool)
    opt_out = np.array([f.opt_out for f in inst.flags], dtype=bool)
    pool = pool_size_rru(inst)
    w = inst.weights

    # ---- variables (column offsets)
    x0 = 0  # x[p,r,t] traffic share
    c0 = x0 + P * R * T  # c[k,r,t] capacity RRU
    res0 = c0 + K * R * T  # res[s,r,t] residual units
    ares0 = res0 + S * R * T  # |res| for t>=1
    dx0 = ares0 + S * R * T1  # |x - xi| for t>=1
    m0 = dx0 + P * R * T1  # max_r x for t>=1
    sp0 = m0 + P * T1  # spare[r,h,t]
    d0 = sp0 + R * H * T  # deficit[r,h,t]
    o0 = d0 + R * H * T  # double occupancy o[r,h,t>=1]
    dn0 = o0 + R * H * T1  # downsize dn[k,r,t>=1]
    b0 = dn0 + K * R * T1  # spare imbalance b[r,h,t>=1]
    n = b0 + R * H * T1
    lower = np.zeros(n)
    upper = np.full(n, np.inf)

    def ix_x(p: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
        return x0 + (p * R + r) * T + t

    def ix_c(k: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
        return c0 + (k * R + r) * T + t

    def ix_res(s: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
        return res0 + (s * R + r) * T + t

    def ix_rh(base: int, r: np.ndarray, h: np.ndarray, t: np.ndarray, nt: int) -> np.ndarray:
        return base + (r * H + h) * nt + t

    # bounds: x in [0, 1 + tau]; t0 fixed to the baseline (8)
    xp, xr, xt = np.meshgrid(np.arange(P), np.arange(R), np.arange(T), indexing="ij")
    upper[ix_x(xp, xr, xt)] = (1.0 + inst.tau)[xp, xt]
    lower[ix_x(xp, xr, 0 * xt)[:, :, 0]] = inst.xi
    upper[ix_x(xp, xr, 0 * xt)[:, :, 0]] = inst.xi
    kp, kr, kt = np.meshgrid(np.arange(K), np.arange(R), np.arange(T), indexing="ij")
    base_c = inst.kappa[pairs_s[kp], kr, pairs_h[kp]]
    fixed_c = (kt == 0) | opt_out[pairs_s[kp]]
    lower[ix_c(kp, kr, kt)[fixed_c]] = base_c[fixed_c]
    upper[ix_c(kp, kr, kt)[fixed_c]] = base_c[fixed_c]
    sp_, sr_, st_ = np.meshgrid(np.arange(S), np.arange(R), np.arange(T), indexing="ij")
    lo_res = floor[sp_, sr_]
    up_res = np.where(keep[sp_] | (st_ == 0), rho0[sp_, sr_], np.inf)
    lo_res = np.where(st_ == 0, rho0[sp_, sr_], lo_res)
    lower[ix_res(sp_, sr_, st_)] = lo_res
    upper[ix_res(sp_, sr_, st_)] = up_res
    integer_cols = np.zeros(0, dtype=np.int64)
    if integer_capacity:
        integer_cols = ix_c(kp, kr, kt)[~fixed_c].ravel()

    rows = ConstraintRows()
    add = rows.add
    ts = np.arange(1, T)

    # ---- constraints
    # (9) attribution ratio: sum_h ratio c - sum_p phi x - res >= fixed_growth  (managed services, t>=1)
    managed = np.flatnonzero(~opt_out)
    if len(managed) and T1:
        ms, mr, mt = (a.ravel() for a in np.meshgrid(managed, np.arange(R), ts, indexing="ij"))
        row_of = {int(s): i for i, s in enumerate(managed)}
        n9 = len(ms)
        rid = np.arange(n9)
        parts_r, parts_c, parts_v = [rid], [ix_res(ms, mr, mt)], [-np.ones(n9)]
        # capacity terms: one per allowed hardware of the service
        for k in range(K):
            s = int(pairs_s[k])
            if s not in row_of:
                continue
            sel = np.flatnonzero(ms == s)
            parts_r.append(sel)
            parts_c.append(ix_c(np.full(len(sel), k), mr[sel], mt[sel]))
            parts_v.append(np.full(len(sel), inst.ratio[s, pairs_h[k]]))
        # traffic terms: one per product the service serves
        for p in range(P):
            coef = phi[ms, p, mt]
            nz = np.flatnonzero(coef > 0)
            parts_r.append(nz)
            parts_c.append(ix_x(np.full(len(nz), p), mr[nz], mt[nz]))
            parts_v.append(-coef[nz])
        add(np.concatenate(parts_r), np.concatenate(parts_c), np.concatenate(parts_v),
            fixed_growth[ms, mr, mt], np.full(n9, np.inf))  # fmt: skip
    # |res| for t>=1: a - res >= 0, a + res >= 0
    if T1:
        aS, aR, aT = (a.ravel() for a in np.meshgrid(np.arange(S), np.arange(R), ts, indexing="ij"))
        na = len(aS)
        acol = ares0 + (aS * R + aR) * T1 + (aT - 1)
        for sign in (-1.0, 1.0):
            add(np.concatenate([np.arange(na)] * 2), np.concatenate([acol, ix_res(aS, aR, aT)]),
                np.concatenate([np.ones(na), np.full(na, sign)]), np.zeros(na), np.full(na, np.inf))  # fmt: skip
    # |x - xi| for t>=1: dx - x >= -xi, dx + x >= xi ; max: m - x >= 0
    if T1:
        xP, xR, xT = (a.ravel() for a in np.meshgrid(np.arange(P), np.arange(R), ts, indexing="ij"))
        nx = len(xP)
        dcol = dx0 + (xP * R + xR) * T1 + (xT - 1)
        xcol = ix_x(xP, xR, xT)
        for sign in (-1.0, 1.0):
            add(np.concatenate([np.arange(nx)] * 2), np.concatenate([dcol, xcol]),
                np.concatenate([np.ones(nx), np.full(nx, sign)]), sign * inst.xi[xP, xR], np.full(nx, np.inf))  # fmt: skip
        mcol = m0 + xP * T1 + (xT - 1)
        add(np.concatenate([np.arange(nx)] * 2), np.concatenate([mcol, xcol]),
            np.concatenate([np.ones(nx), -np.ones(nx)]), np.zeros(nx), np.full(nx, np.inf))  # fmt: skip
    # (12) full placement: sum_r x[p,r,t] = 1 + tau[p,t]  (t>=1)
    if T1:
        fP, fT = (a.ravel() for a in np.meshgrid(np.arange(P), ts, indexing="ij"))
        nf = len(fP)
        rr = np.repeat(np.arange(nf), R)
        cc = ix_x(np.repeat(fP, R), np.tile(np.arange(R), nf), np.repeat(fT, R))
        rhs = (1.0 + inst.tau)[fP, fT]
        add(rr, cc, np.ones(nf * R), rhs, rhs)
    # (11) capacity sufficiency: sum_k c + spare - d = supply  (every t)
    hR, hH, hT = (a.ravel() for a in np.meshgrid(np.arange(R), np.arange(H), np.arange(T), indexing="ij"))
    nh = len(hR)
    cR, cK, cT = (a.ravel() for a in np.meshgrid(np.arange(R), np.arange(K), np.arange(T), indexing="ij"))
    c_row = (cR * H + pairs_h[cK]) * T + cT
    add(np.concatenate([c_row, np.arange(nh), np.arange(nh)]),
        np.concatenate([ix_c(cK, cR, cT), ix_rh(sp0, hR, hH, hT, T), ix_rh(d0, hR, hH, hT, T)]),
        np.concatenate([np.ones(len(c_row)), np.ones(nh), -np.ones(nh)]),
        inst.supply[hR, hH, hT], inst.supply[hR, hH, hT])  # fmt: skip
    if T1:
        # (14) dn - c[t-1] + c[t] >= 0
        dK, dR, dT = (a.ravel() for a in np.meshgrid(np.arange(K), np.arange(R), ts, indexing="ij"))
        nd = len(dK)
        dncol = dn0 + (dK * R + dR) * T1 + (dT - 1)
        add(np.concatenate([np.arange(nd)] * 3), np.concatenate([dncol, ix_c(dK, dR, dT - 1), ix_c(dK, dR, dT)]),
            np.concatenate([np.ones(nd), -np.ones(nd), np.ones(nd)]), np.zeros(nd), np.full(nd, np.inf))  # fmt: skip
        # (14) o[r,h,t] - sum_{k on h} dn[k,r,t] = 0
        oR, oH, oT = (a.ravel() for a in np.meshgrid(np.arange(R), np.arange(H), ts, indexing="ij"))
        no = len(oR)
        ocol = o0 + (oR * H + oH) * T1 + (oT - 1)
        dn_row = (dR * H + pairs_h[dK]) * T1 + (dT - 1)
        add(np.concatenate([np.arange(no), dn_row]), np.concatenate([ocol, dncol]),
            np.concatenate([np.ones(no), -np.ones(nd)]), np.zeros(no), np.zeros(no))  # fmt: skip
        # (15) sum_k c[t] + o - d <= max(supply[t-1], supply[t])
        c15_row = (dR * H + pairs_h[dK]) * T1 + (dT - 1)
        if phase_supply is None:
            phase = np.maximum(inst.supply[oR, oH, oT - 1], inst.supply[oR, oH, oT])
        else:
            phase = np.asarray(phase_supply, dtype=float)[oR, oH, oT - 1]
        add(np.concatenate([c15_row, np.arange(no), np.arange(no)]),
            np.concatenate([ix_c(dK, dR, dT), ocol, ix_rh(d0, oR, oH, oT, T)]),
            np.concatenate([np.ones(nd), np.ones(no), -np.ones(no)]),
            np.full(no, -np.inf), phase)  # fmt: skip
        # (7) spare balance: b -/+ (spare - w sum_r' spare) >= 0, w = region share of h's supply at t
        tot = inst.supply.sum(axis=0)  # (H, T)
        wgt = np.where(tot[None] > 0, inst.supply / np.where(tot[None] > 0, tot[None], 1.0), 0.0)
        bcol = b0 + (oR * H + oH) * T1 + (oT - 1)
        # row i: b_i - sign * (spare_i - w_i * sum_r' spare[r',h,t])
        for sign in (1.0, -1.0):
            rr_list, cc_list, vv_list = [np.arange(no)], [bcol], [np.ones(no)]
            rr_list.append(np.arange(no))
            cc_list.append(ix_rh(sp0, oR, oH, oT, T))
            vv_list.append(np.full(no, -sign))
            for r2 in range(R):
                rr_list.append(np.arange(no))
                cc_list.append(ix_rh(sp0, np.full(no, r2), oH, oT, T))
                vv_list.append(sign * wgt[oR, oH, oT])
            add(np.concatenate(rr_list), np.concatenate(cc_list), np.concatenate(vv_list),
                np.zeros(no), np.full(no, np.inf))  # fmt: skip

    # ---- objective
    cost = np.zeros(n)
    cost[dx0 : dx0 + P * R * T1] = w.stability
    cost[m0 : m0 + P * T1] = w.disaster
    cost[d0 : d0 + R * H * T] = w.deficit / pool
    cost[o0 : o0 + R * H * T1] = w.double_occupancy / pool
    cost[ares0 : ares0 + S * R * T1] = w.model_deviation / pool
    cost[b0 : b0 + R * H * T1] = w.spare_balance / pool
    # capacity above the model's requirement costs a little, so c sits at the requirement unless a
    # goal (stability, double occupancy) pays for keeping it
    cost[c0 : c0 + K * R * T] = w.capacity_hold / pool
    # spare at t0 has no choice; the tiny cost makes the t0 split spare / deficit unique
    cost[sp0 : sp0 + R * H * T] = 0.0

    index = Index(pairs_s=pairs_s, pairs_h=pairs_h, x0=x0, c0=c0, res0=res0, ares0=ares0, dx0=dx0, m0=m0,
                  sp0=sp0, d0=d0, o0=o0, dn0=dn0, b0=b0, n_cols=n)  # fmt: skip
    row_lower, row_upper = rows.bounds()
    return PlanModel(inst=inst, index=index, cost=cost, col_lower=lower, col_upper=upper,
                     integer_cols=integer_cols, matrix=rows.matrix(n), row_lower=row_lower,
                     row_upper=row_upper, pool_rru=pool)  # fmt: skip
