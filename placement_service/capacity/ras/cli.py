"""``harvest ras``: solve, explain, generate, check, export, move (Online Mover), grant (emergency)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from placement_service.validate import finite_float, output_file


def register(subparsers: Any) -> None:
    ras = subparsers.add_parser(
        "ras",
        help="capacity reservations (RAS): solve, explain, generate, check, export, move, grant",
        description=(
            "Assign a region's servers to reservations that keep their requested capacity (RRU) after the "
            "loss of any one MSB, hold a shared random-failure buffer per hardware type, move as few "
            "servers as possible, and export the idle buffers and unassigned servers as the harvestable set."
        ),
    )
    sub = ras.add_subparsers(dest="ras_command", metavar="<ras-command>")

    p = sub.add_parser("solve", help="solve a region: inventory + requests (+ previous plan) -> plan A.json",
                       description="Run the RAS solve: LP bound, rounding + repair, branch-and-bound within "
                                   "the time limit; writes the plan (assignment, figures, moves, unmet "
                                   "requests with reasons, harvestable servers, solver status and bound).")  # fmt: skip
    _common(p)
    p.add_argument("--previous", help="previous plan A.json (servers that need not move stay)")
    p.add_argument("--time-limit-s", type=finite_float, help="overall time limit (default: settings.time_limit_s, 60)")
    p.add_argument("--method", choices=["auto", "lp-round", "mip", "greedy"], help="override settings.method")
    p.add_argument("--out", required=True, type=output_file, help="plan JSON to write (atomically)")
    p.add_argument("--harvestable-out", help="also write the elastic set as an inventory file (.csv/.parquet)")
    p.add_argument("--buffer-bound", action="store_true", help="also compute the embedded-buffer lower bound")
    p.add_argument("--no-check", action="store_true", help="skip the independent check of the written plan")
    g = p.add_argument_group("POP (partitioned solve on Dask; see docs/pop.md)")
    g.add_argument("--pop-k", type=_pop_k, default="auto", metavar="K|auto",
                   help="split the region into K sub-problems solved in parallel on Dask, then coalesce and "
                        "repair; 1 = one full solve; auto (the default): 1 below 20,000 available servers, "
                        "else the fewest (>= 2, a power of two, <= 16) of <= 12,500 servers each, the choice "
                        "and its reason printed")  # fmt: skip
    g.add_argument("--pop-split-threshold", type=float, default=0.0, metavar="T",
                   help="extra virtual reservations from halving the largest, as a fraction of the number of "
                        "reservations (default 0: only pieces too large for one sub-problem are split)")  # fmt: skip
    g.add_argument("--pop-seed", type=int, default=0, help="seed of the random partition (same seed, same plan)")
    g.add_argument("--pop-part-time-limit-s", type=float,
                   help="time limit of each sub-problem (default: the time limit / waves of sub-problems)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--dask-scheduler", metavar="ADDRESS", help="use an existing Dask cluster (tcp://HOST:PORT)")
    x.add_argument("--workers", type=int, help="LocalCluster worker processes (default: the machine's cores)")
    g.add_argument("--dask-timeout-s", type=float, default=10.0, help="give up reaching --dask-scheduler after this")
    p.set_defaults(func=_solve)

    p = sub.add_parser("explain", help="explain one reservation of a plan (figures, MSBs, moves, unmet reason)")
    p.add_argument("--plan", required=True, help="plan A.json")
    p.add_argument("--id", required=True, help="reservation id (or shared-buffer:<hw>)")
    p.add_argument("--inventory", help="inventory, to show capacity per MSB")
    p.add_argument("--reservations", help="R.json, to show the request")
    p.set_defaults(func=_explain)

    p = sub.add_parser("generate", help="write a synthetic region: inventory + reservation requests",
                       description="Hardware generations spread over bands of MSBs; requests from a few "
                                   "servers to thousands, many satisfiable by several hardware types.")  # fmt: skip
    p.add_argument("--servers", type=int, default=1000)
    p.add_argument("--reservations", type=int, default=20)
    p.add_argument("--msbs", type=int, default=6)
    p.add_argument("--hardware", type=int, default=3, help="number of hardware types")
    p.add_argument("--datacenters", type=int, help="default: msbs // 4, 1..3")
    p.add_argument("--fill", type=finite_float, default=0.7, help="share of the region the requests (+ buffers) take")
    p.add_argument("--drift", type=finite_float, default=0.0, metavar="P",
                   help="hardware drift: each MSB also holds, with probability P per generation outside its band, "
                        "1-3 servers of that generation (rare classes, as in real inventories; default 0)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.set_defaults(func=_generate)

    p = sub.add_parser("check", help="independent check of a plan (exit 1 when a constraint is violated)")
    _common(p)
    p.add_argument("--plan", required=True)
    p.set_defaults(func=_check)

    p = sub.add_parser("export", help="write a plan's harvestable (elastic) servers as an inventory file")
    p.add_argument("--inventory", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, type=output_file,
                   help="inventory .csv/.parquet with tenant elastic:<entity>")
    p.set_defaults(func=_export)

    p = sub.add_parser("move", help="Online Mover: replace failed servers from the shared buffer")
    _common(p)
    p.add_argument("--plan", required=True)
    p.add_argument("--failed", required=True, help="comma-separated failed servers")
    p.add_argument("--out", required=True, type=output_file, help="updated plan JSON")
    p.add_argument("--revocations-out", help="revoked elastic loans as events CSV (timestamp, server)")
    p.add_argument("--timestamp", type=finite_float, help="event time, epoch s (default: now)")
    p.set_defaults(func=_move)

    p = sub.add_parser("grant", help="emergency path: grant a new request now, greedily (next solve improves it)")
    _common(p)
    p.add_argument("--plan", required=True)
    p.add_argument("--request", required=True, help="one reservation object as JSON (same shape as in R.json)")
    p.add_argument("--use-shared-buffer", action="store_true", help="may also take shared-buffer servers")
    p.add_argument("--out", required=True, type=output_file)
    p.add_argument("--revocations-out")
    p.add_argument("--timestamp", type=finite_float)
    p.set_defaults(func=_grant)

    from placement_service.capacity.ras import revlog, serve

    serve.add_parser(sub)
    revlog.add_parser(sub)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inventory", required=True, help="inventory .csv/.parquet: server, hardware, datacenter, "
                                                      "msb, rack, available, in_use")  # fmt: skip
    p.add_argument("--reservations", required=True, help="R.json: {reservations: [...], settings: {...}}")


def _pop_k(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {value!r}") from None


def _solve(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.domain import Method, Problem
    from placement_service.capacity.ras.online import harvestable_columns
    from placement_service.capacity.ras.solve import buffer_lower_bound, solve

    region = io.read_inventory(args.inventory)
    requests, settings = io.read_requests(args.reservations)
    if args.time_limit_s is not None:
        settings = replace(settings, time_limit_s=args.time_limit_s)
    if args.method:
        settings = replace(settings, method=Method(args.method))
    previous = io.read_assignment(args.previous, region) if args.previous else {}
    problem = Problem(region, requests, settings, previous)
    pop: dict[str, Any] | None = None
    pop_k = args.pop_k
    if pop_k == "auto":
        from placement_service.capacity.pop.solve import auto_k

        pop_k, why = auto_k(region)
        print(f"--pop-k auto: {pop_k} ({why})", file=sys.stderr)
    if pop_k != 1:
        from placement_service.capacity.pop.solve import PopOptions, solve_pop

        if args.workers is not None and args.workers < 1:
            from placement_service.capacity import CapacityError

            raise CapacityError(f"--workers must be >= 1, got {args.workers}")
        print(f"solving {len(region)} servers, {len(requests)} requests with POP k={pop_k} on "
              f"{args.dask_scheduler or 'a LocalCluster'} (time limit {settings.time_limit_s:g} s)",
              file=sys.stderr)  # fmt: skip
        plan, pop = solve_pop(problem, PopOptions(
            k=pop_k, split_threshold=args.pop_split_threshold, seed=args.pop_seed,
            scheduler=args.dask_scheduler, workers=args.workers,
            connect_timeout_s=args.dask_timeout_s, part_time_limit_s=args.pop_part_time_limit_s,
        ))  # fmt: skip
    else:
        print(f"solving {len(region)} servers, {len(requests)} requests, time limit {settings.time_limit_s:g} s "
              f"(method {settings.method.value}; -v shows progress)", file=sys.stderr)  # fmt: skip
        plan = solve(problem)
    doc = plan.to_json()
    if pop is not None:
        doc["solver"].update(pop)  # type: ignore[attr-defined]
    if args.buffer_bound:
        doc["buffer_bound"] = buffer_lower_bound(problem)
    if not args.no_check:
        from placement_service.capacity.ras.check import check_plan

        problems = check_plan(io.region_columns(region), io.load_json(args.reservations), doc)
        doc["check"] = {"ok": not problems, "violations": problems[:50]}
    io.write_json(args.out, doc)
    if args.harvestable_out:
        io.write_table(args.harvestable_out, harvestable_columns(region, plan.assignment))
    s = plan.solver
    print(f"{s.status} ({s.method}): objective {s.objective:.3f}, bound {s.bound:.3f} (LP {s.lp_bound:.3f}), "
          f"gap {s.gap:.2%}, {s.wall_s:.1f} s")  # fmt: skip
    sm = plan.summary
    print(f"{sm['assigned']} of {sm['available']} available servers assigned; {sm['moves']} moves "
          f"({sm['moves_in_use']} in use); {sm['harvestable']} harvestable; embedded buffer "
          f"{float(sm['embedded_buffer_frac']):.2%}")  # type: ignore[arg-type]  # fmt: skip
    bb: dict[str, Any] = doc.get("buffer_bound", {})  # type: ignore[assignment]
    if bb:
        print(f"embedded buffer lower bound {bb['frac_lb']:.2%} (perfect spread {bb['perfect_spread_frac']:.2%})")
    for u in plan.unmet:
        print(f"unmet {u.id}: {u.reason}")
    for b in plan.rack_spread_breaches:
        print(f"rack-spread {b['id']}: rack {b['rack']} holds {float(b['share']):.3f} of the request, limit {b['limit']}")  # type: ignore[arg-type]
    for w in plan.inventory_warnings:
        print(f"inventory: {w}", file=sys.stderr)
    chk: dict[str, Any] = doc.get("check", {})  # type: ignore[assignment]
    if chk and not chk["ok"]:
        print(f"CHECK FAILED: {len(problems)} violation(s), first: {problems[0]}", file=sys.stderr)
        return 1
    if pop is not None and not pop["complete"]:
        print(f"INCOMPLETE: POP sub-problem(s) {pop['incomplete_parts']} did not finish ({pop['incomplete_note']})",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _explain(args: argparse.Namespace) -> int:
    from placement_service.capacity.ras import CapacityError, io

    plan = io.load_json(args.plan)
    rid = args.id
    sections = [plan.get(k) for k in ("reservations", "shared_buffers")]
    fig = next((sec[rid] for sec in sections if isinstance(sec, dict) and rid in sec), None)
    if fig is None:
        raise CapacityError(f"{args.plan}: no reservation or shared buffer {rid!r} in the plan")
    if args.reservations:
        requests, _ = io.read_requests(args.reservations)
        for r in requests:
            if r.id == rid:
                print(f"request {rid}: {r.capacity_rru:g} RRU after any MSB loss; RRU per server {dict(r.rru)}; "
                      f"datacenter affinity {dict(r.datacenter_affinity) if r.datacenter_affinity else None}")  # fmt: skip
    for k, v in fig.items():
        if k != "servers":
            print(f"{k}: {v}")
    servers = fig.get("servers", [])
    print(f"servers: {len(servers) if isinstance(servers, list) else servers}")
    if args.inventory and isinstance(servers, list) and args.reservations:
        region = io.read_inventory(args.inventory)
        idx = region.index()
        req = {r.id: r for r in io.read_requests(args.reservations)[0]}.get(rid)
        per: dict[str, float] = {}
        for s in servers:
            i = idx[s]
            m = region.msb_names[region.msb[i]]
            per[m] = per.get(m, 0.0) + (req.rru.get(region.hardware_names[region.hardware[i]], 0.0) if req else 1.0)
        print("RRU per MSB: " + ", ".join(f"{m}={v:g}" for m, v in sorted(per.items())))
    moves = [m for m in plan.get("moves", []) if rid in (m.get("from"), m.get("to"))]
    print(f"moves: {sum(1 for m in moves if m.get('to') == rid)} in, {sum(1 for m in moves if m.get('from') == rid)} "
          f"out ({sum(1 for m in moves if m.get('in_use'))} of them in use)")  # fmt: skip
    reasons = [u for u in plan.get("unmet", []) if u.get("id") == rid]
    for u in reasons:
        print(f"UNMET ({u.get('constraint')}): {u.get('reason')}")
    if not reasons:
        print("all constraints met")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.generate import generate_region, generate_requests

    if not 0.0 <= args.drift <= 1.0:
        from placement_service.capacity import CapacityError

        raise CapacityError(f"--drift must be within [0, 1] (a probability), got {args.drift:g}")
    region = generate_region(n_servers=args.servers, n_msbs=args.msbs, n_hardware=args.hardware,
                             n_datacenters=args.datacenters, drift=args.drift, seed=args.seed)  # fmt: skip
    requests = generate_requests(region, n_reservations=args.reservations, fill=args.fill, seed=args.seed)
    out = Path(args.out_dir)
    inv = out / f"inventory.{args.format}"
    io.write_table(inv, io.region_columns(region))
    io.write_json(out / "reservations.json", io.requests_to_json(requests))
    print(f"wrote {inv} ({len(region)} servers) and {out / 'reservations.json'} ({len(requests)} requests)")
    return 0


def _check(args: argparse.Namespace) -> int:
    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.check import check_plan

    region = io.read_inventory(args.inventory)
    problems = check_plan(io.region_columns(region), io.load_json(args.reservations), io.load_json(args.plan))
    for p in problems:
        print(p)
    print("plan OK" if not problems else f"{len(problems)} violation(s)")
    return 0 if not problems else 1


def _export(args: argparse.Namespace) -> int:
    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.online import harvestable_columns

    region = io.read_inventory(args.inventory)
    cols = harvestable_columns(region, io.read_assignment(args.plan, region))
    io.write_table(args.out, cols)
    print(f"wrote {args.out}: {len(cols['server'])} harvestable servers")
    return 0


def _move(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.online import online_move, revocation_events
    from placement_service.capacity.ras.plan import replan

    region = io.read_inventory(args.inventory)
    requests, settings = io.read_requests(args.reservations)
    before = io.read_assignment(args.plan, region)
    failed = [s.strip() for s in args.failed.split(",") if s.strip()]
    idx = region.index()
    unknown = [s for s in failed if s not in idx]
    if unknown:
        from placement_service.capacity import CapacityError

        raise CapacityError(f"--failed: server(s) not in {args.inventory}: {unknown[:5]}")
    avail = region.available.copy()
    avail[[idx[s] for s in failed]] = False
    live = replace(region, available=avail)
    res = online_move(live, requests, before, failed)
    doc = replan(live, requests, settings, res.assignment, before, "online-mover").to_json()
    doc["online"] = {"failed": failed, "replacements": [list(r) for r in res.replacements], "unmet": list(res.unmet)}
    io.write_json(args.out, doc)
    if args.revocations_out:
        io.write_table(args.revocations_out, revocation_events(res.revoked, args.timestamp or time.time()))
    for old, new in res.replacements:
        print(f"{old} -> replaced by {new}")
    for u in res.unmet:
        print(f"unmet: {u}")
    return 0


def _grant(args: argparse.Namespace) -> int:
    from placement_service.capacity.ras import CapacityError, io
    from placement_service.capacity.ras.online import emergency_grant, revocation_events
    from placement_service.capacity.ras.plan import replan

    region = io.read_inventory(args.inventory)
    from placement_service.validate import InputError, loads_json

    try:
        raw = loads_json(args.request, "--request")
    except InputError as exc:
        raise CapacityError(str(exc)) from None
    (request,), _ = io.parse_requests({"reservations": [raw]}, "--request")
    requests, settings = io.read_requests(args.reservations)
    if any(r.id == request.id for r in requests):
        raise CapacityError(f"--request: id {request.id!r} already exists in {args.reservations}")
    before = io.read_assignment(args.plan, region)
    res = emergency_grant(region, request, before, use_shared_buffer=args.use_shared_buffer)
    doc = replan(region, requests + (request,), settings, res.assignment, before, "emergency").to_json()
    doc["emergency"] = {"id": request.id, "request": raw, "servers": list(res.revoked), "unmet": list(res.unmet)}
    io.write_json(args.out, doc)
    if args.revocations_out:
        io.write_table(args.revocations_out, revocation_events(res.revoked, args.timestamp or time.time()))
    print(f"granted {len(res.revoked)} servers to {request.id}")
    for u in res.unmet:
        print(f"unmet: {u}")
    return 0 if not res.unmet else 1
