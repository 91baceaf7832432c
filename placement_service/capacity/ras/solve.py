"""One RAS solve: precheck, aggregate, LP bound, rounding + repair, branch-and-bound, servers, racks.

Steps (``Method.AUTO``; every step respects the overall ``time_limit_s`` and the best plan is kept):
  1. precheck: hopeless or contradictory requests get their explanation and are left out;
  2. aggregate servers into classes hardware x datacenter x MSB; on a re-solve, entities whose
     previous servers already satisfy them are fixed (they neither gain nor lose servers);
  3. LP relaxation of the aggregated model: its optimum is a lower bound on every plan's objective;
  4. round the LP counts down and repair greedily, and build the greedy constructive plan (keep
     previous servers, repair): complete plans within seconds, the better one kept;
  5. branch-and-bound (HiGHS MIP) started from the best plan so far, for the time left;
  6. disaggregate counts to concrete servers (servers that may stay, stay), then the rack phase.
The reported gap is ``(objective - bound) / objective`` with ``bound = max(LP bound, MIP dual bound)``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import numpy as np

from placement_service.capacity.ras import racks, ras_model, topup
from placement_service.capacity.ras.aggregate import Aggregate, aggregate, with_fixed
from placement_service.capacity.ras.disaggregate import disaggregate
from placement_service.capacity.ras.domain import Method, Problem, SolverReport
from placement_service.capacity.ras.plan import Plan, build_plan
from placement_service.capacity.ras.precheck import precheck
from placement_service.capacity.ras.repair import greedy, round_and_repair

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Candidate:
    label: str
    y: np.ndarray
    objective: float
    x: np.ndarray


def satisfied_entities(agg: Aggregate, theta: float) -> np.ndarray:
    """Entities whose previous (still available, still eligible) servers already meet every constraint."""
    R = agg.n_reservations
    y = agg.pair_prev
    out = np.zeros(agg.n_entities, dtype=bool)
    contrib = agg.pair_value * y
    for r in range(R):
        m = agg.pair_entity == r
        if not y[m].any():
            continue
        per_msb = np.bincount(agg.class_msb[agg.pair_class[m]], weights=contrib[m], minlength=agg.n_msb)
        total = float(per_msb.sum())
        ok = total - per_msb.max() >= agg.capacity_rru[r] - 1e-9
        if ok and not np.isnan(agg.dc_share[r, 0]):
            per_dc = np.bincount(agg.class_dc[agg.pair_class[m]], weights=contrib[m], minlength=agg.n_dc)
            ok = bool(np.all(np.abs(per_dc / total - agg.dc_share[r]) <= theta + 1e-9))
        out[r] = ok
    for h in range(agg.n_entities - R):
        out[R + h] = y[agg.pair_entity == R + h].sum() >= agg.buffer_need[h]
    return out


def solve(problem: Problem) -> Plan:
    """Solve ``problem`` within ``settings.time_limit_s``; never raises for infeasible requests."""
    t_start = time.monotonic()
    st = problem.settings
    requests, pre_unmet = precheck(problem.region, problem.requests, st)
    solvable = replace(problem, requests=requests)
    agg = aggregate(solvable)
    fixed_any = False
    if st.fix_satisfied and problem.previous:
        fixed = satisfied_entities(agg, st.affinity_tolerance)
        fixed_any = bool(fixed.any())
        agg = with_fixed(agg, fixed)
        logger.info("fixed %d of %d entities whose servers already satisfy them", fixed.sum(), agg.n_entities)
    y, report, model = _solve_counts(agg, solvable, t_start)
    x = ras_model.complete(model, y)
    short = x[model.index.s0 : model.index.s0 + agg.n_entities].sum() > 1e-6
    if short and fixed_any and time.monotonic() - t_start < st.time_limit_s:
        logger.info("some requests are short with satisfied entities fixed: re-solving with nothing fixed")
        agg = with_fixed(agg, np.zeros(agg.n_entities, dtype=bool))
        y2, report2, _ = _solve_counts(agg, solvable, t_start)
        if report2.objective < report.objective:
            y, report = y2, replace(report2, phases=report.phases + report2.phases)
    t_dis = time.monotonic()
    assign_idx = disaggregate(problem.region, agg, y)
    assign_idx, rack_phase = racks.improve(problem.region, agg, requests, st, assign_idx)
    phases = report.phases + ({"phase": "disaggregate", "wall_s": time.monotonic() - t_dis},) + rack_phase
    report = replace(report, phases=phases, wall_s=time.monotonic() - t_start)
    names = agg.entity_names
    assignment = {s: (names[e] if e >= 0 else None) for s, e in zip(problem.region.server, assign_idx, strict=True)}
    t_fin = time.monotonic()
    assignment, notes = topup.finish(problem.region, requests, assignment, {u.id for u in pre_unmet})
    breaches = topup.rack_breaches(problem.region, requests, assignment, st.rack_spread_limit)
    phases = report.phases + ({"phase": "topup", "wall_s": time.monotonic() - t_fin, "notes": notes},)
    report = replace(report, phases=phases, wall_s=time.monotonic() - t_start)
    need = {h: int(agg.buffer_need[k]) for k, h in enumerate(problem.region.hardware_names)}
    plan = build_plan(problem.region, problem.requests, st, assignment, problem.previous, report, pre_unmet, need)
    spanning = topup.racks_spanning_msbs(
        [problem.region.rack_names[k] for k in problem.region.rack], [problem.region.msb_names[f] for f in problem.region.msb])
    warnings = tuple(f"rack {k} spans MSBs {', '.join(f)}: its servers fail with different MSBs" for k, f in spanning.items())
    for w in warnings[:20]:
        logger.warning("inventory: %s", w)
    return replace(plan, notes=tuple(notes), inventory_warnings=warnings, rack_spread_breaches=tuple(
        {"id": b.id, "rack": b.rack, "share": b.share, "limit": b.limit} for b in breaches))


def _solve_counts(
    agg: Aggregate, problem: Problem, t_start: float
) -> tuple[np.ndarray, SolverReport, ras_model.RasModel]:
    st = problem.settings
    deadline = t_start + st.time_limit_s
    t_build = time.monotonic()
    model = ras_model.build(agg, problem.requests, st)
    phases: list[dict[str, object]] = [{
        "phase": "build", "wall_s": time.monotonic() - t_build, "pairs": agg.n_pairs,
        "classes": agg.n_classes, "columns": model.index.n_cols, "rows": int(model.matrix.shape[0]),
        "fixed_entities": int(agg.fixed.sum()),
    }]  # fmt: skip
    logger.info("model: %d classes, %d pairs, %d columns, %d rows", agg.n_classes, agg.n_pairs,
                model.index.n_cols, model.matrix.shape[0])  # fmt: skip
    cands: list[Candidate] = []
    lp_bound = float("-inf")
    bound = float("-inf")
    proven = False
    ysl = slice(model.index.y0, model.index.y0 + agg.n_pairs)

    def add(label: str, y: np.ndarray, t0: float) -> None:
        x = ras_model.complete(model, y)
        obj = ras_model.objective(model, x)
        cands.append(Candidate(label, y, obj, x))
        phases.append({"phase": label, "objective": obj, "wall_s": time.monotonic() - t0})
        logger.info("%s: objective %.3f (%.1f s)", label, obj, time.monotonic() - t0)

    # the LP relaxation is solved whatever the method: its optimum is the bound reported beside the plan
    t0 = time.monotonic()
    lp = ras_model.solve(model, relax=True, time_limit_s=deadline - t0, settings=st)
    phases.append({"phase": "lp", "status": lp.status, "objective": lp.objective, "wall_s": lp.wall_s})
    if lp.status == "Optimal":
        lp_bound = bound = lp.objective
    if st.method in (Method.AUTO, Method.LP_ROUND):
        if lp.x is not None:
            t0 = time.monotonic()
            add("lp-round-repair", round_and_repair(agg, lp.x[ysl], st), t0)
    if st.method in (Method.GREEDY, Method.AUTO):  # cheap, and sometimes better than the rounded LP
        t0 = time.monotonic()
        add("greedy", greedy(agg, st), t0)
    if st.method in (Method.AUTO, Method.MIP) and agg.n_pairs <= st.mip_max_pairs:
        left = deadline - time.monotonic()
        best = min(cands, key=lambda c: c.objective) if cands else None
        already = best is not None and best.objective - bound <= st.mip_rel_gap * max(abs(best.objective), 1e-9)
        if left > 0.5 and not already:
            start = best.x if (best is not None and st.method == Method.AUTO) else None
            t0 = time.monotonic()
            mip = ras_model.solve(model, relax=False, time_limit_s=left, settings=st, start=start)
            phases.append({"phase": "mip", "status": mip.status, "objective": mip.objective,
                           "bound": mip.bound, "wall_s": mip.wall_s, "warm_start": start is not None})  # fmt: skip
            if np.isfinite(mip.bound):
                bound = max(bound, mip.bound)
            proven = mip.status == "Optimal"
            if mip.x is not None:
                add("mip", np.rint(mip.x[ysl]).astype(np.int64), t0)
    if not cands:  # LP and MIP found nothing in time: the constructive plan is always there
        t0 = time.monotonic()
        add("greedy", greedy(agg, st), t0)
    best = min(cands, key=lambda c: c.objective)
    gap = (best.objective - bound) / max(abs(best.objective), 1e-9) if np.isfinite(bound) else float("nan")
    gap = max(0.0, gap) if np.isfinite(gap) else gap
    # optimal: proven within HiGHS's default 0.01%; within-gap: within a larger requested mip_rel_gap
    within = proven or (np.isfinite(gap) and gap <= st.mip_rel_gap + 1e-9)
    status = "optimal" if within and gap <= 1e-4 + 1e-9 else ("within-gap" if within else "feasible")
    report = SolverReport(
        status=status, method=f"{st.method.value}:{best.label}", objective=best.objective, bound=bound,
        lp_bound=lp_bound, gap=gap, wall_s=time.monotonic() - t_start, phases=tuple(phases),
    )  # fmt: skip
    return best.y, report, model


def buffer_lower_bound(problem: Problem) -> dict[str, float]:
    """Lower bound on the total embedded buffer: the LP minimum of sum_r b_r / mean_rru_r (servers).

    Same constraints as the solve (capacity after any MSB loss, classes, shared buffers, affinity),
    moves free, only the embedded buffer costed. ``frac = LB / (requested + LB)`` in servers, the
    form the plan's ``embedded_buffer_frac`` uses; ``perfect_spread_frac = 1 / number of MSBs``.
    """
    st = problem.settings
    requests, _ = precheck(problem.region, problem.requests, st)
    agg = aggregate(replace(problem, requests=requests, previous={}))
    model = ras_model.build(agg, requests, st)
    ix = model.index
    R = agg.n_reservations
    cost = np.zeros_like(model.cost)
    cost[ix.b0 : ix.b0 + R] = 1.0 / agg.mean_rru
    cost[ix.s0 : ix.s0 + agg.n_entities] = model.cost[ix.s0 : ix.s0 + agg.n_entities]
    res = ras_model.solve(replace(model, cost=cost), relax=True, time_limit_s=st.time_limit_s, settings=st)
    lb = float(np.sum(res.x[ix.b0 : ix.b0 + R] / agg.mean_rru)) if res.x is not None else float("nan")
    requested = float(np.sum(agg.capacity_rru / agg.mean_rru))
    return {
        "buffer_servers_lb": lb,
        "frac_lb": lb / (requested + lb) if requested + lb > 0 else 0.0,
        "perfect_spread_frac": 1.0 / max(1, len(problem.region.msb_names)),
        "lp_status": res.status,  # type: ignore[dict-item]
        "wall_s": res.wall_s,
    }
