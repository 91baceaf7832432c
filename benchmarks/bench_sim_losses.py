"""Which blocks does a durability year lose, and why? Every lost block's replica history.

Runs one durability year (HDFS-H by default, or any ``--systems``) on a generated or real-trace
datacenter and, for every lost block, prints the replicas' servers, tenants, environments and grid
cells at the moment each was wiped, and the times: were they taken by one correlated event (an
environment reimaged at once), by events in the same grid row, or by separate events within the
repair time? Then a summary per cause.

    .venv/bin/python benchmarks/bench_sim_losses.py --real azure --servers 1500 --blocks 300000 [--runs 2]

Options for the harder cases: ``--reimage-days 365`` (a reimage log longer than the utilization
window), ``--grouping correlation --vms-per-tenant 10`` (few tenants: small grid rows), a small
``--servers`` (few servers per tenant), ``--dc-seed`` / ``--seed`` (datacenter and run streams).
``--jsonl FILE`` appends one line per (system, run) with the configuration and its losses.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", choices=["azure", "planetlab"], help="real-trace datacenter (default: generated)")
    p.add_argument("--servers", type=int, default=1500)
    p.add_argument("--dc-seed", type=int, default=1)
    p.add_argument("--blocks", type=int, default=300_000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--first-run", type=int, default=0,
                   help="index of the first run (runs first .. first + runs - 1, numbered as run_durability)")
    p.add_argument("--systems", default="HDFS-Stock,HDFS-H,HDFS-H-hours")
    p.add_argument("--history-days", type=float, default=7.0)
    p.add_argument("--seed", type=int, default=0, help="run streams: Streams(seed, run), as run_durability")
    p.add_argument("--grouping", default="vm", choices=["vm", "correlation", "hash"], help="real traces: VMs -> tenants")
    p.add_argument("--vms-per-tenant", type=int, default=4, help="real traces, correlation/hash grouping")
    p.add_argument("--reimage-days", type=float, default=None,
                   help="length of the generated reimage log (default: the utilization window)")
    p.add_argument("--data", default=None,
                   help="a datacenter in files (e.g. from harvest import): DIR/utilization, inventory, reimages")
    p.add_argument("--trace-path", default=None, help="real traces: another file of the same layout (e.g. an excerpt)")
    p.add_argument("--env-events-x", type=float, default=1.0,
                   help="multiply the generator's rate of environment-wide reimage events (correlated loss)")
    p.add_argument("--jsonl", default=None, help="append one JSON line per (system, run) to this file")
    p.add_argument("--show", type=int, default=10, help="lost blocks printed in full per run")
    args = p.parse_args()

    from dataclasses import replace

    from placement_service.core.mover import MoveReport
    from placement_service.core.placement import ReplicaPlacer
    from placement_service.sim.datacenter import from_generated
    from placement_service.sim.durability import DurabilityConfig, simulate_durability
    from placement_service.sim.policy import HdfsSystem, busy_hour_masks, cobusy_model, make_placer
    from placement_service.sim.real import real_sim_datacenter
    from placement_service.sim.run import (
        COBUSY_SYSTEMS,
        MOVE_EVERY_DAYS,
        WATCH_EVERY_HOURS,
        CobusyMover,
        _move_settings,
        _mover_cadence,
        _tenant_rates,
        cobusy_mover,
        system_grids,
        year_of_reimages,
    )
    from placement_service.sim.streams import Streams
    from placement_service.traces.config import GeneratorConfig
    from placement_service.traces.generate import generate_datacenter

    base = GeneratorConfig()
    gen_config = replace(base, correlated_events_per_month=tuple(
        args.env_events_x * r for r in base.correlated_events_per_month))  # type: ignore[arg-type]
    if args.data:
        from placement_service.sim.datacenter import load_datacenter

        def one(stem: str) -> str:
            return next(str(f) for f in sorted(Path(args.data).glob(f"{stem}.*")))

        dc = load_datacenter(one("utilization"), one("inventory"), one("reimages"), name=Path(args.data).name)
    elif args.real:
        dc = real_sim_datacenter(
            args.real, n_servers=args.servers, seed=args.dc_seed, grouping=args.grouping,
            vms_per_tenant=args.vms_per_tenant, reimage_days=args.reimage_days,
            path=args.trace_path, config=gen_config,
        )
    else:
        gen = generate_datacenter(args.servers, seed=args.dc_seed, reimage_days=args.reimage_days, config=gen_config)
        dc = from_generated(gen, f"generated-{args.servers}")
    hist = int(args.history_days * 86400 / dc.series.interval_s)
    call_slots, pass_slots = _mover_cadence(dc, MOVE_EVERY_DAYS, WATCH_EVERY_HOURS)  # as run_durability
    grids = system_grids(dc, dc.cpu, hist, args.seed)
    # The busy threshold exactly as run_durability writes it (1 - 1/3 is one ulp above 2/3, enough
    # to reorder near-tied co-busy scores and give another year than harvest sim's).
    busy_cpu = 1.0 - 1.0 / 3.0
    hours = busy_hour_masks(dc, dc.cpu, hist, busy_cpu)
    systems = [HdfsSystem(x) for x in args.systems.split(",")]
    cobusy = cobusy_model(dc, dc.cpu, hist, busy_cpu) if COBUSY_SYSTEMS.intersection(systems) else None
    rates = _tenant_rates(dc)  # the co-busy placements' reimage term, as run_durability
    inv = dc.inventory
    tenant_of = inv.tenant
    env_of = inv.environment
    print(f"datacenter {dc.name}: {dc.n_servers} servers, {dc.n_tenants} tenants, "
          f"{len(set(inv.environment))} environments; load {os.getloadavg()[0]:.1f}")
    paper = grids[HdfsSystem.H]
    for row in range(3):
        tenants = [t for t, c in paper.items() if c.reimage_row == row]
        per_col = [sum(1 for t in tenants if paper[t].peak_column == col) for col in range(3)]
        n_srv = int(np.isin(np.asarray(tenant_of, dtype=object), tenants).sum())
        envs = len({env_of[i] for i in range(len(tenant_of)) if paper.get(tenant_of[i]) is not None
                    and paper[tenant_of[i]].reimage_row == row})
        print(f"grid row {row}: {len(tenants)} tenants (per column {per_col}), {n_srv} servers, {envs} environments")
    for system_name in args.systems.split(","):
        system = HdfsSystem(system_name)
        grid = grids[system]
        for run in range(args.first_run, args.first_run + args.runs):
            streams = Streams(args.seed, run)
            schedule = year_of_reimages(dc, 365.0, streams.get("reimages"))
            history: dict[int, list[tuple[float, int]]] = defaultdict(list)
            lost_at: dict[int, float] = {}

            def on_wipe(t: float, blocks: np.ndarray, servers: np.ndarray, dead: np.ndarray,
                        history: dict[int, list[tuple[float, int]]] = history,
                        lost_at: dict[int, float] = lost_at) -> None:
                for b, s in zip(blocks.tolist(), servers.tolist(), strict=True):
                    history[b].append((t, s))
                for b in dead.tolist():
                    lost_at[b] = t

            t0 = time.perf_counter()
            placer_seed = streams.seed_int("placer")  # as run_durability

            placer = make_placer(system, dc, grid, seed=placer_seed, block_size_mb=256.0, busy_hours=hours,
                                 cobusy=cobusy, reimage_rate=rates)
            # HDFS-H-cobusy-mover: the daily passes as run_durability makes them (the wipes traced
            # below are where each replica was when wiped, moves included).
            moves: Callable[[float, np.ndarray], MoveReport] | None = None
            if system is HdfsSystem.H_COBUSY_MOVER:
                assert isinstance(placer, ReplicaPlacer)
                daily = cobusy_mover(dc, dc.cpu, placer, hist, busy_cpu, streams,
                                     _move_settings(None, MOVE_EVERY_DAYS), pass_slots)

                def mover(t_s: float, rep: np.ndarray, daily: CobusyMover = daily) -> MoveReport:
                    return daily.pass_at(hist + int(t_s // dc.series.interval_s), rep)

                moves = mover

            res = simulate_durability(
                dc,
                lambda: placer,  # noqa: B023 - called within this iteration
                system, args.replicas, schedule, DurabilityConfig(days=365.0, blocks=args.blocks),
                create_rng=streams.fresh("blocks"), place_rng=streams.fresh("placement"),
                repair_rng=streams.fresh("repair"), on_wipe=on_wipe, mover=moves,
                move_every_s=call_slots * dc.series.interval_s,
            )
            print(f"\n## {system.value} run {run}: lost {res.lost_blocks} of {res.blocks} "
                  f"(reimages {res.reimages}, {schedule.how}; {time.perf_counter() - t0:.0f} s)")
            causes: Counter[str] = Counter()
            for i, (b, t_lost) in enumerate(sorted(lost_at.items(), key=lambda kv: kv[1])):
                wipes = history[b][-args.replicas:]
                envs = [env_of[s] for _, s in wipes]
                cells = [grid.get(tenant_of[s]) for _, s in wipes]
                rows = [c.reimage_row if c else -1 for c in cells]
                span_h = (max(t for t, _ in wipes) - min(t for t, _ in wipes)) / 3600.0
                if len(set(envs)) < len(envs):
                    cause = "replicas shared an environment"
                elif span_h <= 1.0:
                    cause = "one step: several environments reimaged within the hour"
                elif len(set(rows)) < len(rows):
                    cause = "replicas shared a grid row"
                else:
                    cause = f"separate events over {'<= 1 day' if span_h <= 24 else '> 1 day'}"
                causes[cause] += 1
                if i < args.show:
                    parts = ", ".join(
                        f"{tenant_of[s]}/{env_of[s]}/r{c.reimage_row}c{c.peak_column}" if c else f"{tenant_of[s]}/{env_of[s]}/-"
                        for (_, s), c in zip(wipes, cells, strict=True)
                    )
                    print(f"- block {b} lost on day {t_lost / 86400:.1f}: wipes over {span_h:.1f} h: {parts}")
            for cause, k in causes.most_common():
                print(f"  {k} lost: {cause}")
            if args.jsonl:
                line = {
                    "datacenter": dc.name, "real": args.real or args.data, "trace_path": args.trace_path, "servers": dc.n_servers, "tenants": dc.n_tenants,
                    "grouping": args.grouping, "vms_per_tenant": args.vms_per_tenant, "dc_seed": args.dc_seed,
                    "seed": args.seed, "run": run, "env_events_x": args.env_events_x, "reimage_days": args.reimage_days, "blocks": res.blocks,
                    "system": system.value, "lost": res.lost_blocks, "reimages": res.reimages,
                    "reimage_source": schedule.how, "causes": dict(causes), "load": os.getloadavg()[0],
                }
                with open(args.jsonl, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
