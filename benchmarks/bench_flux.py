"""Flux benchmarks (figures for docs/bench/flux.md).

Cases (synthetic instances from ``placement_service.capacity.flux.generate``, seeded, 3 regions refreshed):
  production  a plan with >= 24,000 variables and >= 36,000 constraints (the paper's production run:
              24k variables, 36k constraints, 5 s): build + solve wall and CPU seconds, interior point
              (our default above 20k columns) next to dual simplex (the RAS default) on the same model.
  large       the same generator 10x larger (~10x variables and constraints), interior point, single solve.
  ledger      events/s written to the SQLite ledger by 1 and by 4 writer processes (batches of 50 events
              chained by antecedents), then the orchestrator's activation rate.
Every plan goes through the independent checker. Load average is printed beside each figure.

    nice -n 10 .venv/bin/python benchmarks/bench_flux.py --case production large ledger
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

SHAPES = {
    # regions, services, products, hardware, timesteps (t0 + 4 future)
    "production": (12, 170, 10, 3, 5),
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
        "--case", nargs="+", default=["production", "ledger"], choices=["production", "large", "ledger"]
    )
    ap.add_argument("--time-limit-s", type=float, default=600.0)
    ap.add_argument("--out", help="append the rows as JSON lines to this file")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for case in args.case:
        if case == "production":
            rows += plan_case(case, ["ipm", "simplex"], min(args.time_limit_s, 120.0))
        elif case == "large":
            rows += plan_case(case, ["ipm"], args.time_limit_s)
        else:
            rows += ledger_case()
    if args.out:
        with open(args.out, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
