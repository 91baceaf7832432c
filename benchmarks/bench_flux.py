"""Flux benchmarks (figures for docs/bench/flux.md).

Cases (synthetic instances from ``placement_service.capacity.flux.generate``, seeded, 3 regions refreshed):
  production  a plan with >= 24,000 variables and >= 36,000 constraints (the paper's production run:
              24k variables, 36k constraints, 5 s): build + solve wall and CPU seconds, interior point
              (our default above 20k columns) next to dual simplex (the RAS default) on the same model.
  large       the same generator 10x larger (~10x variables and constraints), interior point, single solve.
  pop         single interior-point solve next to POP (``pop.flux_pop``: traffic from the plan with
              services aggregated per class, services split into k random equal groups with each
              pool's supply split by need, parts on a Dask LocalCluster of 2 worker processes,
              coalesced, regions left short re-solved) for k = 2, 4, 8, on the production
              instance and the 10x one; objective scored on the full model, gap to the single solve.
  ledger      events/s written to the SQLite ledger by 1 and by 4 writer processes (batches of 50 events
              chained by antecedents), then the orchestrator's activation rate.
Every plan goes through the independent checker. Load average is printed beside each figure.

    nice -n 10 .venv/bin/python benchmarks/bench_flux.py --case production large ledger
    nice -n 10 .venv/bin/python benchmarks/bench_flux.py --case pop --pop-shapes production large --pop-k 2 4 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from typing import Any

from placement_service.capacity.flux.checker import check
from placement_service.capacity.flux.generate import generate
from placement_service.capacity.flux.ledger import Ledger
from placement_service.capacity.flux.plan_model import build
from placement_service.capacity.flux.planner import extract, solve
from placement_service.capacity.pop.execute import connect, map_parts
from placement_service.capacity.pop.flux_pop import run_inline, solve_pop

SHAPES = {
    # regions, services, products, hardware, timesteps (t0 + 4 future)
    "production": (12, 170, 10, 3, 5),
    "medium": (24, 340, 10, 3, 5),  # 4x the production instance's region x service product
    "large": (24, 850, 10, 3, 5),
}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def plan_case(case: str, methods: list[str], time_limit_s: float) -> list[dict[str, Any]]:
    R, S, P, H, T = SHAPES[case]
    inst, _ = generate(
        n_regions=R, n_services=S, n_products=P, n_hardware=H, n_timesteps=T, seed=1, refresh=3
    )
    out = []
    for method in methods:
        t0, c0 = time.perf_counter(), time.process_time()
        model = build(inst)
        build_s = time.perf_counter() - t0
        status, sol, obj, _bound, wall = solve(model, time_limit_s=time_limit_s, method=method)
        total_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        row: dict[str, Any] = {
            "case": case, "shape_RSPHT": [R, S, P, H, T], "method": method, "variables": model.index.n_cols,
            "constraints": int(model.matrix.shape[0]), "nonzeros": int(model.matrix.nnz), "status": status,
            "objective": round(obj, 4), "build_s": round(build_s, 2), "solve_s": round(wall, 2),
            "total_s": round(total_s, 2), "cpu_s": round(cpu_s, 2), "load": load(),
        }  # fmt: skip
        if sol is not None:
            doc = extract(model, sol)
            v = check(doc)
            row.update(deficits=len(doc["deficits"]), check_violations=len(v),
                       largest_region_share=doc["metrics"]["largest_region_share"])  # fmt: skip
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def pop_case(shapes: list[str], ks: list[int], time_limit_s: float, workers: int = 2) -> list[dict[str, Any]]:
    """Per shape: the single solve, then POP for every k (same instance, same process, one run)."""
    out = []
    for case in shapes:
        R, S, P, H, T = SHAPES[case]
        inst, _ = generate(n_regions=R, n_services=S, n_products=P, n_hardware=H, n_timesteps=T, seed=1, refresh=3)
        single = plan_case(case, ["ipm"], time_limit_s)[0]
        single.update(case=f"pop:{case}", method="single solve (interior point)")
        out.append(single)
        t0 = time.perf_counter()
        client, cluster = connect(None, workers)
        start_s = time.perf_counter() - t0
        try:
            for k in ks:
                for where in ("dask", "inline"):
                    runner = map_parts(client, 3 * time_limit_s) if where == "dask" else run_inline
                    row = _pop_row(inst, case, k, where, runner, single["objective"], time_limit_s)
                    row["dask_start_s"] = round(start_s, 2) if where == "dask" else 0.0
                    out.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return out


def _pop_row(inst: Any, case: str, k: int, where: str, runner: Any, single_obj: float,
             time_limit_s: float) -> dict[str, Any]:  # fmt: skip
    R, S, P, H, T = SHAPES[case]
    t0, c0 = time.perf_counter(), time.process_time()
    doc = solve_pop(inst, k, seed=0, time_limit_s=time_limit_s, runner=runner)
    wall = time.perf_counter() - t0
    pop = doc["pop"]
    v = check(doc)
    obj = doc["solver"]["objective"]
    phase = {ph["phase"]: ph for ph in pop["phases"]}
    return {
        "case": f"pop:{case}", "shape_RSPHT": [R, S, P, H, T],
        "method": f"pop k={k} ({'2 Dask worker processes' if where == 'dask' else 'parts one after another, one process'})",
        "variables": doc["solver"]["variables"], "objective": round(obj, 4),
        "gap_pct": round(100.0 * (obj - single_obj) / abs(single_obj), 3), "total_s": round(wall, 2),
        # inline, the parts' CPU is this process's; on Dask it is the workers'
        "cpu_s": round(time.process_time() - c0 + (pop["parts_cpu_s"] if where == "dask" else 0.0), 2),
        "traffic_s": phase["traffic"]["wall_s"], "parts_wall_s": [p["wall_s"] for p in pop["parts"]],
        "part_variables": [p["variables"] for p in pop["parts"]],
        "repaired_regions": phase.get("repair", {}).get("regions", []),
        "repair_s": phase.get("repair", {}).get("wall_s", 0.0), "deficits": len(doc["deficits"]),
        "check_violations": len(v), "largest_region_share": doc["metrics"]["largest_region_share"], "load": load(),
    }  # fmt: skip


def _writer(path: str, k: int, batches: int, size: int, q: Any) -> None:
    t0 = time.perf_counter()
    with Ledger(path) as led:
        prev = None
        for b in range(batches):
            evs = []
            for i in range(size):
                eid = f"w{k}/b{b}/e{i}"
                evs.append({"id": eid, "kind": "resize", "timestamp": float(b), "antecedents": [prev] if prev else [],
                            "payload": {"service": f"s{i}", "region": "r", "hardware": "h", "amount": 1.0}})  # fmt: skip
                prev = eid
            led.add(evs, writer=f"writer{k}")
    q.put(time.perf_counter() - t0)


def ledger_case(batches: int = 40, size: int = 50) -> list[dict[str, Any]]:
    out = []
    ctx = mp.get_context("spawn")
    for writers in (1, 4):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ledger.sqlite")
            Ledger(path).close()
            q = ctx.Queue()
            procs = [ctx.Process(target=_writer, args=(path, k, batches, size, q)) for k in range(writers)]
            t0 = time.perf_counter()
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            wall = time.perf_counter() - t0
            n = writers * batches * size
            with Ledger(path) as led:
                t1 = time.perf_counter()
                rep = led.orchestrate()
                orch_s = time.perf_counter() - t1
                assert len(led.events()) == n
            row = {"case": "ledger", "writers": writers, "events": n, "wall_s": round(wall, 2),
                   "events_per_s": round(n / wall, 1), "orchestrate_s": round(orch_s, 3),
                   "activated": len(rep.activated), "load": load()}  # fmt: skip
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--case", nargs="+", default=["production", "ledger"], choices=["production", "large", "pop", "ledger"]
    )
    ap.add_argument("--pop-shapes", nargs="+", default=["production", "large"], choices=sorted(SHAPES))
    ap.add_argument("--pop-k", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--time-limit-s", type=float, default=600.0)
    ap.add_argument("--out", help="append the rows as JSON lines to this file")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for case in args.case:
        if case == "production":
            rows += plan_case(case, ["ipm", "simplex"], min(args.time_limit_s, 120.0))
        elif case == "large":
            rows += plan_case(case, ["ipm"], args.time_limit_s)
        elif case == "pop":
            rows += pop_case(args.pop_shapes, args.pop_k, args.time_limit_s)
        else:
            rows += ledger_case()
    if args.out:
        with open(args.out, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
