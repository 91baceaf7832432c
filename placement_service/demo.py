"""``harvest demo``: the main job end to end on an embedded default, no Hadoop and no Docker needed.

Steps (each one is the real command or the real policy code that production runs):
1. ``harvest generate``: a synthetic datacenter (inventory, utilization, reimages) from a seed.
2. ``harvest cluster``: FFT patterns, K-means utilization classes and the 3x3 replica grid.
3. Class selection for the 99 bundled TPC-DS Hive/Tez DAGs (task counts derived from the plans'
   byte estimates), as the job router would ask for them.
4. ``harvest place``: replica placement of many 256 MB blocks, next to stock HDFS placement, with the
   diversity each achieves.
5. A small simulation: batch job times and kills (YARN-PT vs YARN-H vs YARN-H-forecast) and lost
   blocks (HDFS-Stock vs HDFS-H), written as ``results.json`` and PNG figures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from placement_service.validate import finite_float


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on a generated datacenter (no Hadoop, no Docker)",
        description=(
            "Generate a datacenter, cluster its primary tenants, select classes for the 99 TPC-DS DAGs, "
            "place HDFS blocks with the history-based policy and with stock HDFS, and run a small "
            "simulation. Everything is written under --out; a readable summary is printed."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="demo-out", help="output directory")
    p.add_argument("--servers", type=int, default=1200, help="servers in the generated datacenter")
    p.add_argument("--days", type=int, default=14, help="days of utilization history")
    p.add_argument("--blocks", type=int, default=20000, help="HDFS blocks to place")
    p.add_argument(
        "--warehouse-tb",
        type=finite_float,
        default=1.0,
        help="TPC-DS warehouse size the DAGs are scaled to (the bundled plans were made for 30 TB; "
        "task counts shrink with the data so that they fit a demo-sized cluster)",
    )
    p.add_argument("--seed", type=int, default=7, help="seed of every random stream")
    p.add_argument("--skip-sim", action="store_true", help="skip the simulation step")
    p.set_defaults(func=_demo)


def _step(n: int, title: str) -> float:
    print(f"\n=== {n}. {title}", flush=True)
    return time.perf_counter()


def _done(started: float) -> None:
    print(f"    ({time.perf_counter() - started:.1f} s)", flush=True)


def _run_cli(argv: list[str]) -> None:
    from placement_service import HarvestError
    from placement_service.cli import main

    rc = main(argv)
    if rc != 0:
        raise HarvestError(f"'harvest {' '.join(argv)}' failed with exit status {rc}")


def _demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dc = out / "datacenter"
    classes_json = out / "classes.json"
    seed = str(args.seed)
    total = time.perf_counter()

    t = _step(1, f"generate a datacenter of {args.servers} servers, {args.days} days of history")
    _run_cli(["generate", "--servers", str(args.servers), "--seed", seed, "--days", str(args.days),
              "--out", str(dc)])
    _done(t)

    t = _step(2, "cluster the primary tenants: patterns, utilization classes, 3x3 replica grid")
    _run_cli(["cluster", "--utilization", str(dc / "utilization.parquet"),
              "--reimages", str(dc / "reimages.parquet"), "--inventory", str(dc / "inventory.parquet"),
              "--seed", seed, "--out", str(classes_json)])
    _done(t)

    t = _step(3, f"class selection for the 99 TPC-DS Hive/Tez DAGs at {args.warehouse_tb:g} TB "
                 "(reserve 1/3 of each server, 1 core per container)")
    _select_tpcds(classes_json, out / "tpcds_selections.json", seed=args.seed, warehouse_tb=args.warehouse_tb)
    _done(t)

    t = _step(4, f"replica placement of {args.blocks} blocks x 3 replicas: history-based vs stock HDFS")
    ours = out / "placements.jsonl"
    stock = out / "placements_stock.jsonl"
    common = ["--classes", str(classes_json), "--inventory", str(dc / "inventory.parquet"),
              "--blocks", str(args.blocks), "--replicas", "3", "--seed", seed]
    _run_cli(["place", *common, "--out", str(ours)])
    _run_cli(["place", *common, "--stock", "--out", str(stock)])
    _placement_diversity(classes_json, dc / "inventory.parquet", {"history-based": ours, "stock HDFS": stock})
    _done(t)

    if not args.skip_sim:
        t = _step(5, "simulation: job times and kills (YARN-PT, YARN-H, YARN-H-forecast), lost blocks (HDFS-Stock vs HDFS-H)")
        _simulate(out / "sim", seed=args.seed)
        _done(t)

    print(f"\nAll outputs are under {out}/ ({time.perf_counter() - total:.0f} s in all).")
    return 0


def _select_tpcds(classes_json: Path, out_path: Path, *, seed: int, warehouse_tb: float) -> None:
    import numpy as np

    from placement_service.core.dag import max_concurrency
    from placement_service.core.selection import ClassSelector, SelectionConfig
    from placement_service.core.tpcds import tpcds_jobs
    from placement_service.core.types import ClassTable

    table = ClassTable.from_json(json.loads(classes_json.read_text()), source=str(classes_json))
    selector = ClassSelector(table.classes, SelectionConfig(reserve_frac=1.0 / 3.0))
    rng = np.random.default_rng(seed)
    # The plans' byte estimates are for a 30 TB warehouse; scale them to the demo's warehouse.
    jobs = tpcds_jobs(bytes_scale=warehouse_tb / 30.0)
    records: list[dict[str, Any]] = []
    for job in jobs:
        sel = selector.select(job, rng)
        records.append({"query": job.name, "job_type": sel.job_type.value,
                        "max_concurrency": sel.max_concurrency, "classes": list(sel.classes)})
    out_path.write_text(json.dumps(records, indent=1) + "\n")
    conc = np.array([max_concurrency(j) for j in jobs])
    n_classes = Counter(len(r["classes"]) for r in records)
    chosen = Counter(c for r in records for c in r["classes"])
    print(f"    {len(jobs)} queries, none run before (so all 'medium'); cluster: "
          f"{sum(c.cores for c in table.classes):.0f} cores in {len(table.classes)} classes")
    print(f"    max concurrent containers per query: median {int(np.median(conc))}, "
          f"max {int(conc.max())} ({jobs[int(conc.argmax())].name})")
    print(f"    one class: {n_classes.get(1, 0)}, several classes: "
          f"{sum(v for k, v in n_classes.items() if k > 1)}, none (would wait): {n_classes.get(0, 0)}")
    print("    most chosen classes: " + ", ".join(f"{c} x{n}" for c, n in chosen.most_common(5)))
    for r in records[:6]:
        cls = r["classes"]
        shown = ", ".join(cls[:4]) + (f" (+{len(cls) - 4} more)" if len(cls) > 4 else "")
        print(f"      {r['query']:>8}  {r['job_type']:<6}  concurrency {r['max_concurrency']:>5}  "
              f"-> {shown or '(wait)'}")
    print(f"    all selections: {out_path}")


def _placement_diversity(classes_json: Path, inventory_path: Path, files: dict[str, Path]) -> None:
    """Share of blocks whose replicas span 3 grid rows / 3 columns / 3 environments, per policy."""
    from placement_service.core.types import ClassTable
    from placement_service.traces.io import load_inventory

    table = ClassTable.from_json(json.loads(classes_json.read_text()), source=str(classes_json))
    grid = table.grid or {}
    inv = load_inventory(inventory_path)
    tenant = dict(zip(inv.server, inv.tenant, strict=True))
    env = dict(zip(inv.server, inv.environment, strict=True))
    print(f"    {'policy':<14} {'blocks':>7} {'3 rows':>8} {'3 columns':>10} {'3 environments':>15}")
    for name, path in files.items():
        n = rows3 = cols3 = envs3 = 0
        with path.open() as fh:
            for line in fh:
                reps = json.loads(line)["replicas"]
                cells = [grid.get(tenant[s]) for s in reps]
                n += 1
                rows3 += len({c.reimage_row for c in cells if c is not None}) == len(reps)
                cols3 += len({c.peak_column for c in cells if c is not None}) == len(reps)
                envs3 += len({env[s] for s in reps}) == len(reps)
        if n:
            print(f"    {name:<14} {n:>7} {rows3 / n:>8.1%} {cols3 / n:>10.1%} {envs3 / n:>15.1%}")


def _simulate(out_dir: Path, *, seed: int) -> None:
    from placement_service.sim import demo_results

    summary = demo_results(out_dir, seed=seed)
    print(f"    datacenter: {summary.get('servers')} servers, {summary.get('tenants')} tenants")
    print(f"    {'scheduling':<12} {'level':>6} {'system':<16} {'avg job time':>13} {'killed tasks':>13}")
    for s in summary.get("schedule", []):
        print(f"    {'':<12} {s['level']:>6.0%} {s['system']:<16} {s['avg_job_time_s']:>11.0f} s "
              f"{s['killed_tasks']:>13.0f}")
    print(f"    {'durability':<12} {'replicas':>8} {'system':<11} {'lost blocks (1 year)':>20}")
    for s in summary.get("durability", []):
        print(f"    {'':<12} {s['replicas']:>8} {s['system']:<11} {s['lost_blocks']:>20.0f}")
    print(f"    {'availability':<12} {'level':>6} {'system':<11} {'failed accesses':>16}")
    for s in summary.get("availability", []):
        print(f"    {'':<12} {s['level']:>6.0%} {s['system']:<11} {s['failed_access_pct']:>15.3f}%")
    print(f"    results.json, PNG figures and reports: {out_dir}/{{schedule,durability,availability}}/")
