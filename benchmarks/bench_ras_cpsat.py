"""Optional: the same aggregated RAS model solved by OR-Tools CP-SAT, in a separate process.

``highspy`` and OR-Tools both bundle HiGHS and clash in one process, and installing OR-Tools into the
project virtualenv would downgrade protobuf under the gRPC code, so CP-SAT runs in its own virtualenv
(``--python``, e.g. ``python3 -m venv /tmp/ortools-venv && /tmp/ortools-venv/bin/pip install ortools
numpy``). This process builds the aggregated data (classes, pairs, previous counts), the child builds
and solves the CP-SAT model with integer-scaled coefficients (RRU x100, objective x1000), and this
process evaluates the child's integer counts with the project's exact objective
(``ras_model.complete``) and runs the independent checker on the resulting servers.

    .venv/bin/python benchmarks/bench_ras_cpsat.py --python /tmp/ortools-venv/bin/python --time-limit-s 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r'''
import json, sys, time
import numpy as np
from ortools.sat.python import cp_model
d = dict(np.load(sys.argv[1]))
meta = json.loads(open(sys.argv[2]).read())
R, E, S = meta["R"], meta["E"], 100  # RRU scale
pc, pe, pv = d["pair_class"], d["pair_entity"], np.rint(d["pair_value"] * S).astype(int)
prev, prev_idle = d["pair_prev"], d["pair_prev_idle"]
size, cmsb, cdc = d["class_size"], d["class_msb"], d["class_dc"]
cap = np.ceil(d["capacity_rru"] * S - 1e-6).astype(int)
mean, need, share = d["mean_rru"], d["buffer_need"], d["dc_share"]
cost = meta["costs"]
m = cp_model.CpModel()
# variables
y = [m.NewIntVar(0, int(size[c]), f"y{p}") for p, c in enumerate(pc)]
big = int(pv.max() * size.sum()) + 1 if len(pv) else 1
b = [m.NewIntVar(0, big, f"b{r}") for r in range(R)]
s = [m.NewIntVar(0, big, f"s{e}") for e in range(E)]
obj = []
# one place per server
for c in range(len(size)):
    m.Add(sum(y[p] for p in np.flatnonzero(pc == c)) <= int(size[c]))
by_e = [np.flatnonzero(pe == e) for e in range(E)]
for r in range(R):
    ps = by_e[r]
    total = sum(int(pv[p]) * y[p] for p in ps)
    m.Add(total - b[r] + s[r] >= int(cap[r]))  # capacity after the worst MSB
    for f in np.unique(cmsb[pc[ps]]):
        m.Add(b[r] >= sum(int(pv[p]) * y[p] for p in ps if cmsb[pc[p]] == f))
    if not np.isnan(share[r, 0]):
        for dd in np.unique(cdc[pc[ps]]):
            in_d = sum(int(pv[p]) * y[p] for p in ps if cdc[pc[p]] == dd)
            hi = m.NewIntVar(0, big * S, f"ah{r}_{dd}")
            lo = m.NewIntVar(0, big * S, f"al{r}_{dd}")
            up = int(round((share[r, dd] + meta["theta"]) * S))
            dn = int(round((share[r, dd] - meta["theta"]) * S))
            m.Add(S * in_d - up * total <= hi)
            m.Add(S * in_d - dn * total + lo >= 0)
            obj.append(int(round(cost["affinity"] / mean[r] * 10 / S)) * (hi + lo))
    obj.append(int(round(cost["buffer"] / mean[r] * 1000 / S)) * b[r])
    obj.append(int(round(cost["unmet"] / mean[r] * 1000 / S)) * s[r])
    obj.extend(int(round(cost["alloc"] * 1000)) * y[p] for p in ps)
for h in range(E - R):
    m.Add(sum(y[p] for p in by_e[R + h]) + s[R + h] >= int(need[h]))
    obj.append(int(cost["unmet"] * 1000) * s[R + h])
for p in np.flatnonzero(prev > 0):  # departures, idle ones first
    di = m.NewIntVar(0, int(prev_idle[p]), f"di{p}")
    du = m.NewIntVar(0, int(prev[p] - prev_idle[p]), f"du{p}")
    m.Add(y[p] + di + du >= int(prev[p]))
    obj.append(int(cost["idle"] * 1000) * di + int(cost["in_use"] * 1000) * du)
m.Minimize(sum(obj))
solver = cp_model.CpSolver()
solver.parameters.max_time_in_seconds = meta["time_limit_s"]
solver.parameters.num_search_workers = meta["workers"]
solver.parameters.random_seed = 0
t0 = time.monotonic()
status = solver.Solve(m)
out = {"status": solver.StatusName(status), "wall_s": time.monotonic() - t0,
       "bound_scaled": solver.BestObjectiveBound(), "objective_scaled": solver.ObjectiveValue() if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None,
       "y": [int(solver.Value(v)) for v in y] if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None}
print(json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="interpreter of a virtualenv with ortools and numpy")
    ap.add_argument("--time-limit-s", type=float, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--servers", type=int, default=20000)
    ap.add_argument("--reservations", type=int, default=200)
    ap.add_argument("--msbs", type=int, default=20)
    ap.add_argument("--hardware", type=int, default=6)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from placement_service.capacity.ras import io, ras_model
    from placement_service.capacity.ras.aggregate import aggregate
    from placement_service.capacity.ras.check import check_plan
    from placement_service.capacity.ras.disaggregate import disaggregate
    from placement_service.capacity.ras.domain import Problem, Settings
    from placement_service.capacity.ras.generate import generate_region, generate_requests

    region = generate_region(n_servers=args.servers, n_msbs=args.msbs, n_hardware=args.hardware, seed=1)
    reqs = generate_requests(region, n_reservations=args.reservations, fill=0.8, seed=1)
    st = Settings(time_limit_s=args.time_limit_s)
    problem = Problem(region, reqs, st)
    agg = aggregate(problem)
    model = ras_model.build(agg, reqs, st)
    lp = ras_model.solve(model, relax=True, time_limit_s=60, settings=st)
    with tempfile.TemporaryDirectory() as tmp:
        data, meta = os.path.join(tmp, "agg.npz"), os.path.join(tmp, "meta.json")
        np.savez(data, **{k: getattr(agg, k) for k in ("pair_class", "pair_entity", "pair_value", "pair_prev",
                                                       "pair_prev_idle", "class_size", "class_msb", "class_dc",
                                                       "capacity_rru", "mean_rru", "buffer_need", "dc_share")})  # fmt: skip
        for workers in args.workers:
            Path(meta).write_text(json.dumps({
                "R": agg.n_reservations, "E": agg.n_entities, "theta": st.affinity_tolerance,
                "time_limit_s": args.time_limit_s, "workers": workers,
                "costs": {"buffer": st.buffer_cost_per_server, "unmet": st.unmet_cost_per_server,
                          "alloc": st.allocation_cost_per_server, "idle": st.move_cost_idle,
                          "in_use": st.move_cost_in_use, "affinity": st.affinity_cost_per_server},
            }))  # fmt: skip
            t0 = time.monotonic()
            run = subprocess.run([args.python, "-c", CHILD, data, meta], capture_output=True, text=True,
                                 timeout=args.time_limit_s * 3 + 120)  # fmt: skip
            total_s = time.monotonic() - t0
            if run.returncode != 0:
                print(json.dumps({"solver": "cp-sat", "workers": workers, "error": run.stderr[-500:]}))
                continue
            res = json.loads(run.stdout.strip().splitlines()[-1])
            out = {"solver": "cp-sat", "workers": workers, "status": res["status"], "solve_s": round(res["wall_s"], 1),
                   "total_s": round(total_s, 1), "lp_bound": round(lp.objective, 3),
                   "cp_bound_servers": round(res["bound_scaled"] / 1000, 3),
                   "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}  # fmt: skip
            if res["y"] is not None:
                y = np.array(res["y"], dtype=np.int64)
                x = ras_model.complete(model, y)
                obj = ras_model.objective(model, x)
                assign = disaggregate(region, agg, y)
                names = agg.entity_names
                doc = {"assignment": {s: (names[e] if e >= 0 else None) for s, e in zip(region.server, assign, strict=True)},
                       "unmet": []}  # fmt: skip
                rdoc = io.requests_to_json(reqs, {"random_failure_buffer": st.random_failure_buffer})
                violations = check_plan(io.region_columns(region), rdoc, doc)
                out.update(objective=round(obj, 3), gap_to_lp=round((obj - lp.objective) / obj, 5),
                           shortfall_entities=int((x[model.index.s0 : model.index.s0 + agg.n_entities] > 1e-6).sum()),
                           check_violations=len(violations))  # fmt: skip
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
