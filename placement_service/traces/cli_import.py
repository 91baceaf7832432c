"""``harvest import``: an operator's monitoring exports -> utilization / reimages / inventory files.

The pure reading and checking lives in :mod:`placement_service.traces.importer`; this adapter
parses flags, runs the steps in order and prints what was done (every adjustment counted).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from placement_service.traces.columns import fmt_time
from placement_service.validate import finite_float


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "import",
        help="turn your own monitoring exports (long or wide, CSV or Parquet) into the three trace files",
        description=(
            "Read per-server CPU as exported by a monitoring system and write DIR/utilization, "
            "DIR/inventory and DIR/reimages in the project's data contract (docs/traces.md). Long "
            "layout: one row per (time, server); wide: a time column then one column per server. "
            "Empty cells are gaps (dropped and counted, never interpolated); real timestamps are kept; "
            "servers may have different intervals and start dates. Columns are mapped with "
            "--utilization-columns / --inventory-columns / --reimage-columns NAME=COLUMN,... . "
            "Without a reimage log, --synthetic-reimages draws reimages from the generator's model "
            "(said in the output). Example: harvest import --utilization cpu.csv --layout wide "
            "--cpu-unit percent --clip-cpu --default-cores 32 --default-memory-mb 131072 "
            "--default-storage-gb 2000 --synthetic-reimages --out mydc/"
        ),
    )
    p.add_argument("--utilization", required=True, help="per-server CPU export (.csv, .csv.gz, .parquet)")
    p.add_argument("--layout", choices=("auto", "long", "wide"), default="auto",
                   help="long (a row per time and server), wide (a column per server), or auto (default: long "
                   "when the server and cpu columns exist)")
    p.add_argument("--utilization-columns", metavar="NAME=COLUMN,...",
                   help="map the file's columns: timestamp, server, cpu, tenant, memory (wide: timestamp only; "
                   "default: a column named timestamp, else the first column)")
    p.add_argument("--time-unit", choices=("s", "ms"), default="s",
                   help="numeric timestamps are epoch seconds (default) or milliseconds; ISO 8601 text always works")
    p.add_argument("--offset-start", metavar="TIME",
                   help="the utilization times are offsets in seconds (e.g. Azure's t_offset_s): the ISO 8601 "
                   "time (or epoch seconds) of offset 0; default: the times are absolute")
    p.add_argument("--cpu-unit", choices=("auto", "fraction", "percent"), default="auto",
                   help="the CPU column as 0..1 or 0..100, decided from all its values (auto, default: fraction "
                   "when none is above 1, percent when at least 5%% are above 1 and one is above 2; anything "
                   "else is refused naming the rows). It applies to CPU only")
    p.add_argument("--memory-unit", choices=("auto", "fraction", "percent"), default="auto",
                   help="the memory column as 0..1 or 0..100 (auto: the same rule, on memory's own values)")
    p.add_argument("--allow-any-time", action="store_true",
                   help="keep sample and reimage times before 1990-01-01 or more than a day after now "
                   "(default: refused, naming the row: offsets need --offset-start, milliseconds --time-unit ms)")
    p.add_argument("--clip-cpu", action="store_true",
                   help="clip CPU above 100%% (hyperthreading, burst credits) to 100%% and count it; "
                   "default: such a sample is an error naming its row")
    p.add_argument("--inventory", help="inventory table or event log; default: one row per reporting server "
                   "with the --default-* capacities")
    p.add_argument("--inventory-columns", metavar="NAME=COLUMN,...",
                   help="map: server, tenant, environment, rack, cores, memory_mb, storage_gb, hardware, "
                   "datacenter, msb, timestamp (for --inventory-event-log)")
    p.add_argument("--inventory-event-log", action="store_true",
                   help="the inventory lists changes: keep the last row per server (by timestamp if mapped)")
    p.add_argument("--default-cores", type=finite_float, help="cores of servers whose inventory has no cores column")
    p.add_argument("--default-memory-mb", type=finite_float, help="memory (MB) where the inventory has none")
    p.add_argument("--default-storage-gb", type=finite_float, help="storage lent to HDFS (GB) where the inventory has none")
    p.add_argument("--reimages", help="reimage / repair log (kept whole, whatever its span)")
    p.add_argument("--reimage-columns", metavar="NAME=COLUMN,...", help="map: timestamp, server")
    p.add_argument("--synthetic-reimages", action="store_true",
                   help="no reimage log: draw reimages from the generator's model over the utilization window")
    p.add_argument("--reimage-days", type=finite_float, default=None,
                   help="with --synthetic-reimages: days of reimages (default: the utilization window)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic reimages (default 0)")
    p.add_argument("--out", required=True, help="output directory (files are written together, all or nothing)")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_import)


def _positive(value: float | None, flag: str) -> None:
    from placement_service.traces.columns import TraceError

    if value is not None and not (np.isfinite(value) and value >= 0):
        raise TraceError(flag, f"expected a finite number >= 0, got {value}")


def _import(args: argparse.Namespace) -> int:
    from placement_service.core.types import ReimageEvents
    from placement_service.traces.columns import TraceError, check_inventory_tenants
    from placement_service.traces.importer import (
        DAY_S,
        ImportOptions,
        ImportReport,
        import_inventory,
        import_reimages,
        import_utilization,
        inventory_from_samples,
        keep_inventory_servers,
        parse_column_map,
        synthetic_reimages,
        write_import,
    )

    defaults = {}
    for name in ("cores", "memory_mb", "storage_gb"):
        value = getattr(args, f"default_{name}")
        _positive(value, f"--default-{name.replace('_', '-')}")
        if value is not None:
            defaults[name] = value
    if args.reimage_days is not None and not (np.isfinite(args.reimage_days) and args.reimage_days > 0):
        raise TraceError("--reimage-days", f"expected a positive number of days, got {args.reimage_days}")
    if args.reimages and args.synthetic_reimages:
        raise TraceError("--synthetic-reimages", "give either --reimages or --synthetic-reimages, not both")
    offset_start_s = _epoch_s(args.offset_start) if args.offset_start else 0.0
    opts = ImportOptions(
        offset_start_s=offset_start_s,
        layout=args.layout, cpu_unit=args.cpu_unit, memory_unit=args.memory_unit, clip_cpu=args.clip_cpu,
        time_unit=args.time_unit, allow_any_time=args.allow_any_time,
        utilization_columns=parse_column_map(args.utilization_columns, "utilization"),
        inventory_columns=parse_column_map(args.inventory_columns, "inventory"),
        reimage_columns=parse_column_map(args.reimage_columns, "reimages"),
        inventory_event_log=args.inventory_event_log, defaults=defaults,
    )
    report = ImportReport()
    inventory = None
    if args.inventory:
        inventory = import_inventory(args.inventory, opts, report)
        report.inventory_source = f"from {args.inventory}" + (" (event log: last row per server)"
                                                         if args.inventory_event_log else "")
    tenant_of = dict(zip(inventory.server, inventory.tenant, strict=True)) if inventory is not None else None
    samples = import_utilization(args.utilization, opts, report, tenant_of=tenant_of)
    if inventory is None:
        inventory = inventory_from_samples(samples, opts, report)
    else:
        samples = keep_inventory_servers(samples, inventory, report)
        names, codes = samples.factorize("server")
        t_names, t_codes = samples.factorize("tenant")
        check_inventory_tenants(args.utilization, names, codes, t_names, t_codes, inventory)
    if args.reimages:
        events = import_reimages(args.reimages, opts, inventory, report)
    elif args.synthetic_reimages:
        days = args.reimage_days or max((report.last_s - report.first_s) / DAY_S, 1.0)
        events = synthetic_reimages(inventory, start_s=report.first_s, days=days, seed=args.seed, report=report)
    else:
        events = ReimageEvents(timestamp_s=np.empty(0), server=())
        report.reimage_source = "none (no --reimages or --synthetic-reimages: durability will need one)"
    paths = write_import(args.out, samples, inventory, events, fmt=args.format)
    summary = {**report.as_dict(), "samples_of_servers_not_in_inventory": report.dropped["server_not_in_inventory"],
               "dropped_total": sum(report.dropped.values()), "files": {k: str(v) for k, v in paths.items()}}
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True, allow_nan=False))
        return 0
    _print_summary(args, report, paths)
    return 0


_SHOWN = 10  # lines of per-server intervals and per-tenant windows printed (--json has all)


def _print_summary(args: argparse.Namespace, r: Any, paths: Any) -> None:
    from placement_service.traces.importer import DAY_S, DROP_REASONS

    print(f"{args.utilization}: {r.layout} layout; {r.samples} samples from {r.servers} servers in {r.tenants} "
          f"tenants, {fmt_time(r.first_s)} to {fmt_time(r.last_s)} (real times kept)")
    print(f"  CPU read as {r.cpu_unit} ({r.cpu_unit_evidence})"
          + (f"; memory read as {r.memory_unit} ({r.memory_unit_evidence})" if r.memory_unit else ""))
    by = list(r.interval_s_by_server.items())
    intervals = ", ".join(f"{k} s: {v} servers" for k, v in by[:_SHOWN])
    print(f"  sampling interval (median per server): {intervals or '-'}"
          + (f" and {len(by) - _SHOWN} more distinct intervals (--json lists every server)" if len(by) > _SHOWN else ""))
    windows = sorted(r.window_by_tenant.items(), key=lambda kv: (kv[1]["first_s"], kv[0]))
    if r.common_window_s is not None:
        lo, hi = r.common_window_s
        common = f"all observed from {fmt_time(lo)} to {fmt_time(hi)} ({(hi - lo) / DAY_S:.1f} days)"
    else:
        common = "no time when every tenant was observed (disjoint windows)"
    if len({(w["first_s"], w["last_s"]) for _n, w in windows}) == 1:
        print(f"  observation window: the same for every tenant ({len(windows)}): {common}")
        windows = []
    else:
        print(f"  observation window per tenant ({len(windows)} tenants; {common}):")
    for name, w in windows[:_SHOWN]:
        print(f"    {name}: {fmt_time(w['first_s'])} to {fmt_time(w['last_s'])} ({w['days']:.1f} days, "
              f"{w['samples']} samples)")
    if len(windows) > _SHOWN:
        print(f"    ... {len(windows) - _SHOWN} more tenants (--json lists every tenant)")
    print((f"  {r.memory_gaps} samples kept with an empty memory cell (a gap in memory only); " if r.memory_unit
           else "  ") + f"{r.clipped} samples above 100% clipped" + ("" if args.clip_cpu else
                                                                     " (none allowed without --clip-cpu)"))
    total = sum(r.dropped.values())
    print(f"dropped: {total} rows or cells in all, every one counted here:")
    for key, reason in DROP_REASONS.items():
        named = r.dropped_rows.get(key) or []
        print(f"  {r.dropped[key]} {reason}" + (f": {'; '.join(named)}" + ("; ..." if r.dropped[key] > len(named)
                                                                          else "") if named else ""))
    print(f"inventory: {r.inventory_servers} servers, {r.inventory_source}"
          + (f" ({r.inventory_rows} rows read)" if r.inventory_rows else ""))
    for name, how in sorted(r.defaults_used.items()):
        print(f"  {name}: {how}")
    print(f"reimages: {r.reimages} events; {r.reimage_source}")
    for path in paths.values():
        print(f"wrote {path}")


def _epoch_s(text: str) -> float:
    """``--offset-start``: epoch seconds or an ISO 8601 time (naive = UTC)."""
    import pyarrow as pa

    from placement_service.traces.columns import TraceError, timestamp_s_column

    try:
        return float(timestamp_s_column("--offset-start", pa.table({"timestamp": pa.array([text.strip()])}))[0])
    except TraceError:
        raise TraceError("--offset-start", f"expected an ISO 8601 time or epoch seconds, got {text!r}") from None
