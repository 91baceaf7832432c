"""Solve the joint plan with HiGHS and turn the solution into a plan document with deficit reasons.

The plan document (``plan.json``) carries the contract fields (regions, hardware, timesteps,
capacity, traffic, supply, deficits, solver) and everything the independent checker and the
hand-off need (the service model per service, residual floors, flags, RRU per server).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from placement_service.capacity.flux.domain import Instance, baseline_residual, growth_factors, residual_floor
from placement_service.capacity.flux.plan_model import PlanModel, build
from placement_service.capacity.highs import highs_for, pass_model

logger = logging.getLogger(__name__)

EPS_RRU = 1e-6


def solve(
    model: PlanModel, *, time_limit_s: float = 60.0, threads: int = 1, method: str = "auto"
) -> tuple[str, np.ndarray | None, float, float, float]:
    """(status, x, objective, bound, wall_s) of the model; ``method`` is HiGHS's LP solver option
    ("auto" = interior point for large models, dual simplex for small ones; "simplex"; "ipm")."""
    if method == "auto":
        method = "ipm" if model.index.n_cols > 20_000 else "simplex"
    h = highs_for(time_limit_s=time_limit_s, threads=threads, seed=0, output=logger.isEnabledFor(logging.DEBUG),
                  solver=method)
    pass_model(h, cost=model.cost, col_lower=model.col_lower, col_upper=model.col_upper, row_lower=model.row_lower,
               row_upper=model.row_upper, matrix=model.matrix, integer_cols=model.integer_cols)
    t0 = time.monotonic()
    h.run()
    wall = time.monotonic() - t0
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    has_point = info.primal_solution_status == 2
    x = np.asarray(h.getSolution().col_value, dtype=float) if has_point else None
    obj = float(info.objective_function_value) if has_point else float("inf")
    bound = (
        float(info.mip_dual_bound)
        if len(model.integer_cols)
        else (obj if status == "Optimal" else float("-inf"))
    )
    logger.info("HiGHS flux plan: %s, objective %.4f, %d cols, %d rows, %.2f s", status, obj, model.matrix.shape[1],
                model.matrix.shape[0], wall)  # fmt: skip
    return status, x, obj, bound, wall


def plan(inst: Instance, *, time_limit_s: float = 60.0, integer_capacity: bool = False) -> dict[str, Any]:
    """Build, solve and extract the plan document (see the module docstring)."""
    t_start = time.monotonic()
    model = build(inst, integer_capacity=integer_capacity)
    status, sol, obj, bound, wall = solve(model, time_limit_s=time_limit_s)
    if sol is None:
        # Every row has a slack (deficits) so this means a solver failure or the time limit.
        raise_msg = f"the plan solve ended '{status}' without a point (time limit {time_limit_s} s?)"
        from placement_service.capacity.flux import FluxError

        raise FluxError(raise_msg)
    doc = extract(model, sol)
    doc["solver"] = {
        "status": status, "objective": obj, "bound": bound, "variables": int(model.index.n_cols),
        "constraints": int(model.matrix.shape[0]), "wall_s": round(wall, 4),
        "build_s": round(time.monotonic() - t_start - wall, 4), "integer_columns": int(len(model.integer_cols)),
    }  # fmt: skip
    return doc


def arrays(model: PlanModel, sol: np.ndarray) -> dict[str, np.ndarray]:
    """The solution as arrays: c (S,R,H,T), x (P,R,T), res (S,R,T), spare / d (R,H,T), o (R,H,T)."""
    inst, ix = model.inst, model.index
    S, R, H, P, T = inst.shape
    K = len(ix.pairs_s)
    cK = sol[ix.c0 : ix.c0 + K * R * T].reshape(K, R, T)
    c = np.zeros((S, R, H, T))
    c[ix.pairs_s, :, ix.pairs_h, :] = cK
    o = np.zeros((R, H, T))
    if T > 1:
        o[:, :, 1:] = sol[ix.o0 : ix.o0 + R * H * (T - 1)].reshape(R, H, T - 1)
    return {
        "c": np.maximum(c, 0.0),
        "x": np.clip(sol[ix.x0 : ix.x0 + P * R * T].reshape(P, R, T), 0.0, None),
        "res": sol[ix.res0 : ix.res0 + S * R * T].reshape(S, R, T),
        "spare": np.maximum(sol[ix.sp0 : ix.sp0 + R * H * T].reshape(R, H, T), 0.0),
        "d": np.maximum(sol[ix.d0 : ix.d0 + R * H * T].reshape(R, H, T), 0.0),
        "o": o,
    }


def deficit_reason(inst: Instance, c: np.ndarray, r: int, h: int, t: int) -> str:
    """Why (r, h, t) needs more hardware than it has, in the order the causes are checked."""
    S, R, H, P, T = inst.shape
    phi, _ = growth_factors(inst)
    only_h = (inst.ratio[:, h] > 0) & ((inst.ratio > 0).sum(axis=1) == 1)
    need_only_h = float(
        ((phi[:, :, t] @ (1.0 + inst.tau[:, t])) / np.where(only_h, inst.ratio[:, h], 1.0))[only_h].sum()
    )
    total_h = float(inst.supply[:, h, t].sum())
    name = f"{inst.hardware[h]} in {inst.regions[r]} at {inst.timesteps[t]}"
    if t == 0:
        used = float(inst.kappa[:, r, h].sum())
        return (f"baseline: services already use {used:.1f} RRU of {name} but the supply is "
                f"{inst.supply[r, h, 0]:.1f} RRU")  # fmt: skip
    if need_only_h > total_h + EPS_RRU:
        return (f"global shortage of {inst.hardware[h]} at {inst.timesteps[t]}: services that can only run on it "
                f"need {need_only_h:.1f} RRU over all regions, the supply is {total_h:.1f} RRU")  # fmt: skip
    opt = np.array([f.opt_out for f in inst.flags])
    pinned = float(inst.kappa[opt, r, h].sum())
    if pinned > inst.supply[r, h, t] + EPS_RRU:
        return (f"opted-out services keep {pinned:.1f} RRU of {name} (their baseline), above its supply "
                f"{inst.supply[r, h, t]:.1f} RRU")  # fmt: skip
    use_t = float(c[:, r, h, t].sum())
    if use_t <= inst.supply[r, h, t] + EPS_RRU:
        return (f"double occupancy: upsizing before downsizing needs {float(np.maximum(c[:, r, h, t - 1], c[:, r, h, t]).sum()):.1f} "
                f"RRU of {name} during the transition, more than the {max(inst.supply[r, h, t - 1], inst.supply[r, h, t]):.1f} "
                f"RRU present")  # fmt: skip
    return (f"supply of {name} is {inst.supply[r, h, t]:.1f} RRU (was {inst.supply[r, h, t - 1]:.1f}); moving the rest "
            f"out is limited by the other regions' supply and the residual floors of services placed there")  # fmt: skip


def extract(model: PlanModel, sol: np.ndarray) -> dict[str, Any]:
    inst = model.inst
    S, R, H, P, T = inst.shape
    a = arrays(model, sol)
    c, x, d = a["c"], a["x"], a["d"]
    capacity = [
        {"service": inst.services[s], "region": inst.regions[r], "hardware": inst.hardware[h], "t": inst.timesteps[t],
         "amount": round(float(c[s, r, h, t]), 6)}
        for s, r, h, t in zip(*np.nonzero(c > EPS_RRU) if c.size else ((),) * 4, strict=True)
    ]  # fmt: skip
    traffic = [
        {"product": inst.products[p], "region": inst.regions[r], "t": inst.timesteps[t], "share": round(float(x[p, r, t]), 9)}
        for p in range(P) for r in range(R) for t in range(T)
    ]  # fmt: skip
    supply = [
        {"region": inst.regions[r], "hardware": inst.hardware[h], "t": inst.timesteps[t],
         "available": float(inst.supply[r, h, t])}
        for r in range(R) for h in range(H) for t in range(T)
    ]  # fmt: skip
    deficits = [
        {"region": inst.regions[r], "hardware": inst.hardware[h], "t": inst.timesteps[t],
         "amount": round(float(d[r, h, t]), 6), "reason": deficit_reason(inst, c, r, h, t)}
        for r, h, t in zip(*np.nonzero(d > 1e-4 * max(1.0, model.pool_rru)), strict=True)
    ]  # fmt: skip
    spare = [
        {"region": inst.regions[r], "hardware": inst.hardware[h], "t": inst.timesteps[t],
         "amount": round(float(a["spare"][r, h, t]), 6)}
        for r in range(R) for h in range(H) for t in range(T)
    ]  # fmt: skip
    phi, fixed = growth_factors(inst)
    floor = residual_floor(inst)
    rho0 = baseline_residual(inst)
    services = [
        {"name": inst.services[s], "metric": inst.metric[s] if inst.metric else "",
         "ratio": {inst.hardware[h]: float(inst.ratio[s, h]) for h in range(H) if inst.ratio[s, h] > 0},
         "phi": {inst.timesteps[t]: {inst.products[p]: float(phi[s, p, t]) for p in range(P) if phi[s, p, t] > 0}
                 for t in range(T)},
         "fixed_growth": {inst.timesteps[t]: {inst.regions[r]: float(fixed[s, r, t]) for r in range(R) if fixed[s, r, t]}
                          for t in range(T) if fixed[s, :, t].any()},
         "residual_floor": {inst.regions[r]: float(floor[s, r]) for r in range(R)},
         "baseline_residual": {inst.regions[r]: float(rho0[s, r]) for r in range(R)},
         **asdict(inst.flags[s])}
        for s in range(S)
    ]  # fmt: skip
    metrics = summary(inst, c, x)
    return {
        "regions": list(inst.regions), "hardware": list(inst.hardware), "timesteps": list(inst.timesteps),
        "products": list(inst.products), "services": services,
        "rru_per_server": {inst.hardware[h]: float(inst.rru_per_server[h]) for h in range(H)},
        "growth": {inst.products[p]: [float(v) for v in inst.tau[p]] for p in range(P)},
        "capacity": capacity, "traffic": traffic, "supply": supply, "deficits": deficits, "spare": spare,
        "metrics": metrics, "weights": asdict(inst.weights),
    }  # fmt: skip


def summary(inst: Instance, c: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    """Per timestep: largest region share (mean over products of max_r x / (1 + tau)), capacity moved."""
    S, R, H, P, T = inst.shape
    placed = 1.0 + inst.tau  # (P, T)
    largest = (x.max(axis=1) / np.where(placed > 0, placed, 1.0)).mean(axis=0) if P else np.zeros(T)
    moved = [0.0] + [float(np.maximum(c[..., t] - c[..., t - 1], 0).sum()) for t in range(1, T)]
    return {"largest_region_share": [round(float(v), 6) for v in largest], "capacity_moved_rru": moved}
