"""RAS capacity-solve benchmarks (figures for docs/bench/capacity.md).

Cases (synthetic regions from ``placement_service.capacity.ras.generate``, seeded):
  small   1,000 servers / 20 reservations / 6 MSBs / 3 hardware types: time to a proven optimum.
  medium  20,000 / 200 / 20 MSBs / 6 types: time to a first feasible plan, time to a 2% gap.
  methods the medium model solved by each method (same model): LP bound, LP + rounding + repair,
          greedy, HiGHS branch-and-bound cold, AUTO (warm-started); objective and gap to the bound.
  resolve re-solve of the medium region after a 1% inventory change (0.5% fail, 0.5% new servers):
          servers moved and in-use servers moved.
  large   100,000 / 1,000 / 36 MSBs / 12 types: all constraints met within the time limit (<= 15 min),
          embedded buffer against its lower bound, then the 1% re-solve at that size.
Every plan goes through the independent checker. Load average is printed beside each figure.

    .venv/bin/python benchmarks/bench_ras.py --case small medium methods resolve
    .venv/bin/python benchmarks/bench_ras.py --case large --time-limit-s 600   # ~10-20 min, run alone
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any

import numpy as np

from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import Method, Problem, Region, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.plan import Plan
from placement_service.capacity.ras.solve import buffer_lower_bound, solve


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def checked(problem: Problem, plan: Plan) -> list[str]:
    s = problem.settings
    doc = io.requests_to_json(problem.requests, {"random_failure_buffer": s.random_failure_buffer,
                                                 "affinity_tolerance": s.affinity_tolerance})  # fmt: skip
    return check_plan(io.region_columns(problem.region), doc, plan.to_json())


def report(case: str, problem: Problem, plan: Plan, **extra: Any) -> dict[str, Any]:
    s = plan.solver
    problems = checked(problem, plan)
    first = next((p for p in s.phases if p.get("phase") in ("lp-round-repair", "greedy")), {})
    out = {
        "case": case, "servers": len(problem.region), "reservations": len(problem.requests),
        "msbs": len(problem.region.msb_names), "hardware": len(problem.region.hardware_names),
        "status": s.status, "method": s.method, "objective": round(s.objective, 3), "bound": round(s.bound, 3),
        "lp_bound": round(s.lp_bound, 3), "gap": round(s.gap, 5), "wall_s": round(s.wall_s, 2),
        "first_plan_s": round(sum(float(p.get("wall_s", 0)) for p in s.phases[: s.phases.index(first) + 1]), 2)
        if first else None,
        "unmet": len(plan.unmet), "check_violations": len(problems),
        "embedded_buffer_frac": round(float(plan.summary["embedded_buffer_frac"]), 5),  # type: ignore[arg-type]
        "moves_frac": round(float(plan.summary["moves_frac"]), 5),  # type: ignore[arg-type]
        "moves_in_use_frac": round(float(plan.summary["moves_in_use_frac"]), 5),  # type: ignore[arg-type]
        "load": load(), **extra,
        "phases": [f"{p['phase']}:{float(p.get('wall_s', 0)):.1f}s" for p in s.phases],
    }  # fmt: skip
    print(json.dumps(out), flush=True)
    if problems:
        print("  first violations:", problems[:3], file=sys.stderr)
    return out


def region_case(n: int, n_res: int, n_msb: int, n_hw: int, seed: int) -> tuple[Region, Any]:
    region = generate_region(n_servers=n, n_msbs=n_msb, n_hardware=n_hw, seed=seed)
    return region, generate_requests(region, n_reservations=n_res, fill=0.8, seed=seed)


def perturb(region: Region, new: np.ndarray, plan: Plan, frac: float, seed: int) -> Region:
    """1% change: ``frac/2`` of servers fail, ``frac/2`` new ones appear (they were hidden before);
    80% of the servers held by reservations are in use (run containers)."""
    rng = np.random.default_rng(seed)
    held = np.array([e is not None and not e.startswith("shared-buffer:") for e in plan.assignment.values()])
    in_use = held & (rng.random(len(region)) < 0.8)
    avail = region.available.copy()
    n = int(frac / 2 * len(region))
    avail[rng.choice(np.flatnonzero(avail & ~new), n, replace=False)] = False
    avail[new] = True
    return dataclasses.replace(region, available=avail, in_use=in_use)


def hide_new(region: Region, frac: float, seed: int) -> tuple[Region, np.ndarray]:
    """Mark ``frac`` of servers as not yet installed (unavailable) for the first solve."""
    rng = np.random.default_rng(seed + 99)
    new = np.zeros(len(region), dtype=bool)
    new[rng.choice(len(region), int(frac * len(region)), replace=False)] = True
    return dataclasses.replace(region, available=region.available & ~new), new


def case_small() -> None:
    for seed in range(1, 4):
        region, reqs = region_case(1000, 20, 6, 3, seed=seed)
        problem = Problem(region, reqs, Settings(time_limit_s=10))
        report(f"small-seed{seed}", problem, solve(problem))


def case_medium(time_limit_s: float) -> None:
    region, reqs = region_case(20000, 200, 20, 6, seed=1)
    # time to 2% of the bound: stop branch-and-bound as soon as the 2% gap is proven
    problem = Problem(region, reqs, Settings(time_limit_s=time_limit_s, mip_rel_gap=0.02))
    report("medium-to-2pct", problem, solve(problem))
    problem = Problem(region, reqs, Settings(time_limit_s=60))
    report("medium-60s", problem, solve(problem))


def case_methods(time_limit_s: float, per_server: bool) -> None:
    """Same region, same objective and constraints; methods differ. ``plain`` = one binary per
    (server, reservation), no integer buffer cut, HiGHS branch-and-bound from a cold start."""
    region, reqs = region_case(20000, 200, 20, 6, seed=1)
    runs = [(m.value, Settings(time_limit_s=time_limit_s, method=m))
            for m in (Method.GREEDY, Method.LP_ROUND, Method.MIP, Method.AUTO)]  # fmt: skip
    runs.append(("mip-no-cut", Settings(time_limit_s=time_limit_s, method=Method.MIP, integer_buffer_cut=False)))
    if per_server:
        runs.append(("plain-per-server-mip", Settings(time_limit_s=time_limit_s, method=Method.MIP,
                                                      aggregate_symmetric=False, integer_buffer_cut=False,
                                                      mip_max_pairs=10**9)))  # fmt: skip
    for label, st in runs:
        problem = Problem(region, reqs, st)
        t0 = time.monotonic()
        plan = solve(problem)
        report(f"methods-{label}-{int(time_limit_s)}s", problem, plan, total_s=round(time.monotonic() - t0, 1))


def case_resolve(n: int, n_res: int, n_msb: int, n_hw: int, time_limit_s: float) -> None:
    full, reqs = region_case(n, n_res, n_msb, n_hw, seed=1)
    first_region, new = hide_new(full, 0.005, seed=1)
    problem = Problem(first_region, reqs, Settings(time_limit_s=time_limit_s))
    plan = solve(problem)
    report(f"resolve-{n}-first", problem, plan)
    changed = perturb(first_region, new, plan, 0.01, seed=2)
    problem2 = Problem(changed, reqs, Settings(time_limit_s=time_limit_s), previous=plan.assignment)
    report(f"resolve-{n}-after-1pct-change", problem2, solve(problem2))
    # ablation: the same re-solve without fixing the reservations that need not move
    problem3 = dataclasses.replace(problem2, settings=Settings(time_limit_s=time_limit_s, fix_satisfied=False))
    report(f"resolve-{n}-after-1pct-change-nothing-fixed", problem3, solve(problem3))
    # every request changes by -10%..+10% on top of the inventory change
    rng = np.random.default_rng(3)
    changed_reqs = tuple(dataclasses.replace(r, capacity_rru=round(r.capacity_rru * rng.uniform(0.9, 1.1), 1))
                         for r in reqs)  # fmt: skip
    problem4 = dataclasses.replace(problem2, requests=changed_reqs)
    report(f"resolve-{n}-every-request-changed", problem4, solve(problem4))


def case_large(time_limit_s: float, resolve_time_limit_s: float) -> None:
    """100k servers: the solve, the embedded buffer against its lower bound, then a 1% re-solve."""
    full, reqs = region_case(100_000, 1000, 36, 12, seed=1)
    region, new = hide_new(full, 0.005, seed=1)
    problem = Problem(region, reqs, Settings(time_limit_s=time_limit_s))
    t0 = time.monotonic()
    plan = solve(problem)
    solve_s = time.monotonic() - t0
    bb = buffer_lower_bound(dataclasses.replace(problem, settings=Settings(time_limit_s=300)))
    report("large", problem, plan, solve_s=round(solve_s, 1), buffer_frac_lb=round(bb["frac_lb"], 5),
           buffer_perfect_spread=round(bb["perfect_spread_frac"], 5), buffer_bound_lp_s=round(bb["wall_s"], 1))  # fmt: skip
    changed = perturb(region, new, plan, 0.01, seed=2)
    problem2 = Problem(changed, reqs, Settings(time_limit_s=resolve_time_limit_s), previous=plan.assignment)
    report("large-after-1pct-change", problem2, solve(problem2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", nargs="+", default=["small", "medium", "methods", "resolve"],
                    choices=["small", "medium", "methods", "resolve", "large"])  # fmt: skip
    ap.add_argument("--time-limit-s", type=float, default=600)
    ap.add_argument("--methods-time-limit-s", type=float, default=60)
    ap.add_argument("--per-server", action="store_true", help="methods: also the plain per-server model (~2 GB)")
    args = ap.parse_args()
    print(f"# load average at start: {load()} (2 cores, shared)", flush=True)
    for case in args.case:
        if case == "small":
            case_small()
        elif case == "medium":
            case_medium(args.time_limit_s)
        elif case == "methods":
            case_methods(args.methods_time_limit_s, args.per_server)
        elif case == "resolve":
            case_resolve(20000, 200, 20, 6, 60)
        elif case == "large":
            case_large(min(args.time_limit_s, 900), 300)


if __name__ == "__main__":
    main()
