"""Issue 14, item 4: failed accesses at 3 replicas up to ~40% utilization, every placement side by
side, on the generated and the two real-trace datacenters, and what HDFS-H-cobusy-mover's moves cost.

Three ``harvest sim availability`` runs at the standard size (the argv of ``run_results.py``'s
availability experiments, restricted to 3 replicas and levels 0.2-0.4, HDFS-H-risk left out), then
a Markdown report of the three (``WORK/report.md``, the same generator as ``docs/results.md``) and a
one-line-per-point table with the load average::

    .venv/bin/python benchmarks/bench_sim_mover.py --work /tmp/mover          # ~25 min on 2 cores
    .venv/bin/python benchmarks/bench_sim_mover.py --work /tmp/mover --report-only
    .venv/bin/python benchmarks/bench_sim_mover.py --work /tmp/mover-s1 --seed 1 --runs 3 \
        --systems HDFS-H,HDFS-H-cobusy-mover                                 # more runs, other streams

An experiment whose ``results.json`` exists is not run again (delete it, or pass ``--force``).
Sections are named ``<datacenter>-availability-r3-le40`` (with ``--seed N`` > 0: ``...-seedN``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_results import AZ, GEN, HARVEST, PL, ROOT  # noqa: E402

SYSTEMS = "HDFS-Stock,HDFS-H,HDFS-H-hours,HDFS-H-cobusy,HDFS-H-cobusy-mover"
COMMON = ["--levels", "0.2,0.3,0.4", "--replicas", "3", "--blocks", "200000", "--accesses", "1000000",
          "--systems", SYSTEMS]
EXPERIMENTS = {
    "gen-availability-r3-le40": ["availability", *GEN, *COMMON, "--runs", "3", "--days", "21"],
    "azure-availability-r3-le40": ["availability", *AZ, *COMMON, "--runs", "2", "--days", "14"],
    "planetlab-availability-r3-le40": ["availability", *PL, *COMMON, "--runs", "2", "--days", "6",
                                       "--history-days", "3"],
}


def experiments(seed: int, runs: int | None, systems: str, extra: list[str] | None = None,
                suffix: str = "") -> dict[str, list[str]]:
    """``EXPERIMENTS`` with another seed (sections named ``...-seedN``), run count or systems, and
    ``extra`` arguments of ``harvest sim availability`` (sections named ``...<suffix>``)."""
    out = {}
    for name, argv in EXPERIMENTS.items():
        argv = list(argv)
        argv[argv.index("--systems") + 1] = systems
        if runs is not None:
            argv[argv.index("--runs") + 1] = str(runs)
        if seed:
            argv += ["--seed", str(seed)]
            name = f"{name}-seed{seed}"
        out[name + suffix] = argv + list(extra or [])
    return out


def run(work: Path, name: str, argv: list[str], force: bool) -> None:
    out = work / name
    if (out / "results.json").exists() and not force:
        print(f"{name}: results exist, skipped", flush=True)
        return
    cmd = [*HARVEST, "sim", *argv, "--out", str(out)]
    print(f"{name}: load {os.getloadavg()[0]:.2f}: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"{name}: done, load {os.getloadavg()[0]:.2f}", flush=True)


def table(work: Path, names: list[str]) -> str:
    lines = ["| datacenter | level | utilization | system | failed accesses per million, per run | moved replicas a day "
             "(% of blocks) | moves refused: budget / exposure |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        doc = json.loads((work / name / "results.json").read_text())
        days, blocks = float(doc["settings"]["days"]), float(doc["settings"]["blocks"])
        by: dict[tuple[float, str], list[dict]] = {}
        for r in doc["records"]:
            by.setdefault((r["level"], r["system"]), []).append(r)
        for (level, system), recs in sorted(by.items()):
            per_m = " / ".join(str(round(1e6 * r["failed_accesses"] / r["accesses"])) for r in recs)
            moved = sum(r.get("moved_replicas", 0) for r in recs) / len(recs) / days
            cost = f"{moved:,.0f} ({100 * moved / blocks:.2f}%)" if moved else "-"
            util = sum(r["utilization"] for r in recs) / len(recs)
            refused = (f"{sum(r['moves_refused_budget'] for r in recs):,} / {sum(r['moves_refused_exposure'] for r in recs):,}"
                       if all("moves_refused_budget" in r for r in recs) else "-")
            lines.append(f"| {doc['datacenter']} | {level:.1f} | {100 * util:.1f}% | {system} | {per_m} | {cost} | {refused} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="directory of the experiments' results")
    ap.add_argument("--parallel", type=int, default=2, help="experiments at once (default 2)")
    ap.add_argument("--force", action="store_true", help="run experiments whose results exist again")
    ap.add_argument("--report-only", action="store_true", help="only write the report and the table")
    ap.add_argument("--seed", type=int, default=0, help="the runs' random streams (default 0, as docs/results.md)")
    ap.add_argument("--runs", type=int, default=None, help="runs per point (default: generated 3, real traces 2)")
    ap.add_argument("--systems", default=SYSTEMS, help=f"placements side by side (default {SYSTEMS})")
    ap.add_argument("--watch-every-hours", type=float, default=None,
                    help="the mover's watch period, passed to harvest sim (sections named ...-watch; 0: off)")
    ap.add_argument("--cobusy-spread", type=float, default=None,
                    help="the co-busy spread bound, passed to harvest sim (sections named ...-spreadF)")
    ap.add_argument("--cobusy-new-target", type=float, default=None,
                    help="the co-busy placements' target for new blocks, passed to harvest sim (sections named "
                         "...-newT)")
    ap.add_argument("--move-budget-gb", type=float, default=None,
                    help="the mover's daily budget per server of a tenant, passed to harvest sim (sections named "
                         "...-budgetX; default: harvest sim's)")
    ap.add_argument("--blocks", type=int, default=None, help="blocks per run (default 200,000)")
    ap.add_argument("--accesses", type=int, default=None, help="reads per run (default 1,000,000)")
    ap.add_argument("--levels", default=None, help="utilization levels (default 0.2,0.3,0.4)")
    ap.add_argument("--only", default=None, help="comma list of datacenters to run (gen, azure, planetlab)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    extra, suffix = [], ""
    if args.move_budget_gb is not None:
        extra += ["--move-budget-gb", f"{args.move_budget_gb:g}"]
        suffix += f"-budget{args.move_budget_gb:g}"
    for flag, value in (("--blocks", args.blocks), ("--accesses", args.accesses), ("--levels", args.levels)):
        if value is not None:
            extra += [flag, str(value)]
            suffix += f"-{flag.strip('-')}{value}"
    if args.watch_every_hours is not None:
        extra += ["--watch-every-hours", f"{args.watch_every_hours:g}"]
        suffix += "-watch" if args.watch_every_hours > 0 else "-nowatch"
    if args.cobusy_new_target is not None:
        extra += ["--cobusy-new-target", f"{args.cobusy_new_target:g}"]
        suffix += f"-new{args.cobusy_new_target:g}"
    if args.cobusy_spread is not None:
        extra += ["--cobusy-spread", f"{args.cobusy_spread:g}"]
        suffix += f"-spread{args.cobusy_spread:g}"
    plan = experiments(args.seed, args.runs, args.systems, extra, suffix)
    if args.only:
        keep = tuple(f"{x.strip()}-" for x in args.only.split(","))
        plan = {k: v for k, v in plan.items() if k.startswith(keep)}
    if not args.report_only:
        with ThreadPoolExecutor(max(1, args.parallel)) as pool:
            list(pool.map(lambda kv: run(args.work, kv[0], kv[1], args.force), plan.items()))
    from placement_service.sim.report import write_report

    report = write_report([args.work / n for n in plan], args.work / "report.md", args.work / "figures",
                          title="Availability at 3 replicas up to ~40% (issue 14, item 4)")
    print(f"report: {report}\n\n{table(args.work, list(plan))}\n\nload average now: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
