"""Durability year with elastic servers coming and going (issue 15): HDFS-H vs HDFS-Stock.

Per seed: a RAS region (``capacity.ras.generate.generate_region``) is solved once; a year of its
failures (``generate_outages``: servers failing on their own plus whole-MSB outages) is replayed
through the capacity loop's decision functions (``scenario.replay``: the Online Mover's
``online_move`` at every outage, a re-solve from the current plan every ``--resolve-days``), which
records the elastic set: who is lent out when, and every revocation. The elastic servers join a
generated datacenter of primary tenants (``traces.generate``, its own year of reimages) as tenants
``elastic:<pool>``: revocations are their reimages (wipes), absences keep replicas off them
(``sim/elastic.py``). Then a year of durability for each system at ``--replicas``, one run per seed;
lost blocks min / mean / max over the seeds. Control in the same run (``--control``): the same
datacenter and elastic set with no revocation (servers still come and go, nothing is wiped by it),
for HDFS-Stock and HDFS-H, so the part of the loss the revocations cause is visible. Prints a
Markdown table and the machine load.

    nice -n 10 .venv/bin/python benchmarks/bench_sim_elastic.py [--seeds 1 2 3] [--blocks 100000]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_service.capacity.ras.domain import Problem, Settings  # noqa: E402
from placement_service.capacity.ras.generate import generate_outages, generate_region, generate_requests  # noqa: E402
from placement_service.capacity.ras.scenario import ElasticLog, replay  # noqa: E402
from placement_service.capacity.ras.solve import solve  # noqa: E402
from placement_service.sim.datacenter import from_generated  # noqa: E402
from placement_service.sim.durability import DurabilityConfig  # noqa: E402
from placement_service.sim.elastic import elastic_datacenter  # noqa: E402
from placement_service.sim.policy import HdfsSystem  # noqa: E402
from placement_service.sim.run import _history_slots, run_durability, system_grids  # noqa: E402
from placement_service.traces.generate import generate_datacenter  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="one failure year and one run per seed")
    ap.add_argument("--region-servers", type=int, default=1000)
    ap.add_argument("--msbs", type=int, default=6)
    ap.add_argument("--reservations", type=int, default=10)
    ap.add_argument("--fill", type=float, default=0.7, help="reservations' share of each hardware type")
    ap.add_argument("--primary-servers", type=int, default=600)
    ap.add_argument("--blocks", type=int, default=100_000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--days", type=float, default=365.0)
    ap.add_argument("--resolve-days", type=float, default=7.0)
    ap.add_argument("--systems", nargs="+", default=["HDFS-Stock", "HDFS-H", "HDFS-H-hours"])
    ap.add_argument("--no-control", dest="control", action="store_false", help="skip the run without revocations")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    systems = [HdfsSystem(s) for s in args.systems]
    load_before = load()
    t_all = time.perf_counter()
    region = generate_region(n_servers=args.region_servers, n_msbs=args.msbs, n_hardware=3, seed=11)
    requests = generate_requests(region, n_reservations=args.reservations, fill=args.fill, seed=11)
    problem = Problem(region, requests, Settings(time_limit_s=10))
    plan = solve(problem)
    primary = from_generated(
        generate_datacenter(args.primary_servers, seed=1, reimage_days=args.days), f"generated-{args.primary_servers}"
    )
    lost: dict[str, list[int]] = collections.defaultdict(list)
    facts = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        outages = generate_outages(region, days=args.days, seed=seed)
        log = ElasticLog()
        stats = replay(problem, plan.assignment, outages, resolve_every_s=args.resolve_days * 86400, log=log)
        replay_s = time.perf_counter() - t0
        dc, presence = elastic_datacenter(primary, region, log, days=args.days)
        grid = system_grids(dc, dc.cpu, _history_slots(dc, 7.0), seed)[HdfsSystem.H]
        rows = {t: grid[t].reimage_row for t in sorted(set(dc.inventory.tenant)) if t.startswith("elastic:")}
        n_el = sum(1 for t in dc.inventory.tenant if t.startswith("elastic:"))
        recs = run_durability(
            dc, replicas=[args.replicas], runs=1, seed=seed, systems=systems, presence=presence,
            config=DurabilityConfig(days=args.days, blocks=args.blocks),
        )  # fmt: skip
        for r in recs:
            lost[str(r["system"])].append(int(r["lost_blocks"]))
        if args.control:
            calm, calm_presence = elastic_datacenter(primary, region, ElasticLog(log.initial, [], log.changes),
                                                     days=args.days)  # fmt: skip
            for r in run_durability(
                calm, replicas=[args.replicas], runs=1, seed=seed, presence=calm_presence,
                systems=[s for s in systems if s is not HdfsSystem.H_HOURS],
                config=DurabilityConfig(days=args.days, blocks=args.blocks),
            ):  # fmt: skip
                lost[f"{r['system']} without revocations"].append(int(r["lost_blocks"]))
        burst = max(collections.Counter(t for t, *_ in log.revocations).values(), default=0)
        facts.append(
            f"seed {seed}: {len(outages):,} outages, {stats.revoked:,} mover revocations, "
            f"{sum(1 for x in log.revocations if x[3] == 're-solve')} re-solve revocations "
            f"(largest at one instant: {burst}), "
            f"{n_el} elastic servers ({len(log.initial)} at the start), elastic rows {rows}, "
            f"replay {replay_s:.1f} s, "
            + ", ".join(f"{r['system']} {r['lost_blocks']} lost ({float(r['wall_s']):.0f} s)" for r in recs)
        )
    print(
        f"elastic durability: {args.primary_servers} primary servers + elastic servers of a "
        f"{args.region_servers}-server RAS region ({args.msbs} MSBs, {args.reservations} reservations, fill "
        f"{args.fill}), {args.blocks:,} blocks, {args.replicas} replicas, {args.days:g} days, seeds {args.seeds}; "
        f"load average before {load_before}, after {load()} (1/5/15 min), {time.perf_counter() - t_all:.0f} s"
    )
    for f in facts:
        print(f"- {f}")
    print("| system | lost blocks min / mean / max |")
    print("|---|---:|")
    for name, values in lost.items():
        v = np.array(values)
        print(f"| {name} | {v.min()} / {v.mean():.1f} / {v.max()} |")


if __name__ == "__main__":
    main()
