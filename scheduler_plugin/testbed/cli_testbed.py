"""``harvest testbed up|run|report|down``: the paper's testbed as processes (see ``testbed.py``,
``runner.py``, ``report.py`` and docs/testbed.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from placement_service.validate import finite_float

MODES = ("harvest", "pt", "stock")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1")
    return value


def _queries(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        try:
            number = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} in {text!r}: expected TPC-DS query numbers, e.g. 3,7,19") from None
        if not 1 <= number <= 99:
            raise argparse.ArgumentTypeError(f"{number} in {text!r}: TPC-DS queries are 1..99")
        out.append(number)
    return out


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{text!r}: modes are {', '.join(MODES)} (comma-separated)")
    return modes


def _positive(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def _cmd_up(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.testbed import UpConfig, up

    isolate = {"auto": None, "netns": True, "loopback": False}[args.network]
    cfg = UpConfig(workers=args.workers, directory=args.dir, version=args.version, trace=args.trace,
                   history_vms=args.history_vms, speedup=args.speedup, mode=args.mode, timeout_s=args.timeout_s,
                   isolate=isolate, hive=args.hive)
    state = up(cfg)
    print(json.dumps({"dir": state["dir"], "mode": state["mode"], "startup_s": state["startup_s"],
                      "timings_s": state["timings_s"], "tenants": state["tenants"],
                      "service": state["service"]["http"], "processes": len(state["processes"])}, indent=1))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.runner import run

    records = run(args.dir, queries=args.queries, rounds=args.rounds, modes=args.modes, scale=args.scale,
                  baseline_s=args.baseline_s)
    ok = sum(1 for r in records if r["mode"] != "baseline" and r.get("exit_code") == 0)
    total = sum(1 for r in records if r["mode"] != "baseline")
    print(json.dumps({"records": str(args.dir / "runs" / "records.json"), "succeeded": ok, "query_runs": total}))
    return 0 if ok == total else 1


def _cmd_report(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.report import write_report
    from scheduler_plugin.testbed.runner import RECORDS_FILE

    page = write_report(args.dir / "runs" / RECORDS_FILE, args.out or args.dir / "report")
    print(page)
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.testbed import down

    print(json.dumps(down(args.dir)))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from scheduler_plugin.testbed.testbed import DEFAULT_TRACE

    p = subparsers.add_parser("testbed", help="the paper's testbed on this machine: cluster, agents, primary tenants, "
                              "placement service; TPC-DS runs per mode and their report",
                              description="A real Hadoop cluster (harvest hadoop) with, per worker host, a primary "
                              "tenant replaying a real CPU series and a harvest agent, plus the placement service "
                              "with classes learnt from that history. See docs/testbed.md.")
    sub = p.add_subparsers(dest="testbed_command", metavar="<up|run|report|down>")
    u = sub.add_parser("up", help="start everything; progress on stderr, a JSON summary on stdout")
    u.add_argument("--workers", type=_count, required=True, help="worker hosts (DataNode + NodeManager + agent + primary)")
    u.add_argument("--dir", type=Path, required=True, help="directory for state (testbed.json), logs and data")
    u.add_argument("--version", default="latest", help="Hadoop version (harvest hadoop; default latest)")
    u.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help=f"wide per-VM CPU CSV (default {DEFAULT_TRACE})")
    u.add_argument("--history-vms", type=_count, default=12, help="VMs of the trace that form the history (default 12)")
    u.add_argument("--speedup", type=_positive, default=60.0, help="primaries replay this much faster (default 60)")
    u.add_argument("--mode", choices=MODES, default="harvest", help="mode to start in (default harvest)")
    u.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto")
    u.add_argument("--timeout-s", type=_positive, default=600.0, help="cluster start-up limit (default 600)")
    u.add_argument("--no-hive", dest="hive", action="store_false",
                   help="no HiveServer2/Tez (faster; `run` then has nothing to send queries to)")
    u.set_defaults(func=_cmd_up)
    r = sub.add_parser("run", help="TPC-DS queries through harvest hive under each mode; records in D/runs/")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--queries", type=_queries, default=[3, 7, 19, 42, 52, 55], help="default 3,7,19,42,52,55")
    r.add_argument("--rounds", type=_count, default=1)
    r.add_argument("--modes", type=_modes, default=list(MODES), help="default harvest,pt,stock")
    r.add_argument("--scale", type=_positive, default=0.1, help="TPC-DS scale factor (default 0.1)")
    r.add_argument("--baseline-s", type=_positive, default=30.0, help="primaries alone before each round (default 30)")
    r.set_defaults(func=_cmd_run)
    rep = sub.add_parser("report", help="Markdown page, figures and CSV of the run's records")
    rep.add_argument("--dir", type=Path, required=True)
    rep.add_argument("--out", type=Path, help="default D/report")
    rep.set_defaults(func=_cmd_report)
    d = sub.add_parser("down", help="stop every process up started (by PID), then the cluster")
    d.add_argument("--dir", type=Path, required=True)
    d.set_defaults(func=_cmd_down)

    def _no_sub(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=_no_sub)
