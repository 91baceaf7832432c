"""``harvest generate`` (synthetic datacenter), ``harvest convert-real`` (public CPU traces) and
``harvest check-traces`` (validate the three files).

Each writes or reads ``utilization``, ``reimages`` and ``inventory`` files (the data contracts of
``DESIGN.md``; see ``docs/traces.md`` and ``docs/generator.md``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from placement_service import HarvestError
from placement_service.validate import finite_float


def register(subparsers: Any) -> None:
    g = subparsers.add_parser(
        "generate",
        help="write a synthetic datacenter (utilization, reimages, inventory)",
        description=(
            "Generate a synthetic datacenter calibrated to the harvesting paper's characterization "
            "(most tenants roughly constant, ~40%% of servers in periodic tenants, heavy-tailed tenant "
            "sizes, >= 90%% of servers reimaged at most once a month plus correlated bursts). Writes "
            "DIR/utilization.parquet, DIR/reimages.parquet and DIR/inventory.parquet (all or nothing) "
            "and prints a summary. Same arguments -> byte-identical files. See docs/generator.md."
        ),
    )
    g.add_argument("--servers", type=int, required=True, help="number of servers in the inventory")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--out", required=True, help="output directory (created if missing)")
    g.add_argument("--days", type=finite_float, default=30.0, help="length of the trace in days (default 30)")
    g.add_argument(
        "--interval-s", type=finite_float, default=300.0, help="seconds between samples (default 300; the paper: 120)"
    )
    g.add_argument(
        "--reimage-days",
        type=finite_float,
        default=None,
        help="length of the reimage trace in days (default: --days), e.g. 365 for a durability study",
    )
    g.add_argument(
        "--sampled-servers-per-tenant",
        type=int,
        default=None,
        help=(
            "write samples for at most this many servers per tenant (default 3, or the --config file's; 0 = all). A tenant's "
            "series is the average of its servers, so a few servers carry it; all servers keep their "
            "inventory row, reimages and storage. 5,000 servers x 30 days at 120 s would otherwise be "
            "108M rows"
        ),
    )
    g.add_argument("--format", choices=("parquet", "csv"), default="parquet",
                   help="parquet (default) or csv (.csv.gz files)")
    g.add_argument(
        "--config",
        help="JSON file of generator settings overriding the defaults (names and units: docs/generator.md); "
        "--sampled-servers-per-tenant, when given, wins over the file",
    )
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.set_defaults(func=_generate)

    c = subparsers.add_parser(
        "convert-real",
        help="turn a public CPU trace (Azure, PlanetLab) into the three trace files",
        description=(
            "Convert a public per-VM CPU trace into utilization / reimages / inventory files: each VM "
            "(or group of VMs, see --grouping) becomes a primary tenant whose sampled server is the VM; "
            "the inventory adds --servers-per-vm servers per VM; reimages and hardware are synthetic "
            "(the generator's models, seeded), since no public reimage trace exists. See docs/traces.md."
        ),
    )
    c.add_argument("--source", choices=("azure", "planetlab"), required=True)
    c.add_argument("--input", required=True, help="the trace file (.csv or .csv.gz)")
    c.add_argument("--out", required=True, help="output directory")
    c.add_argument("--servers-per-vm", type=int, default=4, help="inventory servers per VM (default 4)")
    c.add_argument("--grouping", choices=("vm", "hash", "correlation"), default="vm",
                   help="how VMs form tenants: one tenant per VM (default), by a stable hash, or by correlation")
    c.add_argument("--vms-per-tenant", type=int, default=4,
                   help="target VMs per tenant for --grouping hash/correlation (default 4)")
    c.add_argument("--max-vms", type=int, default=None, help="use only the first N VMs")
    c.add_argument("--min-days", type=int, default=7,
                   help="PlanetLab: keep VMs present on at least this many of the 10 days (default 7)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.set_defaults(func=_convert)

    k = subparsers.add_parser(
        "check-traces",
        help="validate utilization / reimages / inventory files and print what they hold",
        description="Validate trace files against the data contracts; errors name file, row and column.",
    )
    k.add_argument("--utilization", required=True)
    k.add_argument("--reimages")
    k.add_argument("--inventory")
    k.add_argument("--cpu-percent", action="store_true", help="cpu / memory columns hold 0-100, not 0-1")
    k.add_argument(
        "--interval-s",
        type=finite_float,
        default=None,
        help="slot length (default: inferred from each server's median spacing; the summary names mixed "
        "intervals and tenants observed in different windows)",
    )
    k.set_defaults(func=_check)


def _print_summary(summary: dict[str, Any], paths: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({**summary, "files": {k: str(v) for k, v in paths.items()}}, indent=2, sort_keys=True))
        return
    s = summary
    print(f"servers {s['servers']}, tenants {s['tenants']}, environments {s['environments']}, racks {s['racks']}")
    ts = s["tenant_size"]
    print(
        f"tenant size: median {ts['median']:g}, p90 {ts['p90']:g}, max {ts['max']} servers; "
        f"largest 10% of tenants hold {100 * ts['top10_server_share']:.0f}% of servers"
    )
    for p, d in sorted(s["patterns"].items()):
        print(
            f"  {p:<13} {d['tenants']:>6} tenants ({100 * d['tenants'] / s['tenants']:4.1f}%)"
            f" {d['servers']:>7} servers ({100 * d['servers'] / s['servers']:4.1f}%)"
        )
    r = s["reimages"]
    print(
        f"reimages: {r['events']} in {r['days']:g} days; {100 * r['servers_at_most_1_per_month']:.1f}% of servers "
        f"<= 1 per month, max {r['max_per_server_month']:.1f}; {r['correlated_bursts']} correlated bursts "
        f"(>= 10 servers of one environment within 4 h), largest {r['largest_burst_servers']} servers"
    )
    st = s["storage_tb"]
    print(
        f"storage for HDFS: {st['total']:.1f} TB, median {st['per_server_median']:.2f} TB per server, "
        f"{st['servers_without_space']} servers lend none"
    )
    print(f"samples: {s['samples']} rows from {s['sampled_servers']} servers, every {s['interval_s']:g} s")
    for path in paths.values():
        print(f"wrote {path}")


def _generate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from placement_service.traces.generate import (
        GeneratorConfig,
        generate_datacenter,
        summarize,
        write_datacenter,
    )

    if args.servers < 1:
        raise HarvestError(f"--servers must be >= 1, got {args.servers}")
    if args.days <= 0 or args.interval_s <= 0:
        raise HarvestError("--days and --interval-s must be positive")
    cfg = GeneratorConfig()
    if args.config:
        from placement_service.validate import load_json_file

        doc = load_json_file(args.config, "generator settings")
        if not isinstance(doc, dict):
            raise HarvestError(f"{args.config}: expected a JSON object of settings")
        cfg = GeneratorConfig.from_mapping(doc, source=args.config)
    if args.sampled_servers_per_tenant is not None:
        if args.sampled_servers_per_tenant < 0:
            raise HarvestError("--sampled-servers-per-tenant must be >= 0")
        cfg = replace(cfg, sampled_servers_per_tenant=args.sampled_servers_per_tenant)
    if args.reimage_days is not None and args.reimage_days <= 0:
        raise HarvestError("--reimage-days must be positive")
    dc = generate_datacenter(
        args.servers, seed=args.seed, days=args.days, interval_s=args.interval_s, config=cfg,
        reimage_days=args.reimage_days,
    )
    paths = write_datacenter(dc, args.out, fmt=args.format)
    _print_summary(summarize(dc), paths, args.json)
    return 0


def _convert(args: argparse.Namespace) -> int:
    from placement_service.traces.generate import summarize, write_datacenter
    from placement_service.traces.real import real_datacenter

    dc = real_datacenter(
        args.input,
        source=args.source,
        servers_per_vm=args.servers_per_vm,
        grouping=args.grouping,
        vms_per_tenant=args.vms_per_tenant,
        max_vms=args.max_vms,
        min_days=args.min_days,
        seed=args.seed,
    )
    paths = write_datacenter(dc, args.out, fmt=args.format)
    _print_summary(summarize(dc), paths, args.json)
    return 0


def _check(args: argparse.Namespace) -> int:
    import numpy as np

    from placement_service.traces import io
    from placement_service.traces.series import build_tenant_series, reimage_rates

    if args.interval_s is not None and not args.interval_s > 0:
        raise HarvestError(f"--interval-s must be positive, got {args.interval_s}")
    inventory = io.load_inventory(args.inventory) if args.inventory else None
    known = inventory.server if inventory is not None else None
    samples = io.load_utilization(args.utilization, cpu_percent=args.cpu_percent, inventory=inventory)
    series, sampling = build_tenant_series(samples, interval_s=args.interval_s)
    print(
        f"{args.utilization}: {len(samples)} samples, {len(samples.factorize('server')[0])} servers, "
        f"{len(series.tenants)} tenants, {series.n_slots} slots of {series.interval_s:g} s, "
        f"{len(series.long_gaps)} long gap(s)"
    )
    # What the grid was built from: per-server intervals, mixed intervals, partial / disjoint windows.
    for note in sampling.notes():
        print(f"  {note}")
    if inventory is not None:
        print(f"{args.inventory}: {len(inventory)} servers, {len(set(inventory.tenant))} tenants")
    if args.reimages:
        events = io.load_reimages(args.reimages, known_servers=known)
        print(f"{args.reimages}: {len(events.server)} reimage events")
        if inventory is not None:
            rates = reimage_rates(events, inventory, span_s=series.n_slots * series.interval_s)
            print(f"  tenants <= 1 reimage per server per month: {np.mean(np.array(list(rates.values())) <= 1):.1%}")
    return 0
