"""How far is 0 failed accesses at 3 replicas on the real-trace datacenters, and what stands in the way?

Issue 14, item 4. For each datacenter at one utilization level (linear scaling), one run:

1. **Hindsight room**: tenants (and their share of the servers) never busy in the access window,
   and how many of those were never busy in the history either. With at least one such tenant per
   block a placement that knew the future would fail no access.
2. **Three placements side by side**: HDFS-H (the paper), HDFS-H-hours (busy-hour profiles from the
   history, ours) and HDFS-H-hours given the profiles *of the access window itself* (hindsight on the
   hour-of-day structure only; not a policy, a bound on what hour-of-day profiles can give).
3. **Why HDFS-H-hours' accesses failed**: per failed access, whether every replica's tenant was
   already busy at that hour in the history (the profile said so; the rules had no other choice) or
   at least one was a *surprise* (not busy at that hour in the history), and how many surprises were
   tenants never busy at all in the history.

    .venv/bin/python -m benchmarks.bench_availability_bound [--level 0.4] [--blocks 50000]

Prints one JSON document and a Markdown table (the load average beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from placement_service.sim.availability import AvailabilityConfig, simulate_availability
from placement_service.sim.datacenter import Scaling, SimDatacenter, scale_cpu
from placement_service.sim.policy import HdfsSystem, busy_hour_masks, make_placer
from placement_service.sim.real import real_sim_datacenter
from placement_service.sim.run import system_grids
from placement_service.sim.streams import Streams

DAY_S = 86400.0

# (name, trace, servers, history days, access days): the reduced datacenters of docs/results.md's
# issue-14 section (Azure: 100 VMs on 1,000 servers; PlanetLab: 457 VMs on 1,371 servers), and Azure
# with twice the history (the same 14 access days after it).
DATACENTERS = (("azure", "azure", 1000, 7.0, 14.0), ("planetlab", "planetlab", 1371, 3.0, 6.0),
               ("azure-14d", "azure", 1000, 14.0, 14.0))


def hour_of_slot(dc: SimDatacenter, slots: np.ndarray) -> np.ndarray:
    return (((dc.series.start_s + slots * dc.series.interval_s) % DAY_S) // 3600.0).astype(np.int64)


def one_datacenter(kind: str, servers: int, history_days: float, days: float, args: argparse.Namespace) -> dict[str, Any]:
    dc = real_sim_datacenter(kind, n_servers=servers, seed=args.seed)
    config = AvailabilityConfig(days=days, history_days=history_days, blocks=args.blocks, accesses=args.accesses)
    cpu, _ = scale_cpu(dc.cpu, dc.tenant_cores(), args.level, Scaling.LINEAR)
    thr = config.busy_threshold
    hist = int(round(history_days * DAY_S / dc.series.interval_s))
    n_eval = int(round(days * DAY_S / dc.series.interval_s))
    window = (hist + np.arange(n_eval)) % cpu.shape[1]
    busy = cpu > np.float32(thr)  # [tenant, slot]
    servers_of = np.bincount(dc.server_tenant, minlength=dc.n_tenants)
    never_future = ~busy[:, window].any(axis=1)
    never_hist = ~busy[:, :hist].any(axis=1)
    busy_share = (busy[:, window] * servers_of[:, None]).sum(axis=0) / servers_of.sum()

    grids = system_grids(dc, cpu, hist, args.seed)
    masks_hist = busy_hour_masks(dc, cpu, hist, thr)
    # The access window's own profile: the same function on the CPU rolled so that the window comes
    # first (history and window are whole days, so hours of day line up).
    masks_future = busy_hour_masks(dc, np.roll(cpu, -hist, axis=1), n_eval, thr)

    out: dict[str, Any] = {
        "datacenter": dc.name, "history_days": history_days, "access_days": days, "servers": dc.n_servers, "tenants": dc.n_tenants, "level": args.level,
        "utilization_window": float((cpu[:, window].mean(axis=1) * dc.tenant_cores()).sum() / dc.tenant_cores().sum()),
        "never_busy_in_window": {"tenants": int(never_future.sum()),
                                 "server_share": round(float(servers_of[never_future].sum() / servers_of.sum()), 3),
                                 "also_never_busy_in_history": int((never_future & never_hist).sum())},
        "never_busy_in_history_but_busy_in_window": int((never_hist & ~never_future).sum()),
        "busy_server_share_in_window": {"mean": round(float(busy_share.mean()), 3),
                                        "max": round(float(busy_share.max()), 3)},
        "systems": {},
    }
    variants = (("HDFS-H", HdfsSystem.H, masks_hist), ("HDFS-H-hours", HdfsSystem.H_HOURS, masks_hist),
                ("HDFS-H-hours, window's own profile (hindsight)", HdfsSystem.H_HOURS, masks_future))
    for label, system, masks in variants:
        streams = Streams(args.seed, 0)
        placer = make_placer(system, dc, grids[system], seed=streams.seed_int("placer"),
                             block_size_mb=config.block_size_mb, busy_hours=masks)
        failed: list[tuple[np.ndarray, np.ndarray]] = []
        t0 = time.perf_counter()
        res = simulate_availability(dc, cpu, placer, system, 3, config, create_rng=streams.fresh("blocks"),
                                    place_rng=streams.fresh("placement"), access_rng=streams.fresh("accesses"),
                                    on_failed=lambda h, s, out=failed: out.append((h, s)))
        doc: dict[str, Any] = {"failed_per_million": round(1e6 * res.failed_accesses / res.accesses, 1),
                               "failed_accesses": res.failed_accesses, "relaxed": res.relaxed_placements,
                               "wall_s": round(time.perf_counter() - t0, 1)}
        if failed and system == HdfsSystem.H_HOURS:
            # "surprise": relative to the profile this variant placed with
            bits = np.array([masks[t] for t in dc.series.tenants], dtype=np.int64)
            holders, slots = failed[0]
            tenants = np.where(holders >= 0, dc.server_tenant[np.maximum(holders, 0)], -1)
            hours = hour_of_slot(dc, slots)
            predicted = (bits[np.maximum(tenants, 0)] >> hours[:, None]) & 1
            predicted = np.where(tenants >= 0, predicted, 1).astype(bool)
            surprise = ~predicted.all(axis=1)
            distinct = np.array([len(set(row[row >= 0].tolist())) for row in tenants])
            doc["failed_detail"] = {
                "all_replicas_busy_at_that_hour_in_profile": int((~surprise).sum()),
                "at_least_one_surprise": int(surprise.sum()),
                "surprise_tenant_never_busy_in_history": int(
                    (surprise & (~predicted & never_hist[np.maximum(tenants, 0)]).any(axis=1)).sum()),
                "replicas_on_fewer_than_3_tenants": int((distinct < 3).sum()),
            }
        out["systems"][label] = doc
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", type=float, default=0.4, help="primary utilization (linear scaling)")
    p.add_argument("--blocks", type=int, default=50_000)
    p.add_argument("--accesses", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=[d[0] for d in DATACENTERS])
    args = p.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    docs = [one_datacenter(kind, n, h, d, args) for name, kind, n, h, d in DATACENTERS
            if args.only in (None, name)]
    print(json.dumps({"load_at_start": load, "datacenters": docs}, indent=1))
    print(f"\nload average at start: {load}, at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| datacenter (history days) | utilization | never busy in the window (servers) | of them never busy in history | "
          "HDFS-H | HDFS-H-hours | HDFS-H-hours, hindsight profile |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for d in docs:
        s = d["systems"]
        nb = d["never_busy_in_window"]
        print(f"| {d['datacenter']} ({d['history_days']:g}) | {d['utilization_window']:.2f} | {nb['tenants']} of {d['tenants']} "
              f"({100 * nb['server_share']:.0f}%) | {nb['also_never_busy_in_history']} | "
              + " | ".join(f"{v['failed_per_million']:,.0f}" for v in s.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
