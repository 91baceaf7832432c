"""Benchmark: replica placement blocks per second on a 10,000-server inventory, ours vs stock HDFS.

One run, same inventory, same writers (drawn uniformly from the servers with space), 256 MB blocks,
3 replicas:

- ``ReplicaPlacer`` (grid, relaxing) and ``ReplicaPlacer`` (grid, strict): the 3x3 reimage x
  peak-CPU grid, environments;
- ``ReplicaPlacer.place_many``: the same rules, all blocks in one vectorized batch;
- ``StockPlacer``: stock HDFS rack-aware placement (writer, remote rack, same rack as the second);
- ``ReplicaPlacer(cobusy=...)`` (HDFS-H-cobusy, generated datacenters only): the grid plus each
  block's further replicas on the tenants least likely busy together (``core/cobusy.py``, fitted on
  the generated CPU, with the simulator's reimage penalty), one block at a time.

Every placer but ``place_many`` is called once per block, as the NameNode's shim calls the service;
the last lines give each one's rate against stock's (issue 41: at least stock's). ``--repeat N``
runs each placer N times, interleaved, and reports the median rates.

Besides speed it reports diversity: the share of blocks whose 3 replicas sit in 3 distinct
environments, and in distinct grid rows (reimage groups) and columns (peak-CPU groups).

Datacenter: ``harvest generate``'s synthetic generator (``placement_service.traces.generate``,
heavy-tailed tenant sizes, environments, racks, free storage, reimages), ``--days`` days of
5-minute samples. Grid: ``core.grid.build_grid`` from each tenant's reimages per server per month,
its 99th-percentile CPU and its storage. Or pass ``--inventory`` and ``--classes`` (with a grid)
from ``harvest generate`` / ``harvest cluster``.

Usage: ``.venv/bin/python benchmarks/bench_placement.py [--servers 10000] [--blocks 50000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from placement_service.core.cobusy import CobusyModel, fit_cobusy, reimage_penalty
from placement_service.core.grid import build_grid
from placement_service.core.placement import PlacementConfig, ReplicaPlacer
from placement_service.core.stock_placement import StockPlacer
from placement_service.core.types import ClassTable, GridCell, Inventory

MONTH_S = 30 * 86400.0


def generated(
    servers: int, seed: int, days: float
) -> tuple[Inventory, dict[str, GridCell], tuple[CobusyModel, dict[str, float]]]:
    from placement_service.sim.datacenter import from_generated
    from placement_service.traces.generate import generate_datacenter

    dc = generate_datacenter(servers, seed=seed, days=days)
    series = from_generated(dc, "bench").series
    cobusy = fit_cobusy(series.tenants, series.cpu, series.start_s, series.interval_s, 2.0 / 3.0)
    inv = dc.inventory
    tenants = sorted(set(inv.tenant))
    srv_tenant = dict(zip(inv.server, inv.tenant, strict=True))
    n_srv = {t: 0 for t in tenants}
    storage = {t: 0.0 for t in tenants}
    for t, gb in zip(inv.tenant, inv.storage_gb, strict=True):
        n_srv[t] += 1
        storage[t] += float(gb)
    events = {t: 0 for t in tenants}
    for s in dc.reimages.server:
        events[srv_tenant[s]] += 1
    rate = {t: events[t] / n_srv[t] / (days * 86400.0 / MONTH_S) for t in tenants}
    names, codes = dc.utilization.factorize("tenant")
    peak = {t: 0.0 for t in tenants}
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    cpu = dc.utilization.cpu[order]
    for i, t in enumerate(names):
        if bounds[i + 1] > bounds[i]:
            peak[str(t)] = float(np.percentile(cpu[bounds[i] : bounds[i + 1]], 99))
    grid = build_grid(rate, peak, storage)
    return inv, grid, (cobusy, reimage_penalty(rate, grid, n_srv))


def from_files(inventory: str, classes: str) -> tuple[Inventory, Mapping[str, GridCell]]:
    from placement_service.traces.io import load_inventory

    with open(classes, encoding="utf-8") as f:
        table = ClassTable.from_json(json.load(f), source=classes)
    if table.grid is None:
        raise SystemExit(f"{classes}: no grid (run harvest cluster with --reimages and --inventory)")
    return load_inventory(inventory), table.grid


def run(
    placer: ReplicaPlacer | StockPlacer, writers: list[str], replicas: int
) -> tuple[float, float, list[tuple[str, ...]], int, int]:
    """(wall seconds, CPU seconds, targets per block, relaxed blocks, failed blocks)."""
    out: list[tuple[str, ...]] = []
    relaxed = failed = 0
    rng = np.random.default_rng(1)
    t0, c0 = time.perf_counter(), time.process_time()
    for w in writers:
        try:
            res = placer.place(w, replicas, rng=rng)
        except Exception:  # noqa: BLE001 - counted; PlacementError when space runs out or strict refuses
            failed += 1
            continue
        relaxed += res.relaxed
        out.append(res.targets)
    return time.perf_counter() - t0, time.process_time() - c0, out, relaxed, failed


def run_batch(
    placer: ReplicaPlacer, writers: list[str], replicas: int
) -> tuple[float, float, list[tuple[str, ...]], int, int]:
    """As ``run``, with every block in one ``place_many`` call (names resolved inside the timing)."""
    rng = np.random.default_rng(1)
    t0, c0 = time.perf_counter(), time.process_time()
    batch = placer.place_many(writers, replicas, rng=rng)
    names = placer.inventory.server
    out = [tuple(names[s] for s in row) for row in batch.targets[~batch.failed].tolist()]
    secs, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return secs, cpu_s, out, int(batch.relaxed.sum()), int(batch.failed.sum())


def diversity(
    inv: Inventory, grid: Mapping[str, GridCell], blocks: list[tuple[str, ...]]
) -> tuple[float, float]:
    """Shares of placed blocks with pairwise distinct environments, and distinct grid rows and columns."""
    idx = inv.index()
    env_ok = rc_ok = 0
    for b in blocks:
        envs = {inv.environment[idx[s]] for s in b}
        cells = [grid.get(inv.tenant[idx[s]]) for s in b]
        env_ok += len(envs) == len(b)
        if all(c is not None for c in cells):
            rows = {c.reimage_row for c in cells if c is not None}
            cols = {c.peak_column for c in cells if c is not None}
            rc_ok += len(rows) == len(b) and len(cols) == len(b)
    n = max(1, len(blocks))
    return env_ok / n, rc_ok / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=10_000)
    ap.add_argument("--blocks", type=int, default=50_000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--days", type=float, default=2.0, help="days of synthetic samples for peak CPU")
    ap.add_argument("--inventory", help="inventory file instead of the generator (needs --classes)")
    ap.add_argument("--classes", help="classes.json with a grid (with --inventory)")
    ap.add_argument(
        "--fill",
        type=float,
        default=0.98,
        help="second scenario: scale every server's storage so that the run's replicas fill this share",
    )
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per placer, interleaved; rates are the medians (a loaded machine)")
    args = ap.parse_args()

    cobusy: tuple[CobusyModel, dict[str, float]] | None = None
    if args.inventory:
        inv, grid = from_files(args.inventory, args.classes)
        source = f"{args.inventory} + {args.classes}"
    else:
        inv, grid, cobusy = generated(args.servers, args.seed, args.days)
        source = f"generate_datacenter({args.servers}, seed={args.seed}, days={args.days})"
    cells = sum(1 for _ in {(c.reimage_row, c.peak_column) for c in grid.values()})

    # Writers: uniform over servers with space for at least one block.
    block_gb = 256 / 1024
    with_space = [s for s, gb in zip(inv.server, inv.storage_gb, strict=True) if gb >= block_gb]
    wr = np.random.default_rng(args.seed)
    writers = [with_space[i] for i in wr.integers(0, len(with_space), args.blocks)]
    rows = compare(inv, grid, writers, args.replicas, args.seed, cobusy, args.repeat)

    # Space pressure: the same run on disks scaled down so that it fills `--fill` of the space.
    need_gb = args.blocks * args.replicas * block_gb
    scale = need_gb / args.fill / float(np.sum(inv.storage_gb))
    tight = replace(inv, storage_gb=np.round(inv.storage_gb * scale / block_gb) * block_gb)
    demand = need_gb / float(np.sum(tight.storage_gb))
    pressure = compare(tight, grid, writers, args.replicas, args.seed, cobusy, args.repeat)

    load = os.getloadavg()
    print(
        f"replica placement: {len(inv):,} servers, {len(set(inv.tenant)):,} tenants, "
        f"{len(set(inv.environment)):,} environments, {len(set(inv.rack)):,} racks, {cells} grid cells used"
    )
    print(f"source: {source}; {args.blocks:,} blocks x {args.replicas} replicas of 256 MB; seed {args.seed}")
    print(f"load average (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, cpus {os.cpu_count()}; "
          f"median of {args.repeat} interleaved run(s) per placer")
    print()
    table(rows)
    against_stock(rows)
    print(
        f"\nunder space pressure: every server's storage scaled by {scale:.2e} and rounded to whole blocks "
        f"({float(np.sum(tight.storage_gb)) / len(inv):.2f} GB per server on average); the run's replicas "
        f"ask for {100 * demand:.1f} % of it; a writer without space gets a random first replica"
    )
    print()
    table(pressure)
    against_stock(pressure)


Row = tuple[str, float, float, float, float, int, int, float, float]


def compare(
    inv: Inventory,
    grid: Mapping[str, GridCell],
    writers: list[str],
    replicas: int,
    seed: int,
    cobusy: tuple[CobusyModel, dict[str, float]] | None = None,
    repeat: int = 1,
) -> list[Row]:
    """Run the placers over the same writers; one row of figures each."""
    extra: list[tuple[str, Callable[[], ReplicaPlacer | StockPlacer]]] = []
    if cobusy is not None:
        extra.append((
            "ReplicaPlacer (grid + co-busy estimates, HDFS-H-cobusy)",
            lambda: ReplicaPlacer(inv, grid, seed=seed, cobusy=cobusy[0], cobusy_penalty=cobusy[1]),
        ))
    placers: list[tuple[str, Callable[[], ReplicaPlacer | StockPlacer]]] = [
        ("ReplicaPlacer.place_many (grid, relaxing, one batch)", lambda: ReplicaPlacer(inv, grid, seed=seed)),
        ("ReplicaPlacer (grid, relaxing)", lambda: ReplicaPlacer(inv, grid, seed=seed)),
        (
            "ReplicaPlacer (grid, strict)",
            lambda: ReplicaPlacer(inv, grid, config=PlacementConfig(strict=True), seed=seed),
        ),
        ("StockPlacer (stock HDFS, racks)", lambda: StockPlacer(inv, grid, seed=seed)),
        *extra,
    ]
    # Each placer `repeat` times, interleaved (a fresh placer each time), so that all of them see
    # the same machine load; the rates are the medians, the rest from the first repetition.
    figures: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in placers}
    first: dict[str, tuple[float, int, int, float, float]] = {}
    n = len(writers)
    for _ in range(repeat):
        for label, factory in placers:
            t0 = time.perf_counter()
            placer = factory()
            build_s = time.perf_counter() - t0
            batch = "place_many" in label and isinstance(placer, ReplicaPlacer)
            runner = run_batch if batch else run
            secs, cpu_s, blocks, relaxed, failed = runner(placer, writers, replicas)  # type: ignore[operator,arg-type]
            figures[label].append((n / secs, n / cpu_s, 1e3 * secs / n))
            if label not in first:
                env_share, rc_share = diversity(inv, grid, blocks)
                first[label] = (build_s, relaxed, failed, env_share, rc_share)
    rows: list[Row] = []
    for label, _ in placers:
        bps, cpu_bps, ms = (float(np.median([f[i] for f in figures[label]])) for i in range(3))
        build_s, relaxed, failed, env_share, rc_share = first[label]
        rows.append((label, bps, cpu_bps, ms, build_s, relaxed, failed, env_share, rc_share))
    return rows


def against_stock(rows: list[Row]) -> None:
    """Each one-block-at-a-time placer's rate against stock HDFS's (issue 41: >= 1x)."""
    stock = next(r for r in rows if r[0].startswith("StockPlacer"))
    print()
    for r in rows:
        if r is stock or "place_many" in r[0]:
            continue
        print(f"{r[0]}: {r[1] / stock[1]:.2f}x stock's blocks/s wall, {r[2] / stock[2]:.2f}x CPU time")


def table(rows: list[Row]) -> None:
    print(
        "| placer | blocks/s (wall) | blocks/s (CPU time) | ms/block (wall) | build s | relaxed | failed "
        "| distinct envs | distinct rows+cols |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, bps, cpu_bps, ms, build_s, relaxed, failed, env_share, rc_share in rows:
        print(
            f"| {label} | {bps:,.0f} | {cpu_bps:,.0f} | {ms:.4f} | {build_s:.2f} | {relaxed:,} | {failed:,} | "
            f"{100 * env_share:.1f} % | {100 * rc_share:.1f} % |"
        )


if __name__ == "__main__":
    main()
