"""``harvest flux execute | ledger ... | to-ras``: run a plan through the capacity ledger; hand off to RAS."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from placement_service.validate import finite_float


def register(sub: Any) -> None:
    p = sub.add_parser("execute", help="write a plan's three-phase DAG into the ledger and activate ready events",
                       description="Check the plan (refuses an infeasible one), add its execution DAG (resize, "
                                   "shift, supply, checkpoint events) to the ledger as proposed events and run "
                                   "the orchestrator once. --auto-complete also plays the executing systems: "
                                   "it completes active events until nothing moves (--fail-event makes one "
                                   "fail), leaving review-held and blocked events for the operator.")  # fmt: skip
    p.add_argument("--plan", required=True)
    p.add_argument("--ledger", required=True, help="ledger.sqlite (created when missing)")
    p.add_argument("--steps", type=int, default=None, help="only the first N steps (default: all)")
    p.add_argument("--writer", default="flux")
    p.add_argument("--plan-id", default=None, help="prefix of the event ids (default: the plan file name)")
    p.add_argument("--start-ts", type=finite_float, default=None, help="timestamp of the first step (default: now)")
    p.add_argument("--auto-complete", action="store_true", help="complete active events until nothing moves")
    p.add_argument("--fail-event", action="append", default=[], help="with --auto-complete: fail this event")
    p.set_defaults(func=_execute)

    led = sub.add_parser(
        "ledger", help="capacity ledger: list, approve, complete, fail, orchestrate, run, add"
    )
    lsub = led.add_subparsers(dest="ledger_command", metavar="<ledger-command>")
    q = lsub.add_parser("list", help="events (JSON lines)")
    q.add_argument("--ledger", required=True)
    q.add_argument("--state", choices=["proposed", "active", "succeeded", "failed"])
    q.set_defaults(func=_list)
    for name, helptext in (("approve", "operator approval of review-held events"),
                           ("complete", "report active events as succeeded"),
                           ("fail", "report active events as failed")):  # fmt: skip
        q = lsub.add_parser(name, help=helptext + " (then orchestrate)")
        q.add_argument("--ledger", required=True)
        q.add_argument("ids", nargs="+")
        if name == "approve":
            q.add_argument("--operator", default="operator")
        if name == "fail":
            q.add_argument("--reason", required=True)
        q.set_defaults(func=_transition, action=name)
    q = lsub.add_parser("run", help="play the executing systems: complete active events until nothing moves")
    q.add_argument("--ledger", required=True)
    q.add_argument("--fail-event", action="append", default=[], help="fail this event when it becomes active")
    q.set_defaults(func=_run_cmd)
    q = lsub.add_parser("orchestrate", help="activate every event whose antecedents succeeded")
    q.add_argument("--ledger", required=True)
    q.set_defaults(func=_orchestrate)
    q = lsub.add_parser(
        "add", help="add events from a JSON file: a list [{id, kind, timestamp, payload, antecedents, review, "
        "note}, ...] or an object {\"events\": [...]}",
        description="Add a batch of events atomically (all or nothing). The file holds a JSON list of events or "
                    "an object whose only key is \"events\" (a list). Each event: id (text), kind (resize, shift, "
                    "supply, manual), timestamp (epoch seconds, 0 to 2100-01-01), payload (object, default {}), "
                    "antecedents (ids in the ledger or the batch; no cycles), review (bool), note (text).",
    )
    q.add_argument("--ledger", required=True)
    q.add_argument("--events", required=True)
    q.add_argument("--writer", default="manual")
    q.set_defaults(func=_add)

    p = sub.add_parser(
        "to-ras", help="one region's targets as a RAS reservations.json (+ inventory, harvestable)"
    )
    p.add_argument("--plan", required=True)
    p.add_argument("--region", required=True)
    p.add_argument("--t", help="timestep (default: the plan's first future timestep)")
    p.add_argument("--out", required=True, help="reservations.json for 'harvest ras solve'")
    p.add_argument("--inventory-out", help="also write a region inventory sized by the plan's supply (.csv)")
    p.add_argument("--msbs", type=int, default=6)
    p.add_argument("--harvestable-out", help="also write the spare pools as a PUT /v1/harvestable body")
    p.add_argument(
        "--inventory", help="inventory to take harvestable servers from (default: --inventory-out)"
    )
    p.add_argument("--ras-plan", help="RAS plan A.json: take harvestable servers from its elastic set")
    p.set_defaults(func=_to_ras)


def _report(rep: Any) -> None:
    print(f"activated {len(rep.activated)}, held for review {len(rep.held_for_review)}, "
          f"blocked {len(rep.blocked)}, failed {len(rep.failed)}")  # fmt: skip
    for eid, root in rep.blocked[:20]:
        print(f"  blocked: {eid} (failed antecedent {root})")
    for eid, note in rep.failed[:20]:
        print(f"  FAILED: {eid}: {note}")
    for eid in rep.held_for_review[:20]:
        print(f"  held for review: {eid}")
    for cycle in rep.cycles[:20]:
        print(f"  never ready, waiting for itself: cycle: {' -> '.join(repr(e) for e in cycle)}")


def _execute(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from placement_service.capacity.flux.checker import check
    from placement_service.capacity.flux.execution import build_dag
    from placement_service.capacity.flux.io import load_json
    from placement_service.capacity.flux.ledger import Ledger, check_label

    check_label(args.writer, "--writer")
    doc = load_json(args.plan)
    violations = check(doc)
    if violations:
        print(f"{args.plan}: refusing to execute an infeasible plan: {violations[0]}", file=sys.stderr)
        return 1
    plan_id = args.plan_id or Path(args.plan).stem
    dag = build_dag(doc, start_ts=time.time() if args.start_ts is None else args.start_ts, steps=args.steps,
                    plan_id=plan_id)  # fmt: skip
    with Ledger(args.ledger) as ledger:
        n = ledger.add([asdict(a) for a in dag], writer=args.writer, source=str(args.plan))
        print(f"{args.ledger}: added {n} events of {args.plan}")
        rep = _run(ledger, set(args.fail_event)) if args.auto_complete else ledger.orchestrate()
        _report(rep)
        print(json.dumps(ledger.counts(), sort_keys=True))
    return 1 if rep.failed or rep.cycles else 0


def _run(ledger: Any, fail: set[str]) -> Any:
    """Play the executing systems: complete every active event (fail those in ``fail``), orchestrate,
    repeat until nothing new becomes active."""
    rep = ledger.orchestrate()
    active = [e["id"] for e in ledger.events("active")]
    while active:
        ok = [e for e in active if e not in fail]
        bad = [e for e in active if e in fail]
        if ok:
            ledger.complete(ok, note="auto-complete")
        if bad:
            ledger.fail(bad, note="failed on request (--fail-event)")
        rep = ledger.orchestrate()
        active = list(rep.activated)
    return rep


def _run_cmd(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.ledger import Ledger

    with Ledger(args.ledger) as ledger:
        rep = _run(ledger, set(args.fail_event))
        _report(rep)
        print(json.dumps(ledger.counts(), sort_keys=True))
    return 1 if rep.failed or rep.cycles else 0


def _list(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.ledger import Ledger

    with Ledger(args.ledger) as ledger:
        for ev in ledger.events(args.state):
            print(json.dumps(ev, sort_keys=True, allow_nan=False))
    return 0


def _transition(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.ledger import Ledger, check_label, check_note

    if args.action == "approve":
        check_label(args.operator, "--operator")
    if args.action == "fail":
        check_note(args.reason, "--reason")
    with Ledger(args.ledger) as ledger:
        if args.action == "approve":
            ledger.approve(args.ids, args.operator)
        elif args.action == "complete":
            ledger.complete(args.ids)
        else:
            ledger.fail(args.ids, args.reason)
        rep = ledger.orchestrate()
        _report(rep)
    return 0


def _orchestrate(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.ledger import Ledger

    with Ledger(args.ledger) as ledger:
        rep = ledger.orchestrate()
        _report(rep)
    return 1 if rep.failed or rep.cycles else 0


def _add(args: argparse.Namespace) -> int:
    from placement_service.capacity.flux.ledger import Ledger, check_label, load_events

    check_label(args.writer, "--writer")
    events = load_events(args.events)
    with Ledger(args.ledger) as ledger:
        n = ledger.add(events, writer=args.writer, source=str(args.events))
    print(f"{args.ledger}: added {n} events")
    return 0


def _to_ras(args: argparse.Namespace) -> int:
    from placement_service import csvsafe
    from placement_service.atomic import atomic_path
    from placement_service.capacity.flux import handoff
    from placement_service.capacity.flux.io import load_json, write_json

    doc = load_json(args.plan)
    res = handoff.reservations(doc, args.region, args.t)
    write_json(args.out, res)
    print(f"{args.out}: {len(res['reservations'])} reservations for {args.region} at {res['source']['t']}")
    inv_cols = None
    if args.inventory_out:
        inv_cols = handoff.inventory(doc, args.region, args.t, msbs=args.msbs)
        with atomic_path(args.inventory_out, suffix=".csv") as tmp, open(tmp, "w", newline="") as fh:
            w = csvsafe.writer(fh)
            w.writerow(list(inv_cols))
            w.writerows(zip(*inv_cols.values(), strict=True))
        print(f"{args.inventory_out}: {len(inv_cols['server'])} servers")
    if args.harvestable_out:
        if args.inventory:
            from placement_service.capacity.ras.io import read_table

            table = read_table(args.inventory)
            servers = [str(s) for s in table.column("server").to_pylist()]
            hw = [str(h) for h in table.column("hardware").to_pylist()]
        elif inv_cols is not None:
            servers, hw = inv_cols["server"], inv_cols["hardware"]
        else:
            print(
                "harvest flux to-ras: --harvestable-out needs --inventory or --inventory-out", file=sys.stderr
            )
            return 2
        ras_h = load_json(args.ras_plan).get("harvestable") if args.ras_plan else None
        body = handoff.harvestable(
            doc, args.region, args.t, servers, dict(zip(servers, hw, strict=True)), ras_h
        )
        write_json(args.harvestable_out, body)
        print(f"{args.harvestable_out}: {len(body['nodes'])} harvestable servers")
    return 0
