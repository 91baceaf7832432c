"""``harvest cluster``: traces in, ``classes.json`` out (patterns, utilization classes, 3x3 grid).

An adapter around the pure core: it reads the trace files with ``placement_service.traces``, fits
``UtilizationClustering`` on the tenants' average-server series, builds the replica-placement grid
when reimages and an inventory are given, writes ``ClassTable.to_json()`` atomically and prints a
summary. See ``docs/clustering.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json
from placement_service.validate import finite_float, output_file

if TYPE_CHECKING:
    from placement_service.core.clustering import UtilizationClustering
    from placement_service.core.types import ClassTable, Inventory, TenantSeries


class ClusterInputError(HarvestError):
    """The options or inputs of ``harvest cluster`` do not fit together (e.g. --reimages without --inventory)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="learn tenant patterns and utilization classes from traces; write classes.json",
        description=(
            "Build each primary tenant's average-server CPU series from the utilization samples, find "
            "its pattern (periodic / constant / unpredictable) from its FFT, group the tenants of each "
            "pattern into utilization classes with K-means, and tag each class with its average, peak "
            "and current CPU. With --reimages and --inventory, also place every tenant in the 3x3 "
            "replica-placement grid (reimage-frequency terciles x peak-CPU terciles, equal storage per "
            "cell). Writes the classes.json contract (docs/contracts.md) atomically and prints a summary."
        ),
    )
    p.add_argument(
        "--utilization", required=True, metavar="FILE", help="utilization samples (Parquet or CSV)"
    )
    p.add_argument(
        "--reimages", metavar="FILE", help="reimage events (Parquet or CSV); needs --inventory; adds the grid"
    )
    p.add_argument(
        "--inventory",
        metavar="FILE",
        help="inventory (Parquet or CSV): checks the sampled servers, weighs class series by servers and "
        "sizes classes in servers and cores",
    )
    p.add_argument("--out", required=True, metavar="FILE", type=output_file, help="where to write classes.json")
    p.add_argument("--cpu-percent", action="store_true", help="the cpu column holds 0-100 instead of 0-1")
    p.add_argument(
        "--interval-s",
        type=finite_float,
        default=None,
        metavar="S",
        help="slot length in seconds (default: inferred: the lower median of the servers' own intervals, "
        "each the median spacing of its samples); each server is still resampled on its own interval",
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="K-means random seed (default 0)")
    p.add_argument(
        "--max-classes-per-pattern",
        type=int,
        default=8,
        metavar="N",
        help="cap on classes per pattern (default 8)",
    )
    p.add_argument(
        "--k-rule",
        choices=("tolerance", "silhouette", "fixed"),
        default="tolerance",
        help="how many classes a pattern gets: the smallest k within --class-tolerance-cpu (default), the "
        "best silhouette, or --classes-per-pattern",
    )
    p.add_argument(
        "--class-tolerance-cpu",
        type=finite_float,
        default=0.05,
        metavar="F",
        help="RMS distance (CPU fraction) of tenants to their class centre that counts as tight (default 0.05)",
    )
    p.add_argument(
        "--classes-per-pattern", type=int, default=4, metavar="N", help="k for --k-rule fixed (default 4)"
    )
    p.add_argument(
        "--peak-percentile",
        type=finite_float,
        default=99.0,
        metavar="P",
        help="percentile of a series used as its peak (default 99)",
    )
    p.add_argument(
        "--unpredictable-peak-sigmas",
        type=finite_float,
        default=0.0,
        metavar="K",
        help="experimental: rank unpredictable tenants in the placement grid by max(peak, mean + K std) "
        "instead of their peak (default 0: off, as in the paper)",
    )
    p.add_argument(
        "--busy-cpu",
        type=finite_float,
        default=2.0 / 3.0,
        metavar="F",
        help="with the grid, also write each tenant's busy-hour profile (busy_hours: hours of day UTC at which "
        "its CPU was above F in more than 5%% of the samples), which the service's replica placement uses "
        "to keep a block's replicas off tenants busy at the same hours (default 2/3 = 1 - the agent's "
        "default reserve; 0: do not write profiles)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    p.set_defaults(func=_cluster)


def _cluster(args: argparse.Namespace) -> int:
    from placement_service.core.clustering import UtilizationClustering
    from placement_service.core.grid import build_grid
    from placement_service.traces import io
    from placement_service.traces.series import build_tenant_series, reimage_rates, tenant_storage_gb

    if args.reimages and not args.inventory:
        raise ClusterInputError("--reimages needs --inventory (to map servers to tenants and storage)")
    if args.interval_s is not None and not args.interval_s > 0:
        raise ClusterInputError(f"--interval-s must be positive, got {args.interval_s}")
    if not 0.0 <= args.busy_cpu <= 1.0:
        raise ClusterInputError(f"--busy-cpu must be a CPU fraction in [0, 1] (0: off), got {args.busy_cpu}")
    started = time.perf_counter()
    inventory = io.load_inventory(args.inventory) if args.inventory else None
    # With an inventory, every sampled server must be in it, under the same tenant.
    samples = io.load_utilization(
        args.utilization, cpu_percent=args.cpu_percent, inventory=inventory, optional_columns=False
    )
    try:
        series, sampling = build_tenant_series(samples, interval_s=args.interval_s)
    except ValueError as exc:
        raise ClusterInputError(f"{args.utilization}: {exc}") from None
    del samples
    servers, cores = _tenant_sizes(inventory, series.tenants) if inventory is not None else (None, None)
    model = UtilizationClustering(
        max_classes_per_pattern=args.max_classes_per_pattern,
        k_rule=args.k_rule,
        class_tolerance_cpu=args.class_tolerance_cpu,
        n_classes_per_pattern=args.classes_per_pattern,
        peak_percentile=args.peak_percentile,
        unpredictable_peak_sigmas=args.unpredictable_peak_sigmas,
        random_state=args.seed,
    ).fit(series, servers_per_tenant=servers, cores_per_tenant=cores)
    grid = None
    unplaced: list[str] = []
    if args.reimages and inventory is not None:
        events = io.load_reimages(args.reimages, known_servers=inventory.server)
        rates = reimage_rates(events, inventory)
        storage = tenant_storage_gb(inventory)
        clustered = set(series.tenants)
        unplaced = sorted(set(rates) - clustered)  # inventory tenants without utilization samples
        grid = build_grid(
            {t: rates[t] for t in series.tenants},
            model.tenant_grid_peak_cpu_,
            {t: storage[t] for t in series.tenants},
        )
    table = model.class_table(grid)
    if grid is not None and args.busy_cpu > 0:
        from dataclasses import replace

        from placement_service.core.busy_hours import busy_hour_profiles

        table = replace(table, busy_hours=busy_hour_profiles(series, args.busy_cpu))
    _write_json_atomically(Path(args.out), table.to_json())
    summary = _summary(model, table, series, storage_gb=tenant_storage_gb(inventory) if inventory else None)
    summary.update(
        {
            "out": str(args.out),
            "seconds": round(time.perf_counter() - started, 3),
            "tenants_without_samples": unplaced,
            "sampling": {
                "server_intervals_s": [[v, n] for v, n in sampling.interval_counts()],
                "mixed_intervals": sampling.mixed_intervals,
                "partial_window_tenants": len(sampling.partial_window_tenants()),
                "disjoint_windows": sampling.disjoint_windows,
                "notes": sampling.notes(),
            },
            "own_window_tenants": len(model.own_window_tenants_),
        }
    )
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        _print_summary(summary)
    return 0


def _tenant_sizes(inventory: Inventory, tenants: tuple[str, ...]) -> tuple[dict[str, int], dict[str, float]]:
    servers: dict[str, int] = dict.fromkeys(tenants, 0)
    cores: dict[str, float] = dict.fromkeys(tenants, 0.0)
    for tenant, c in zip(inventory.tenant, inventory.cores, strict=True):
        if tenant in servers:
            servers[tenant] += 1
            cores[tenant] += float(c)
    return servers, cores


def _write_json_atomically(path: Path, doc: Mapping[str, object]) -> None:
    """Write ``doc`` atomically (``placement_service.atomic``) into an existing directory."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ClusterInputError(f"--out: directory {str(directory)!r} does not exist")
    atomic_write_json(path, doc)


def _summary(
    model: UtilizationClustering,
    table: ClassTable,
    series: TenantSeries,
    *,
    storage_gb: Mapping[str, float] | None,
) -> dict[str, Any]:
    patterns: dict[str, dict[str, int]] = {}
    for c in table.classes:
        d = patterns.setdefault(c.pattern.value, {"classes": 0, "tenants": 0, "servers": 0})
        d["classes"] += 1
        d["tenants"] += len(c.tenants)
        d["servers"] += c.servers
    out: dict[str, Any] = {
        "tenants": len(series.tenants),
        "slots": series.n_slots,
        "interval_s": series.interval_s,
        "days": round(series.n_slots * series.interval_s / 86400.0, 2),
        "long_gaps": len(series.long_gaps),
        "patterns": patterns,
        "classes": [
            {
                "id": c.id,
                "tenants": len(c.tenants),
                "servers": c.servers,
                "cores": c.cores,
                "avg_cpu": round(c.avg_cpu, 4),
                "peak_cpu": round(c.peak_cpu, 4),
                "current_cpu": round(c.current_cpu, 4),
            }
            for c in table.classes
        ],
    }
    if table.grid is not None:
        cells: list[list[dict[str, float]]] = [
            [{"tenants": 0, "storage_gb": 0.0} for _ in range(3)] for _ in range(3)
        ]
        for tenant, cell in table.grid.items():
            counts = cells[cell.reimage_row][cell.peak_column]
            counts["tenants"] += 1
            counts["storage_gb"] += float(storage_gb.get(tenant, 0.0)) if storage_gb else 0.0
        out["grid"] = cells
    return out


def _print_summary(s: Mapping[str, Any]) -> None:
    print(
        f"clustered {s['tenants']} tenants: {s['slots']} slots of {s['interval_s']:g} s ({s['days']:g} days), "
        f"{s['long_gaps']} long gap(s), in {s['seconds']:.2f} s"
    )
    for note in s.get("sampling", {}).get("notes", []):
        print(f"  {note}")
    if s.get("own_window_tenants"):
        print(f"  {s['own_window_tenants']} tenant(s) analysed on their own observation window")
    print(f"{'pattern':<14}{'classes':>8}{'tenants':>9}{'servers':>9}")
    for pattern, d in s["patterns"].items():
        print(f"{pattern:<14}{d['classes']:>8}{d['tenants']:>9}{d['servers']:>9}")
    print(f"{'class':<18}{'tenants':>8}{'servers':>9}{'avg':>7}{'peak':>7}{'current':>9}")
    for c in s["classes"]:
        print(
            f"{c['id']:<18}{c['tenants']:>8}{c['servers']:>9}{c['avg_cpu']:>7.3f}{c['peak_cpu']:>7.3f}"
            f"{c['current_cpu']:>9.3f}"
        )
    if "grid" in s:
        print(
            "grid: tenants / storage TB per cell (rows: reimages infrequent..frequent; columns: peak low..high)"
        )
        for r, row in enumerate(s["grid"]):
            cells = "  ".join(f"{d['tenants']:>5} / {d['storage_gb'] / 1000.0:>8.1f}" for d in row)
            print(f"  row {r}: {cells}")
    if s.get("tenants_without_samples"):
        print(
            f"{len(s['tenants_without_samples'])} inventory tenant(s) have no samples: not clustered, not in the grid"
        )
    print(f"wrote {s['out']}")
