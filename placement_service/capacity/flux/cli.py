"""``harvest flux``: generate, model, predict, plan, check, execute, ledger, to-ras."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from placement_service.validate import finite_float


def register(subparsers: Any) -> None:
    flux = subparsers.add_parser(
        "flux",
        help="regional capacity and traffic plans (Flux): generate, model, plan, check, execute, ledger, to-ras",
        description=(
            "Plan how much of each service runs in each region and which share of each product's traffic "
            "each region takes, from a service model fitted on RPC traces; execute the plan in three "
            "phases through a capacity ledger; hand one region's targets to RAS."
        ),
    )
    sub = flux.add_subparsers(dest="flux_command", metavar="<flux-command>")

    p = sub.add_parser("generate", help="write a synthetic instance (model.json, demand.json, supply.json)",
                       description="Seeded synthetic instance: regions with different hardware mixes and "
                                   "headroom, heavy-tailed services shared by products through call graphs "
                                   "of depth > 2; total supply >= total demand at every timestep.")  # fmt: skip
    p.add_argument("--regions", type=int, required=True)
    p.add_argument("--services", type=int, required=True)
    p.add_argument("--products", type=int, required=True)
    p.add_argument("--hardware", type=int, required=True)
    p.add_argument("--timesteps", type=int, default=4, help="timesteps including the baseline t0 (>= 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--refresh", type=int, default=0, help="K regions lose 30%% of their supply from t1 on")
    p.add_argument(
        "--traces", action="store_true", help="also write synthetic RPC traces + pod CPU (DIR/traces/)"
    )
    p.add_argument("--out", required=True, help="directory to write")
    p.set_defaults(func=_generate)

    p = sub.add_parser("model", help="fit the service model (alpha, residuals, metric per service) from traces",
                       description="Attribute each sampled call to the product of its nearest upstream "
                                   "gateway, split each service's peak-window CPU by the products' demand "
                                   "shares (call counts or span time, whichever predicts better).")  # fmt: skip
    p.add_argument(
        "--traces", required=True, help="directory with trace/HH_MM_trace.csv[.gz], metric/, faults.json"
    )
    p.add_argument("--gateway", default="ts-gateway-service", help="gateway service name")
    p.add_argument(
        "--holdout", type=finite_float, default=0.3, help="share of minutes (every k-th) held out for the check"
    )
    p.add_argument("--peak-minutes", type=int, default=10, help="peak window length, minutes")
    p.add_argument(
        "--fault-minutes", type=int, default=1, help="minutes left out from each fault's inject_time on"
    )
    p.add_argument("--out", required=True, help="model.json to write")
    p.add_argument("--report", help="also write the per-service report (residuals, held-out error) as JSON")
    p.set_defaults(func=_model)

    p = sub.add_parser("predict", help="per-service CPU from product request counts with a fitted model",
                       description="Per-service CPU (millicores) for given product traffic: equation 1 around "
                                   "the training mean where the model beat its baseline on the held-out windows, "
                                   "else the service's baseline (mean CPU over the training windows), stated per "
                                   "service; see docs/flux.md.")  # fmt: skip
    p.add_argument("--model", required=True, help="model.json from `harvest flux model`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--counts", help="JSON {product: sampled traces per trace window}; products left out are "
                                      "taken at their training mean")  # fmt: skip
    src.add_argument("--traces", help="a trace directory (as for `flux model`): its mean traffic per window")
    p.add_argument("--gateway", default="ts-gateway-service", help="gateway service name (with --traces)")
    p.add_argument("--fault-minutes", type=int, default=1, help="with --traces: minutes left out after each fault")
    p.add_argument("--out", help="also write the prediction as JSON")
    p.set_defaults(func=_predict)

    p = sub.add_parser("plan", help="solve the joint capacity + traffic plan -> plan.json")
    p.add_argument("--inputs", help="directory with model.json, demand.json, supply.json")
    p.add_argument("--model")
    p.add_argument("--demand")
    p.add_argument("--supply")
    p.add_argument("--previous", help="previous plan.json: its executed step becomes the baseline")
    p.add_argument("--ledger", help="ledger.sqlite: apply its future events to the baseline")
    p.add_argument("--time-limit-s", type=finite_float, default=60.0)
    p.add_argument("--integer-capacity", action="store_true", help="whole RRUs (a MIP; default LP)")
    p.add_argument("--out", required=True)
    g = p.add_argument_group("POP (partitioned solve; docs/pop.md, measured in docs/bench/flux.md)")
    g.add_argument("--pop-k", type=int, metavar="K",
                   help="solve in K parts instead of one model: traffic shares from the plan with services "
                        "aggregated per class, then the services split at random into K equal groups, each "
                        "with a share of every region's supply in proportion to its need, solved apart and "
                        "coalesced (regions left short are re-solved whole). 1 = the single solve")  # fmt: skip
    g.add_argument("--pop-seed", type=int, default=0, help="seed of the random service partition")
    g.add_argument("--pop-workers", type=int, metavar="N",
                   help="solve the K parts on a local Dask cluster of N worker processes "
                        "(default: one after another in this process)")  # fmt: skip
    p.set_defaults(func=_plan)

    p = sub.add_parser("check", help="independent check of every phase of every step (exit 1 on a violation)")
    p.add_argument("plan")
    p.set_defaults(func=_check)

    from placement_service.capacity.flux import cli_exec

    cli_exec.register(sub)


def _generate(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.generate import generate
    from placement_service.capacity.flux.io import write_inputs

    for name in ("regions", "services", "products", "hardware"):
        if getattr(args, name) < 1:
            print(f"harvest flux generate: --{name} must be >= 1", file=sys.stderr)
            return 2
    if args.timesteps < 2:
        print(
            "harvest flux generate: --timesteps must be >= 2 (the baseline and one future step)",
            file=sys.stderr,
        )
        return 2
    inst, calls = generate(n_regions=args.regions, n_services=args.services, n_products=args.products,
                           n_hardware=args.hardware, n_timesteps=args.timesteps, seed=args.seed,
                           refresh=args.refresh)  # fmt: skip
    write_inputs(args.out, inst)
    if args.traces:
        from placement_service.capacity.flux.synth_traces import write_traces

        write_traces(Path(args.out) / "traces", inst, calls, seed=args.seed)
    print(json.dumps({"out": args.out, "regions": len(inst.regions), "services": len(inst.services),
                      "products": len(inst.products), "hardware": len(inst.hardware),
                      "timesteps": len(inst.timesteps)}))  # fmt: skip
    return 0


def _model(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.io import write_json
    from placement_service.capacity.flux.traces_io import fit_from_directory

    result = fit_from_directory(
        args.traces, gateway=args.gateway, holdout=args.holdout, peak_minutes=args.peak_minutes
    )
    write_json(args.out, result.model_doc())
    if args.report:
        write_json(args.report, result.report_doc())
    print(result.summary_text())
    return 0


def _predict(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux import FluxError
    from placement_service.capacity.flux.io import load_json, write_json
    from placement_service.capacity.flux.predict import load_predictor, predict

    model = load_predictor(load_json(args.model), args.model)
    if args.counts:
        counts = load_json(args.counts)
        if not isinstance(counts, dict):
            raise FluxError(f"{args.counts}: expected a JSON object {{product: traces per window}}")
    else:
        from placement_service.capacity.flux.traces_io import mean_traffic

        counts = mean_traffic(args.traces, gateway=args.gateway, fault_minutes=args.fault_minutes)
    result = predict(model, counts)
    if args.out:
        write_json(args.out, result.to_json())
    print(f"{'service':34s} {'CPU (m)':>9s} predictor")
    for sp in result.services:
        print(f"{sp.service:34s} {sp.cpu_mcores:9.2f} {sp.predictor}" + ("" if sp.predictor == "model" else
                                                                         f" ({sp.reason})"))  # fmt: skip
    by_base = [sp.service for sp in result.services if sp.predictor == "baseline"]
    print(f"{len(result.services)} services: {len(result.services) - len(by_base)} by the model, {len(by_base)} by "
          f"their baseline (mean CPU over the training windows)")  # fmt: skip
    if result.products_at_mean:
        print(f"products not in the counts, taken at their training mean: {list(result.products_at_mean)}")
    if result.ignored_products:
        print(f"products the model does not know, ignored: {list(result.ignored_products)}", file=sys.stderr)
    return 0


def load_instance(args: argparse.Namespace) -> Any:
    from placement_service.capacity.flux import FluxError
    from placement_service.capacity.flux.io import DEMAND_FILE, MODEL_FILE, SUPPLY_FILE, read_instance

    if args.inputs:
        d = Path(args.inputs)
        paths = (args.model or d / MODEL_FILE, args.demand or d / DEMAND_FILE, args.supply or d / SUPPLY_FILE)
    elif args.model and args.demand and args.supply:
        paths = (args.model, args.demand, args.supply)
    else:
        raise FluxError("give --inputs DIR, or all of --model, --demand and --supply")
    return read_instance(*paths)


def _plan(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.io import load_json, write_json
    from placement_service.capacity.flux.planner import plan
    from placement_service.capacity.flux.previous import apply_events, rebase

    inst = load_instance(args)
    if args.previous:
        inst = rebase(inst, load_json(args.previous), str(args.previous))
    if args.ledger:
        from placement_service.capacity.flux.ledger import Ledger

        with Ledger(args.ledger) as ledger:
            inst = apply_events(inst, ledger.future_events())
    if args.pop_k is not None:
        doc = _plan_pop(inst, args)
    else:
        doc = plan(inst, time_limit_s=args.time_limit_s, integer_capacity=args.integer_capacity)
    write_json(args.out, doc)
    s = doc["solver"]
    if "pop" in doc:
        print(f"pop k={doc['pop']['k']}: parts of {[p['services'] for p in doc['pop']['parts']]} services; "
              f"regions re-solved: {next((ph['regions'] for ph in doc['pop']['phases'] if ph['phase'] == 'repair'), [])}")  # fmt: skip
    print(f"plan {args.out}: {s['status']}, objective {s['objective']:.4f}, {s['variables']} variables, "
          f"{s['constraints']} constraints, {s['wall_s']:.2f} s solve; {len(doc['deficits'])} deficit(s); "
          f"largest region share {doc['metrics']['largest_region_share']}")  # fmt: skip
    for d in doc["deficits"][:10]:
        print(f"  deficit {d['region']}/{d['hardware']}/{d['t']}: {d['amount']:.2f} RRU: {d['reason']}")
    return 0


def _plan_pop(inst: Any, args: argparse.Namespace) -> dict[str, Any]:
    from placement_service.capacity.flux import FluxError
    from placement_service.capacity.pop.flux_pop import run_inline, solve_pop

    if args.integer_capacity:
        raise FluxError("--pop-k and --integer-capacity cannot be combined (POP parts are LPs)")
    if args.pop_workers is None:
        return solve_pop(inst, args.pop_k, seed=args.pop_seed, time_limit_s=args.time_limit_s, runner=run_inline)
    if args.pop_workers < 1:
        raise FluxError(f"--pop-workers must be >= 1, got {args.pop_workers}")
    from placement_service.capacity.pop.execute import connect, map_parts

    client, cluster = connect(None, args.pop_workers)
    try:
        return solve_pop(inst, args.pop_k, seed=args.pop_seed, time_limit_s=args.time_limit_s,
                         runner=map_parts(client, 3 * args.time_limit_s + 60))  # fmt: skip
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _check(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.checker import PlanShapeError, check
    from placement_service.capacity.flux.io import load_json

    doc = load_json(args.plan)
    try:
        violations = check(doc)
    except PlanShapeError as exc:
        print(f"{args.plan}: not a Flux plan: {exc}", file=sys.stderr)
        return 1
    if violations:
        print(f"{args.plan}: INFEASIBLE: {violations[0]}  ({len(violations)} violation(s) shown at most 50)")
        return 1
    steps = len(doc["timesteps"]) - 1
    print(f"{args.plan}: OK: baseline and {steps} step(s) x 3 phases feasible")
    return 0
