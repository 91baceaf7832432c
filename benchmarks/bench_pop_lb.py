"""Query load balancing: POP (k = 4, 16) next to the exact MILP, rounds of the paper's generator
(docs/bench/pop.md). As in the paper's benchmark each system keeps its own placement from round to
round (moves are stateful); POP keeps one server grouping for all rounds.

    .venv/bin/python benchmarks/bench_pop_lb.py --shards 1024 --servers 128 --rounds 5 --exact-time-limit-s 300
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from placement_service.capacity.pop.loadbal import (
    LoadProblem,
    check,
    generate_loads,
    initial_placement,
    solve_exact,
    solve_pop,
)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=1024)
    ap.add_argument("--servers", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--exact-time-limit-s", type=float, default=300)
    ap.add_argument("--part-time-limit-s", type=float, default=60)
    ap.add_argument("--mip-rel-gap", type=float, default=0.05, help="as the paper's code asks of its solver")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    print(f"# load average at start: {load()} (2 cores, shared)", flush=True)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(args.shards)
    start = initial_placement(args.servers, args.shards)
    state = {"exact": start, **{f"pop-{k}": start for k in args.ks}}
    for rnd in range(args.rounds):
        loads = generate_loads(args.shards, rng, order)
        p = LoadProblem(loads, np.ones(args.shards), state["exact"])
        ex = solve_exact(p, args.exact_time_limit_s, args.mip_rel_gap)
        row = {"round": rnd, "method": "exact", "status": ex.status, "moves": ex.moves, "bound": ex.bound,
               "wall_s": round(ex.wall_s, 2), "violations": len(check(p, ex)) if ex.moves >= 0 else None,
               "load": load()}  # fmt: skip
        print(json.dumps(row), flush=True)
        if ex.moves >= 0:
            state["exact"] = ex.x
        for k in args.ks:
            q = LoadProblem(loads, np.ones(args.shards), state[f"pop-{k}"])
            po = solve_pop(q, k, seed=args.seed, time_limit_s=args.part_time_limit_s, mip_rel_gap=args.mip_rel_gap)
            print(json.dumps({"round": rnd, "method": f"pop-{k}", "status": po.status, "moves": po.moves,
                              "wall_s_serial": round(po.wall_s, 2), "wall_s_parallel": round(max(po.parts_wall_s), 2),
                              "violations": len(check(q, po)), "load": load()}), flush=True)  # fmt: skip
            state[f"pop-{k}"] = po.x

if __name__ == "__main__":
    main()
