"""POP applied to the Flux joint plan: fix the traffic, split the services, solve the parts, coalesce.

Which parts of the plan are granular (``docs/bench/flux.md`` has the measurements):
- services are: each (service, region) capacity is small next to a region's supply, and a service
  couples to the others only through the supply of the (region, hardware) pools it uses;
- product traffic shares ``x[p, r, t]`` are not: a product's shares set the demand of every service
  that serves it, so splitting products would cut every service in pieces; and the
  disaster-readiness term (the largest region share per product) couples all regions.

So POP here runs in two stages:

1. **Traffic** (one small solve, not split): the same joint model with services aggregated into
   super-services, one per class (opted out, residual kept, the set of allowed hardware types, the
   hardware holding the baseline). Each member is first rescaled to RRUs of its baseline hardware
   (alpha / ratio), so within a class the model is the members' sum; the fungibility ratio of a
   secondary type is the members' capacity-weighted mean (the only approximation besides the
   residuals); each super-service's residual may go down to the sum of its members' floors (the
   relaxation of netting residuals inside a class). This fixes ``x`` (and so the
   stability and largest-region-share terms) for every part.
2. **Capacity** (k parts): services are partitioned at random into k equal groups
   (``partition.partition``: a part's model size grows with its number of services, not their size).
   Every (region, hardware, t) pool's supply is split over the parts in proportion to each part's
   need in it under the fixed traffic (its services' least capacity on their baseline hardware), and
   every transition's headroom ``max(supply[t-1], supply[t])`` in proportion to the parts' need in
   the upsize phase (``max`` of the needs at t-1 and t), passed to ``plan_model.build`` as
   ``phase_supply``: the parts' shares add up exactly to the whole's. Each part is the unchanged
   joint model (``plan_model.build`` + ``planner.solve``) over its services with the traffic columns
   fixed.

Coalesce: the parts' capacities and residuals are concatenated (every service exactly once), every
auxiliary column of the full model (deviations, largest share, spare, deficits against the FULL
supply, downsizes, double occupancy, spare balance) is re-derived at its cheapest value
(:func:`complete`), and the result is scored with the full model's cost vector, so the objective is
directly comparable with the single solve's. A part short of supply in a pool where another part
has spare is netted out by this re-derivation; what is left is repaired (:func:`repair`): with the
traffic fixed, regions couple only through the spare-balance objective, so each region left short is
re-solved whole (every service; the other regions fixed). It happens where the optimum fills a pool
(regions losing supply), where a fixed share cannot pass one part's room to another. Deficits that
remain after it are the plan's and show in ``deficits`` and the checker's verdict.

``k = 1`` skips stage 1: the one part is the full model with the traffic free (the single solve).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from placement_service.capacity.flux.domain import Instance, ServiceFlags, growth_factors, residual_floor
from placement_service.capacity.flux.plan_model import PlanModel, build
from placement_service.capacity.flux.planner import arrays, extract, solve
from placement_service.capacity.pop.partition import PopError, partition

logger = logging.getLogger(__name__)

FEAS_TOL = 1e-6  # relative to the largest pool, for the coalesced point's row check


@dataclass(frozen=True)
class FluxPart:
    """One sub-problem: its services (indices into the instance) and its share of every pool."""

    index: int
    services: np.ndarray  # (S_g,) service indices
    share: np.ndarray  # (R, H, T) share of each (region, hardware) pool's supply at t
    phase_share: np.ndarray  # (R, H, T-1) share of the transition headroom max(supply[t-1], supply[t])


@dataclass(frozen=True)
class FluxPartResult:
    index: int
    status: str
    objective: float  # the part's own model objective
    wall_s: float
    cpu_s: float
    c: np.ndarray  # (S_g, R, H, T) RRU
    res: np.ndarray  # (S_g, R, T) units
    x: np.ndarray  # (P, R, T) the traffic the part used (free only when k = 1)
    variables: int
    constraints: int


# ---- stage 1: traffic from the aggregated plan


def baseline_hardware(inst: Instance) -> np.ndarray:
    """Per service the hardware holding most of its baseline capacity (else its best ratio)."""
    use = inst.kappa.sum(axis=1)  # (S, H)
    return np.where(use.sum(axis=1) > 0, np.argmax(use, axis=1), np.argmax(inst.ratio, axis=1))


def service_classes(inst: Instance) -> np.ndarray:
    """Class id per service: (opted out, residual kept, allowed hardware set, baseline hardware)."""
    key = np.column_stack([
        [f.opt_out for f in inst.flags], [f.keep_residual for f in inst.flags],
        inst.ratio > 0, baseline_hardware(inst),
    ]).astype(np.int64)  # fmt: skip
    _, cls = np.unique(key, axis=0, return_inverse=True)
    return np.asarray(cls).ravel()


def aggregate(inst: Instance, cls: np.ndarray) -> tuple[Instance, np.ndarray]:
    """The instance with one super-service per class, and each super-service's residual floor (G, R).

    Members are rescaled to RRUs of their baseline hardware (units / ratio[s, base]), so baseline
    units and residuals add up exactly: ``rho0[G] = sum rho0[s] / ratio[s, base]``.
    """
    S, R, H, P, T = inst.shape
    G = int(cls.max()) + 1 if S else 0
    base = baseline_hardware(inst)
    norm = inst.ratio[np.arange(S), base]
    norm = np.where(norm > 0, norm, 1.0)
    scaled_ratio = inst.ratio / norm[:, None]
    onehot = np.zeros((S, G))
    onehot[np.arange(S), cls] = 1.0
    weight = inst.kappa.sum(axis=(1, 2)) + 1e-9  # capacity-weighted mean ratio inside a class
    ratio_g = (onehot * weight[:, None]).T @ scaled_ratio / ((onehot * weight[:, None]).sum(axis=0)[:, None])
    ratio_g = np.where((onehot.T @ (inst.ratio > 0)) > 0, ratio_g, 0.0)
    # kappa such that ratio_g * kappa_g = sum of the members' units on each hardware
    units_h = np.einsum("srh,sh->srh", inst.kappa, scaled_ratio)
    kappa_g = np.einsum("sg,srh->grh", onehot, units_h) / np.where(ratio_g > 0, ratio_g, 1.0)[:, None, :]
    floor_g = onehot.T @ (residual_floor(inst) / norm[:, None])
    first = np.array([int(np.flatnonzero(cls == g)[0]) for g in range(G)], dtype=np.int64)
    agg = replace(
        inst,
        services=tuple(f"class{g}" for g in range(G)),
        alpha=onehot.T @ (inst.alpha / norm[:, None]),
        ratio=ratio_g,
        kappa=kappa_g,
        gamma=onehot.T @ (inst.gamma / norm[:, None]),
        flags=tuple(ServiceFlags(opt_out=inst.flags[s].opt_out, keep_residual=inst.flags[s].keep_residual)
                    for s in first),  # fmt: skip
        metric=tuple("aggregate" for _ in range(G)),
    )
    return agg, floor_g


def traffic_stage(inst: Instance, *, time_limit_s: float = 60.0) -> tuple[np.ndarray, dict[str, Any]]:
    """Traffic shares x (P, R, T) from the aggregated plan, and a report of that solve."""
    t0, c0 = time.monotonic(), time.process_time()
    cls = service_classes(inst)
    agg, floor_g = aggregate(inst, cls)
    model = build(agg)
    S, R, H, P, T = agg.shape
    lo = model.col_lower.copy()
    keep = np.array([f.keep_residual or f.opt_out for f in agg.flags], dtype=bool)
    for t in range(1, T):
        cols = model.index.res0 + (np.arange(S)[:, None] * R + np.arange(R)[None, :]) * T + t
        lo[cols[~keep]] = floor_g[~keep]
    model = replace(model, col_lower=lo)
    # interior point: 2-3x faster than dual simplex on this small but degenerate model (measured)
    status, sol, obj, _bound, wall = solve(model, time_limit_s=time_limit_s, method="ipm")
    if sol is None:
        raise PopError(f"the aggregated traffic plan ended '{status}' without a point (time limit {time_limit_s} s?)")
    x = arrays(model, sol)["x"]
    report = {"phase": "traffic", "status": status, "classes": S, "objective": obj, "variables": model.index.n_cols,
              "solve_s": round(wall, 3), "wall_s": round(time.monotonic() - t0, 3),
              "cpu_s": round(time.process_time() - c0, 3)}  # fmt: skip
    return normalise_traffic(inst, x), report


def normalise_traffic(inst: Instance, x: np.ndarray) -> np.ndarray:
    """x clipped to >= 0 and rescaled so every (product, t) places exactly 1 + tau (fixed columns must
    meet the placement rows exactly, not within the solver's tolerance)."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, None).copy()
    x[:, :, 0] = inst.xi
    total = x.sum(axis=1)  # (P, T)
    want = 1.0 + inst.tau
    x *= np.where(total > 0, want / np.where(total > 0, total, 1.0), 1.0)[:, None, :]
    return np.minimum(x, want[:, None, :])


# ---- stage 2: parts


def need_rru(inst: Instance, x: np.ndarray) -> np.ndarray:
    """(S, R, H, T): each service's least capacity under traffic x, on its baseline hardware (RRU);
    the baseline (and an opted-out service's every step) is its actual capacity."""
    S, R, H, P, T = inst.shape
    phi, fixed = growth_factors(inst)
    floor = residual_floor(inst)
    base = baseline_hardware(inst)
    norm = inst.ratio[np.arange(S), base]
    units = np.einsum("spt,prt->srt", phi, x) + floor[:, :, None] + fixed  # (S, R, T)
    need = np.zeros((S, R, H, T))
    need[np.arange(S), :, base, :] = np.maximum(units, 0.0) / np.where(norm > 0, norm, 1.0)[:, None, None]
    opt = np.array([f.opt_out for f in inst.flags], dtype=bool)
    need[:, :, :, 0] = inst.kappa
    need[opt] = inst.kappa[opt][..., None]
    return need


def split_parts(inst: Instance, x: np.ndarray, k: int, seed: int = 0) -> list[FluxPart]:
    """k parts: services at random in equal numbers, every pool's supply split by the parts' need."""
    S, R, H, P, T = inst.shape
    if not isinstance(k, int | np.integer) or k < 1:
        raise PopError(f"pop k must be an integer >= 1, got {k!r}")
    if k > S:
        raise PopError(f"pop k = {k} is more than the {S} services to split (at most one part per service)")
    need = need_rru(inst, x)  # (S, R, H, T)
    # equal numbers of services (a part's model size grows with its services, not their size); the
    # supply shares follow each part's need, so the parts need not hold equal loads
    group = partition(S, k, seed)
    up = np.maximum(need[..., :-1], need[..., 1:])  # the upsize phase holds max(c[t-1], c[t])

    def shares(per_service: np.ndarray) -> np.ndarray:
        per = np.stack([per_service[group == g].sum(axis=0) for g in range(k)])  # (k, R, H, ...)
        tot = per.sum(axis=0)
        return np.where(tot[None] > 0, per / np.where(tot[None] > 0, tot[None], 1.0), 1.0 / k)

    share, phase = shares(need), shares(up)
    return [FluxPart(g, np.flatnonzero(group == g), share[g], phase[g]) for g in range(k)]


def sub_instance(inst: Instance, part: FluxPart) -> Instance:
    s = part.services
    return replace(
        inst,
        services=tuple(inst.services[i] for i in s),
        alpha=inst.alpha[s], ratio=inst.ratio[s], kappa=inst.kappa[s], gamma=inst.gamma[s],
        flags=tuple(inst.flags[i] for i in s),
        metric=tuple(inst.metric[i] for i in s) if inst.metric else (),
        supply=inst.supply * part.share,
    )  # fmt: skip


def sub_phase_supply(inst: Instance, part: FluxPart) -> np.ndarray:
    """The part's transition headroom (R, H, T-1): its share of max(supply[t-1], supply[t])."""
    return part.phase_share * np.maximum(inst.supply[:, :, :-1], inst.supply[:, :, 1:])


def fix_traffic(model: PlanModel, x: np.ndarray) -> PlanModel:
    """The model with every traffic column fixed to ``x`` (P, R, T)."""
    lo, up = model.col_lower.copy(), model.col_upper.copy()
    n = x.size
    lo[model.index.x0 : model.index.x0 + n] = x.ravel()
    up[model.index.x0 : model.index.x0 + n] = x.ravel()
    return replace(model, col_lower=lo, col_upper=up)


def solve_part(
    shared: tuple[Instance, np.ndarray | None], part: FluxPart, time_limit_s: float = 600.0
) -> FluxPartResult:
    """One part: the joint model over its services and supply share, traffic fixed (free if None)."""
    inst, x = shared
    t0, c0 = time.monotonic(), time.process_time()
    model = build(sub_instance(inst, part), phase_supply=sub_phase_supply(inst, part))
    if x is not None:
        model = fix_traffic(model, x)
    status, sol, obj, _bound, _wall = solve(model, time_limit_s=time_limit_s)
    if sol is None:
        raise PopError(f"pop part {part.index}: the solve ended '{status}' without a point")
    a = arrays(model, sol)
    return FluxPartResult(index=part.index, status=status, objective=obj, wall_s=time.monotonic() - t0,
                          cpu_s=time.process_time() - c0, c=a["c"], res=a["res"], x=a["x"],
                          variables=int(model.index.n_cols), constraints=int(model.matrix.shape[0]))  # fmt: skip


# ---- coalesce


def coalesce(inst: Instance, parts: Sequence[FluxPart], results: Sequence[FluxPartResult]) -> tuple[np.ndarray, np.ndarray]:
    """Capacities c (S, R, H, T) and residuals res (S, R, T) of the whole plan; every service once."""
    S, R, H, P, T = inst.shape
    seen = np.zeros(S, dtype=np.int64)
    c = np.zeros((S, R, H, T))
    res = np.zeros((S, R, T))
    by_index = {r.index: r for r in results}
    for part in parts:
        if part.index not in by_index:
            raise PopError(f"pop part {part.index} has no result")
        r = by_index[part.index]
        seen[part.services] += 1
        c[part.services] = r.c
        res[part.services] = r.res
    if (seen != 1).any():
        bad = [inst.services[i] for i in np.flatnonzero(seen != 1)[:5]]
        raise PopError(f"services not in exactly one part: {bad}")
    return c, res


def complete(model: PlanModel, c: np.ndarray, x: np.ndarray, res: np.ndarray) -> np.ndarray:
    """The full model's column vector at (c, x, res), every auxiliary column at its cheapest value."""
    inst, ix = model.inst, model.index
    S, R, H, P, T = inst.shape
    T1 = T - 1
    K = len(ix.pairs_s)
    sol = np.zeros(ix.n_cols)
    sol[ix.x0 : ix.x0 + P * R * T] = x.ravel()
    cK = c[ix.pairs_s, :, ix.pairs_h, :]  # (K, R, T)
    sol[ix.c0 : ix.c0 + K * R * T] = cK.ravel()
    sol[ix.res0 : ix.res0 + S * R * T] = res.ravel()
    used = c.sum(axis=0)  # (R, H, T)
    d = np.maximum(used - inst.supply, 0.0)
    if T1:
        sol[ix.ares0 : ix.ares0 + S * R * T1] = np.abs(res[:, :, 1:]).ravel()
        sol[ix.dx0 : ix.dx0 + P * R * T1] = np.abs(x[:, :, 1:] - inst.xi[:, :, None]).ravel()
        sol[ix.m0 : ix.m0 + P * T1] = x[:, :, 1:].max(axis=1).ravel()
        dn = np.maximum(cK[:, :, :-1] - cK[:, :, 1:], 0.0)  # (K, R, T1)
        sol[ix.dn0 : ix.dn0 + K * R * T1] = dn.ravel()
        onehot = np.zeros((K, H))
        onehot[np.arange(K), ix.pairs_h] = 1.0
        o = np.einsum("krt,kh->rht", dn, onehot)
        sol[ix.o0 : ix.o0 + R * H * T1] = o.ravel()
        phase = np.maximum(inst.supply[:, :, :-1], inst.supply[:, :, 1:])
        d[:, :, 1:] = np.maximum(d[:, :, 1:], used[:, :, 1:] + o - phase)
    spare = inst.supply - used + d
    sol[ix.sp0 : ix.sp0 + R * H * T] = spare.ravel()
    sol[ix.d0 : ix.d0 + R * H * T] = d.ravel()
    if T1:
        tot = inst.supply.sum(axis=0)  # (H, T)
        wgt = np.where(tot[None] > 0, inst.supply / np.where(tot[None] > 0, tot[None], 1.0), 0.0)
        b = np.abs(spare[:, :, 1:] - wgt[:, :, 1:] * spare[:, :, 1:].sum(axis=0)[None])
        sol[ix.b0 : ix.b0 + R * H * T1] = b.ravel()
    return sol


def violation(model: PlanModel, sol: np.ndarray) -> float:
    """Largest row or column bound violation of ``sol`` in the full model (RRU / units / shares)."""
    act = model.matrix @ sol
    rows = np.maximum(model.row_lower - act, act - model.row_upper)
    cols = np.maximum(model.col_lower - sol, sol - model.col_upper)
    return float(max(rows.max(initial=0.0), cols.max(initial=0.0)))


def short_regions(model: PlanModel, sol: np.ndarray) -> np.ndarray:
    """Regions with a deficit (any hardware, any step) at the completed point ``sol``."""
    inst, ix = model.inst, model.index
    R, H, T = len(inst.regions), len(inst.hardware), len(inst.timesteps)
    d = sol[ix.d0 : ix.d0 + R * H * T].reshape(R, H, T)
    return np.flatnonzero((d[:, :, 1:] > 1e-6 * max(1.0, model.pool_rru)).any(axis=(1, 2)))


def repair(
    model: PlanModel, c: np.ndarray, x: np.ndarray, res: np.ndarray, regions: np.ndarray, time_limit_s: float
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Re-solve the regions left short with every service, the traffic and every other region fixed.

    With the traffic fixed, regions couple only through the spare-balance term (an objective, not a
    constraint), so a short region is exactly the joint model restricted to it: the parts' fixed
    supply shares are what made it short, not the traffic. Returns (c, res, report); the coalesced
    point when the re-solve does not end with a point.
    """
    t0, c0 = time.monotonic(), time.process_time()
    inst, ix = model.inst, model.index
    S, R, H, P, T = inst.shape
    K = len(ix.pairs_s)
    m = fix_traffic(model, x)
    lo, up = m.col_lower.copy(), m.col_upper.copy()
    frozen = np.ones(R, dtype=bool)
    frozen[regions] = False
    kk, rr, tt = np.meshgrid(np.arange(K), np.arange(R), np.arange(T), indexing="ij")
    sel = frozen[rr]
    cols = (ix.c0 + (kk * R + rr) * T + tt)[sel]
    val = c[ix.pairs_s, :, ix.pairs_h, :][sel]
    lo[cols], up[cols] = val, val
    ss, rr2, tt2 = np.meshgrid(np.arange(S), np.arange(R), np.arange(T), indexing="ij")
    sel2 = frozen[rr2] & (tt2 > 0)
    cols2 = (ix.res0 + (ss * R + rr2) * T + tt2)[sel2]
    # a frozen residual keeps its part's value, but may not go below its bound (solver tolerance)
    val2 = np.maximum(res[sel2], lo[cols2])
    lo[cols2], up[cols2] = val2, val2
    status, sol, obj, _bound, wall = solve(replace(m, col_lower=lo, col_upper=up), time_limit_s=time_limit_s)
    report: dict[str, Any] = {"phase": "repair", "regions": [inst.regions[r] for r in regions], "status": status,
                              "solve_s": round(wall, 3)}  # fmt: skip
    if sol is not None:
        a = arrays(m, sol)
        c, res = a["c"], a["res"]
    report.update(wall_s=round(time.monotonic() - t0, 3), cpu_s=round(time.process_time() - c0, 3))
    return c, res, report


# ---- end to end

Runner = Callable[[Callable[..., FluxPartResult], Any, Sequence[FluxPart], tuple[Any, ...]], list[FluxPartResult]]


def run_inline(fn: Callable[..., FluxPartResult], shared: Any, specs: Sequence[FluxPart],
               args: tuple[Any, ...]) -> list[FluxPartResult]:  # fmt: skip
    """The parts one after another in this process (progress on the log as each part ends)."""
    out = []
    for spec in specs:
        out.append(fn(shared, spec, *args))
        logger.warning("flux pop: part %d/%d done (%d services, %.1f s)", len(out), len(specs), len(spec.services),
                       out[-1].wall_s)  # fmt: skip
    return out


def solve_pop(
    inst: Instance, k: int, *, seed: int = 0, time_limit_s: float = 600.0, runner: Runner = run_inline,
    do_repair: bool = True,
) -> dict[str, Any]:
    """The coalesced plan document (``planner.extract``'s fields), ``solver`` scored on the full model
    and ``pop`` (per-part status, wall and CPU seconds, the traffic stage, the coalesced point's
    largest bound violation)."""
    S = len(inst.services)
    if not isinstance(k, int | np.integer) or k < 1 or k > S:
        raise PopError(f"pop k must be an integer in 1..{S} (the number of services), got {k!r}")
    t_start, c_start = time.monotonic(), time.process_time()
    phases: list[dict[str, Any]] = []
    if k == 1:
        x: np.ndarray | None = None
        R, H, T = len(inst.regions), len(inst.hardware), len(inst.timesteps)
        parts = [FluxPart(0, np.arange(S), np.ones((R, H, T)), np.ones((R, H, T - 1)))]
    else:
        x, rep = traffic_stage(inst, time_limit_s=time_limit_s)
        phases.append(rep)
        logger.warning("flux pop: traffic from %d service classes in %.1f s", rep["classes"], rep["wall_s"])
        t0 = time.monotonic()
        parts = split_parts(inst, x, k, seed)
        phases.append({"phase": "partition", "wall_s": round(time.monotonic() - t0, 3)})
    logger.info("flux pop: %d part(s) of %s services", k, [len(p.services) for p in parts])
    results = runner(solve_part, (inst, x), parts, (time_limit_s,))
    t0 = time.monotonic()
    c, res = coalesce(inst, parts, results)
    x_plan = results[0].x if x is None else x
    model = build(inst)
    sol = complete(model, c, x_plan, res)
    short = short_regions(model, sol)
    pre = {"phase": "coalesce", "objective": float(model.cost @ sol), "short_regions": len(short)}
    if len(short) and do_repair and x is not None:
        c, res, rep = repair(model, c, x_plan, res, short, time_limit_s)
        phases.append(pre)
        phases.append(rep)
        pre = {"phase": "coalesce-repaired"}
        sol = complete(model, c, x_plan, res)
    obj = float(model.cost @ sol)
    doc = extract(model, sol)
    worst = violation(model, sol)
    phases.append({**pre, "wall_s": round(time.monotonic() - t0, 3)})
    parts_cpu = sum(r.cpu_s for r in results)
    doc["solver"] = {
        "status": "pop", "objective": obj, "bound": None, "variables": int(model.index.n_cols),
        "constraints": int(model.matrix.shape[0]), "wall_s": round(time.monotonic() - t_start, 4),
    }  # fmt: skip
    doc["pop"] = {
        "k": k, "seed": seed, "phases": phases,
        "parts": [{"part": r.index, "services": len(parts[r.index].services), "status": r.status,
                   "objective": r.objective, "variables": r.variables, "constraints": r.constraints,
                   "wall_s": round(r.wall_s, 3), "cpu_s": round(r.cpu_s, 3)}
                  for r in sorted(results, key=lambda r: r.index)],
        "parts_cpu_s": round(parts_cpu, 3),
        # inline, the parts ran in this process: their CPU is already in the coordinator's
        "cpu_s": round(time.process_time() - c_start + (0.0 if runner is run_inline else parts_cpu), 3),
        "max_bound_violation": worst,
    }  # fmt: skip
    return doc
