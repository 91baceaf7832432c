"""POP on RAS: k sub-problems on Dask next to the full solve, the 1,000,000-server region, and the
same run through an external Dask cluster (docs/bench/pop.md, docs/figures/pop/).

    .venv/bin/python benchmarks/bench_pop.py --case region            # 100k: full solve, then k = 2, 4, 8, 16
    .venv/bin/python benchmarks/bench_pop.py --case million           # 1M servers, LocalCluster, peak memory
    .venv/bin/python benchmarks/bench_pop.py --case external          # 100k k=16: external cluster vs LocalCluster
    .venv/bin/python benchmarks/bench_pop.py --plot results.jsonl     # the k vs quality/time figure
    .venv/bin/python benchmarks/bench_pop.py --case drift --servers 30000 --ks 4 8     # hardware drift,
        # rare classes; full solve, then POP k on an external cluster (scheduler + 2 workers, processes)

Every plan goes through the project's own checker (``ras/check.py``); the quality of every plan is
stated against the full problem's LP bound (the LP relaxation of the aggregated model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from placement_service.capacity.pop.solve import PopOptions, solve_pop
from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.plan import Plan
from placement_service.capacity.ras.solve import buffer_lower_bound, solve


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class PeakMemory:
    """Peak resident memory of this process and all its descendants (Dask workers), sampled at 2 Hz."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.5)

    def __enter__(self) -> PeakMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def case(n: int, n_res: int = 1000, seed: int = 1, drift: float = 0.0) -> Problem:
    region = generate_region(n_servers=n, n_msbs=36, n_hardware=12, drift=drift, seed=seed)
    return Problem(region, generate_requests(region, n_reservations=n_res, fill=0.8, seed=seed), Settings())


def checked(problem: Problem, plan: Plan) -> list[str]:
    s = problem.settings
    doc = io.requests_to_json(problem.requests, {"random_failure_buffer": s.random_failure_buffer,
                                                 "affinity_tolerance": s.affinity_tolerance})  # fmt: skip
    return check_plan(io.region_columns(problem.region), doc, plan.to_json())


def row(label: str, problem: Problem, plan: Plan, wall_s: float, bound: float, **extra: Any) -> dict[str, Any]:
    violations = checked(problem, plan)
    obj = plan.solver.objective
    out = {
        "case": label, "servers": len(problem.region), "wall_s": round(wall_s, 1), "objective": round(obj, 1),
        "full_lp_bound": round(bound, 1), "gap_to_bound": round((obj - bound) / obj, 5),
        "unmet": len(plan.unmet), "check_violations": len(violations),
        "unmet_detail": [[u.id, u.constraint, round(u.shortfall, 3)] for u in plan.unmet[:5]],
        "embedded_buffer_frac": round(float(plan.summary["embedded_buffer_frac"]), 5),  # type: ignore[arg-type]
        "load": load(), **extra,
    }  # fmt: skip
    print(json.dumps(out), flush=True)
    if violations:
        print("  first violations:", violations[:3], file=sys.stderr)
    return out


def phase_info(plan: Plan) -> dict[str, Any]:
    """Where a POP run's time went: partition, coalesce + repair (and how many reservations the second
    repair re-solved)."""
    ph = {str(p.get("phase")): p for p in plan.solver.phases}
    part, co = ph.get("pop-partition", {}), ph.get("pop-coalesce-repair", {})
    return {"partition_s": round(float(part.get("wall_s", 0.0)), 1), "coalesce_repair_s": round(float(co.get("wall_s", 0.0)), 1),
            "resolved": co.get("reservations_resolved"), "servers_changed_by_repair": co.get("servers_changed_by_repair")}  # fmt: skip


def run_region(ks: list[int], full_time_limit_s: float, part_time_limit_s: float | None,
               full_from: str | None, method: str = "auto") -> None:  # fmt: skip
    from placement_service.capacity.ras.domain import Method

    base = case(100_000)
    problem = Problem(base.region, base.requests, Settings(method=Method(method)))
    bb = buffer_lower_bound(problem)
    print(json.dumps({"buffer_frac_lb": round(bb["frac_lb"], 5), "load": load()}), flush=True)
    if full_from:  # the full solve's row from an earlier run of this script (same instance)
        full_row = next(json.loads(x) for x in Path(full_from).read_text().splitlines() if '"case": "full"' in x)
        print(json.dumps({**full_row, "reused_from": full_from}), flush=True)
        full_obj, full_wall, lp = full_row["objective"], full_row["wall_s"], full_row["full_lp_bound"]
    else:
        t0 = time.monotonic()
        full = solve(Problem(problem.region, problem.requests, Settings(time_limit_s=full_time_limit_s)))
        full_wall = time.monotonic() - t0
        full_obj, lp = full.solver.objective, full.solver.lp_bound
        first = next((p for p in full.solver.phases if p.get("phase") == "lp-round-repair"), {})
        row("full", problem, full, full_wall, lp, time_limit_s=full_time_limit_s,
            first_plan_objective=first.get("objective"), buffer_frac_lb=round(bb["frac_lb"], 5))  # fmt: skip
    for k in ks:
        t0 = time.monotonic()
        plan, pop = solve_pop(problem, PopOptions(k=k, workers=2, part_time_limit_s=part_time_limit_s), progress=None)
        wall = time.monotonic() - t0
        row(f"pop-k{k}" + ("" if method == "auto" else f"-{method}"), problem, plan, wall, lp, k=k, method=method, vs_full=round(plan.solver.objective / full_obj - 1, 5),
            speedup=round(full_wall / wall, 2), split_clients=pop["split_clients"],
            part_wall_max_s=round(max(p["wall_s"] for p in pop["parts"]), 1),  # type: ignore[index,union-attr]
            buffer_frac_lb=round(bb["frac_lb"], 5), **phase_info(plan))  # fmt: skip


def run_million(k: int, part_time_limit_s: float | None, drift: float = 0.0) -> None:
    t0 = time.monotonic()
    with PeakMemory() as mem:
        problem = case(1_000_000, drift=drift)
        t_gen = time.monotonic() - t0
        plan, pop = solve_pop(problem, PopOptions(k=k, part_time_limit_s=part_time_limit_s), progress=None)
        wall = time.monotonic() - t0
    lp = float(pop["full_lp_bound"]["lp_bound"]) if pop["full_lp_bound"] else float("nan")  # type: ignore[index]
    row(f"million-pop-k{k}" + (f"-drift{drift:g}" if drift else ""), problem, plan, wall, lp, k=k,
        generate_s=round(t_gen, 1), drift=drift,
        peak_rss_gib=round(mem.peak / 2**30, 2), complete=pop["complete"])  # fmt: skip


class ExternalCluster:
    """``dask scheduler`` and ``n`` single-thread ``dask worker`` processes on 127.0.0.1 (what
    ``--dask-scheduler`` connects to), stopped on exit."""

    def __init__(self, n_workers: int = 2) -> None:
        self.n_workers = n_workers
        self.procs: list[subprocess.Popen[bytes]] = []
        self.address = ""
        self._file = Path(f"/tmp/bench-pop-sched-{os.getpid()}.json")

    def __enter__(self) -> ExternalCluster:
        bin_dir = Path(sys.executable).parent
        self.procs.append(subprocess.Popen(
            [str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(self._file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        for _ in range(150):
            if self._file.exists() and self._file.read_text().strip():
                break
            time.sleep(0.2)
        self.address = json.loads(self._file.read_text())["address"]
        for _ in range(self.n_workers):
            self.procs.append(subprocess.Popen(
                [str(bin_dir / "dask"), "worker", self.address, "--nthreads", "1", "--nworkers", "1",
                 "--no-dashboard", "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(self.n_workers, timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            p.terminate()
            p.wait(timeout=30)
        self._file.unlink(missing_ok=True)


def drift_case(n: int, drift: float, seed: int) -> Problem:
    """The issue's realistic region at 30k (16 MSBs, 6 hardware types, 240 requests at 70%); from 100k
    on the RAS benchmark's layout (36 MSBs, 12 types, 1,000 requests at 80%); both with drift."""
    if n < 100_000:
        region = generate_region(n_servers=n, n_msbs=16, n_hardware=6, drift=drift, seed=seed)
        return Problem(region, generate_requests(region, n_reservations=240, fill=0.7, seed=seed), Settings())
    region = generate_region(n_servers=n, n_msbs=36, n_hardware=12, drift=drift, seed=seed)
    return Problem(region, generate_requests(region, n_reservations=1000, fill=0.8, seed=seed), Settings())


def run_drift(n: int, drift: float, ks: list[int], full_time_limit_s: float, seed: int, full: bool) -> None:
    """Full solve and POP k (default method, external cluster) side by side on a drifted region."""
    import numpy as np

    from placement_service.capacity.pop.ras_pop import class_key
    from placement_service.capacity.pop.solve import auto_k

    t0 = time.monotonic()
    problem = drift_case(n, drift, seed)
    key = class_key(problem.region)[problem.region.available]
    _, sizes = np.unique(key, return_counts=True)
    print(json.dumps({"case": f"drift-{n}", "generate_s": round(time.monotonic() - t0, 1), "classes": len(sizes),
                      "classes_of_1_3_servers": int((sizes <= 3).sum()), "smallest_class": int(sizes.min()),
                      "auto_k": auto_k(problem.region), "load": load()}), flush=True)  # fmt: skip
    full_wall = lp = full_obj = float("nan")
    if full:
        st = Settings(time_limit_s=full_time_limit_s)
        t0 = time.monotonic()
        plan = solve(Problem(problem.region, problem.requests, st))
        full_wall = time.monotonic() - t0
        full_obj, lp = plan.solver.objective, plan.solver.lp_bound
        first = next((p for p in plan.solver.phases if p.get("phase") == "lp-round-repair"), {})
        row(f"drift-{n}-full", problem, plan, full_wall, lp, time_limit_s=full_time_limit_s,
            first_plan_objective=first.get("objective"), first_plan_wall_s=first.get("wall_s"))  # fmt: skip
    with ExternalCluster(2) as cl:
        for k in ks:
            t0 = time.monotonic()
            plan, pop = solve_pop(problem, PopOptions(k=k, seed=seed, scheduler=cl.address), progress=None)
            wall = time.monotonic() - t0
            bound = float(pop["full_lp_bound"]["lp_bound"]) if pop["full_lp_bound"] else lp  # type: ignore[index]
            row(f"drift-{n}-pop-k{k}-external", problem, plan, wall, bound, k=k, method="auto (parts: lp-round)",
                vs_full=round(plan.solver.objective / full_obj - 1, 5), speedup=round(full_wall / wall, 2),
                complete=pop["complete"], split_clients=pop["split_clients"],
                part_wall_max_s=round(max(p["wall_s"] for p in pop["parts"]), 1),  # type: ignore[index,union-attr]
                **phase_info(plan))  # fmt: skip


def run_external(k: int, part_time_limit_s: float, method: str) -> None:
    """Same POP run on a LocalCluster and on a scheduler + two workers started as separate processes.

    ``method`` lp-round makes every sub-problem stop on its own (no branch-and-bound cut off by the
    clock), so the plan cannot depend on how busy the machine is."""
    from placement_service.capacity.ras.domain import Method

    base = case(100_000)
    problem = Problem(base.region, base.requests, Settings(method=Method(method)))
    bin_dir = Path(sys.executable).parent
    sched = subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                              "--dashboard-address", "127.0.0.1:0", "--scheduler-file", "/tmp/bench-pop-sched.json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    procs = [sched]
    try:
        for _ in range(100):
            if Path("/tmp/bench-pop-sched.json").exists():
                break
            time.sleep(0.2)
        addr = json.loads(Path("/tmp/bench-pop-sched.json").read_text())["address"]
        for _ in range(2):
            procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", addr, "--nthreads", "1", "--nworkers", "1",
                                           "--no-dashboard", "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        time.sleep(5)
        plans = {}
        for label, opts in (("local", PopOptions(k=k, workers=2, part_time_limit_s=part_time_limit_s)),
                            ("external", PopOptions(k=k, scheduler=addr, part_time_limit_s=part_time_limit_s))):
            t0 = time.monotonic()
            plan, pop = solve_pop(problem, opts, progress=None)
            wall = time.monotonic() - t0
            lp = float(pop["full_lp_bound"]["lp_bound"])  # type: ignore[index]
            row(f"external-check-{label}-k{k}", problem, plan, wall, lp, k=k, method=method)
            plans[label] = plan.assignment
        same = plans["local"] == plans["external"]
        diff = sum(1 for s in plans["local"] if plans["local"][s] != plans["external"].get(s))
        print(json.dumps({"case": f"external-vs-local-k{k}", "same_plan": same, "servers_differing": diff}), flush=True)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
        Path("/tmp/bench-pop-sched.json").unlink(missing_ok=True)


def plot(path: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]
    full = next(r for r in rows if r.get("case") == "full")
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if str(r.get("case", "")).startswith("pop-k"):
            series.setdefault(str(r.get("method", "auto")), []).append(r)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for method, pops in sorted(series.items()):
        pops.sort(key=lambda r: r["k"])
        ks = [r["k"] for r in pops]
        label = f"POP, sub-problems {method}"
        ax[0].plot(ks, [100 * r["gap_to_bound"] for r in pops], "o-", label=label)
        ax[1].plot(ks, [r["wall_s"] for r in pops], "o-", label=f"{label} (2 Dask workers)")
    ax[0].axhline(100 * full["gap_to_bound"], color="gray", ls="--", label=f"full solve ({full['wall_s']:.0f} s)")
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("k (sub-problems)")
    ax[0].set_ylabel("gap to the full LP bound (%)")
    ax[0].legend(fontsize=8)
    ax[1].axhline(full["wall_s"], color="gray", ls="--", label="full solve")
    ax[1].set_xscale("log", base=2)
    ax[1].set_yscale("log")
    ax[1].set_xlabel("k (sub-problems)")
    ax[1].set_ylabel("wall time (s)")
    ax[1].legend(fontsize=8)
    fig.suptitle("RAS 100,000 servers / 1,000 reservations: POP k vs quality and time")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", nargs="+", default=["region"], choices=["region", "million", "external", "drift"])
    ap.add_argument("--servers", type=int, nargs="+", default=[30_000], help="drift: region sizes")
    ap.add_argument("--drift", type=float, default=0.1, help="drift: probability per (MSB, out-of-band generation)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-full", action="store_true", help="drift: skip the full solve")
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--full-time-limit-s", type=float, default=600)
    ap.add_argument("--part-time-limit-s", type=float, default=None)
    ap.add_argument("--million-k", type=int, default=16)
    ap.add_argument("--million-drift", type=float, default=0.0, help="million: hardware drift (0: none)")
    ap.add_argument("--external-method", default="auto", choices=["auto", "lp-round"])
    ap.add_argument("--method", default="auto", choices=["auto", "lp-round"], help="region: the sub-problems' method")
    ap.add_argument("--full-from", help="reuse the full solve's row from an earlier results file (same instance)")
    ap.add_argument("--plot", help="results JSON lines -> docs/figures/pop/k_quality_time.png")
    ap.add_argument("--plot-out", default="docs/figures/pop/k_quality_time.png")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot, args.plot_out)
        return
    print(f"# load average at start: {load()} (2 cores, shared)", flush=True)
    for c in args.case:
        if c == "region":
            run_region(args.ks, args.full_time_limit_s, args.part_time_limit_s, args.full_from, args.method)
        elif c == "million":
            run_million(args.million_k, args.part_time_limit_s, args.million_drift)
        elif c == "external":
            run_external(16, args.part_time_limit_s or 4.0, args.external_method)
        elif c == "drift":
            for n in args.servers:
                run_drift(n, args.drift, args.ks, args.full_time_limit_s, args.seed, not args.no_full)


if __name__ == "__main__":
    main()
