"""Benchmark: one simulated year of durability on a generated 5,000-server datacenter, 4M blocks.

HDFS-Stock (the baseline) and HDFS-H side by side, each in its own process so that each one's peak
RSS is its own. Prints a Markdown table (wall time, peak RSS, lost blocks, repairs) plus the machine
load, to paste into ``docs/bench/sim.md``.

    .venv/bin/python benchmarks/bench_sim_durability.py [--servers 5000] [--blocks 4000000] [--replicas 3]
"""

from __future__ import annotations

import argparse
import time

from bench_sim_common import emit, run_children


def child(args: argparse.Namespace) -> None:
    from placement_service.sim.datacenter import from_generated
    from placement_service.sim.durability import DurabilityConfig, simulate_durability
    from placement_service.sim.policy import HdfsSystem, make_placer
    from placement_service.sim.run import system_grids, year_of_reimages
    from placement_service.sim.streams import Streams
    from placement_service.traces.generate import generate_datacenter

    t0 = time.perf_counter()
    dc = from_generated(generate_datacenter(args.servers, seed=args.dc_seed), f"generated-{args.servers}")
    system = HdfsSystem(args.child)
    grid = system_grids(dc, dc.cpu, int(7 * 86400 / dc.series.interval_s), 0)[system]
    streams = Streams(args.seed, 0)
    schedule = year_of_reimages(dc, 365.0, streams.get("reimages"))
    setup_s = time.perf_counter() - t0
    res = simulate_durability(
        dc,
        lambda: make_placer(system, dc, grid, seed=1, block_size_mb=256.0),
        system,
        args.replicas,
        schedule,
        DurabilityConfig(days=365.0, blocks=args.blocks),
        create_rng=streams.fresh("blocks"),
        place_rng=streams.fresh("placement"),
        repair_rng=streams.fresh("repair"),
    )
    emit({
        "system": system.value, "setup_s": setup_s, "sim_s": res.wall_s, "lost_blocks": res.lost_blocks,
        "repairs": res.repairs, "reimages": res.reimages,
    })


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", type=int, default=5000)
    p.add_argument("--blocks", type=int, default=4_000_000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dc-seed", type=int, default=1)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    rows, load = run_children(
        __file__, ("HDFS-Stock", "HDFS-H"),
        ["--servers", str(args.servers), "--blocks", str(args.blocks), "--replicas", str(args.replicas),
         "--seed", str(args.seed), "--dc-seed", str(args.dc_seed)],
    )
    print(f"durability: {args.servers} servers, {args.blocks:,} blocks, {args.replicas} replicas, 365 days; {load}")
    print("| system | setup (s) | simulated year (s) | peak RSS (MB) | reimages | repairs | lost blocks |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['setup_s']:.1f} | {r['sim_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['reimages']:,} | "
              f"{r['repairs']:,} | {r['lost_blocks']:,} |")


if __name__ == "__main__":
    main()
