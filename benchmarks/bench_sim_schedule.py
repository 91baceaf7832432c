"""Benchmark: one simulated month of scheduling on a generated 5,000-server datacenter.

YARN-PT (the baseline), YARN-H and YARN-H-forecast side by side at one utilization level (linear
scaling), each in its own process (own peak RSS). Prints a Markdown table to paste into ``docs/bench/sim.md``.

    .venv/bin/python benchmarks/bench_sim_schedule.py [--servers 5000] [--days 30] [--level 0.4]
"""

from __future__ import annotations

import argparse
import time

from bench_sim_common import emit, run_children


def child(args: argparse.Namespace) -> None:
    from placement_service.sim.datacenter import Scaling, from_generated
    from placement_service.sim.run import run_schedule
    from placement_service.sim.schedule import ScheduleConfig, YarnSystem
    from placement_service.traces.generate import generate_datacenter

    t0 = time.perf_counter()
    # history (7 days) + the simulated month
    gen = generate_datacenter(args.servers, seed=args.dc_seed, days=7 + args.days)
    dc = from_generated(gen, f"generated-{args.servers}")
    setup_s = time.perf_counter() - t0
    (rec,) = run_schedule(
        dc, levels=[args.level], scaling=Scaling.LINEAR, runs=1, seed=args.seed,
        config=ScheduleConfig(days=args.days, history_days=7.0, step_s=args.step_s),
        systems=[YarnSystem(args.child)],
    )
    emit({
        "system": args.child, "setup_s": setup_s, "sim_s": rec["wall_s"], "jobs": rec["jobs"],
        "avg_job_time_s": rec["avg_job_time_s"], "killed_tasks": rec["killed_tasks"],
        "utilization": rec["utilization"], "total_utilization": rec["total_utilization"],
    })


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", type=int, default=5000)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--level", type=float, default=0.4)
    p.add_argument("--step-s", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dc-seed", type=int, default=1)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    rows, load = run_children(
        __file__, ("YARN-PT", "YARN-H", "YARN-H-forecast"),
        ["--servers", str(args.servers), "--days", str(args.days), "--level", str(args.level),
         "--step-s", str(args.step_s), "--seed", str(args.seed), "--dc-seed", str(args.dc_seed)],
    )
    print(f"scheduling: {args.servers} servers, {args.days:g} simulated days, level {args.level}, step "
          f"{args.step_s:g} s; {load}")
    print("| system | setup (s) | simulated month (s) | peak RSS (MB) | jobs | avg job time (s) | killed tasks |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['setup_s']:.1f} | {r['sim_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['jobs']:,} | "
              f"{r['avg_job_time_s']:.0f} | {r['killed_tasks']:,} |")


if __name__ == "__main__":
    main()
