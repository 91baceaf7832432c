"""Sub-commands of the Hadoop plugins: route, hive, capacity-scheduler, hosts-file, topology-map,
install-scripts."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.validate import finite_float, output_file


def _add_routing_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("routing")
    g.add_argument("--service", metavar="URL", default=os.environ.get("HARVEST_SERVICE_URL"),
                   help="placement service base URL, e.g. http://placement:8470 (env HARVEST_SERVICE_URL)")
    g.add_argument("--token-file", type=Path, default=os.environ.get("HARVEST_TOKEN_FILE"),
                   help="file holding the service's bearer token (env HARVEST_TOKEN_FILE)")
    g.add_argument("--timeout-s", type=finite_float, default=2.0, help="service request timeout (default 2 s)")
    g.add_argument("--classes", type=Path, help="classes.json for local class selection when the service is down")
    g.add_argument("--engine", choices=["tez", "mapreduce"], default="tez",
                   help="settings to hand back: tez.queue.name, or MapReduce queue + node-label expression")
    g.add_argument("--multi-class", choices=["default-partition", "largest-headroom"], default="default-partition",
                   help="how a selection of several classes maps onto YARN when the service did not map it "
                   "(see docs/hadoop.md)")
    g.add_argument("--seed", type=int, default=None, help="seed of local class selection (default: random)")
    g.add_argument("--history", type=Path, default=None,
                   help="history store of last runs (default ~/.local/state/harvest/hive-history.json)")
    e = p.add_argument_group("task estimate")
    e.add_argument("--bytes-per-reducer", type=int, default=256_000_000,
                   help="hive.exec.reducers.bytes.per.reducer (default 256000000)")
    e.add_argument("--max-reducers", type=int, default=1009, help="hive.exec.reducers.max (default 1009)")
    e.add_argument("--split-bytes", type=int, default=256 * 1024 * 1024,
                   help="bytes per Map task (default 256 MiB)")


def _router(args: argparse.Namespace) -> Any:
    from placement_service.core.types import ClassTable
    from scheduler_plugin.router import Engine, MultiClassPolicy, Router, ServiceEndpoint

    endpoint = None
    if args.service:
        token = ""
        if args.token_file:
            try:
                token = Path(args.token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise HarvestError(f"--token-file {args.token_file}: {exc}") from None
        endpoint = ServiceEndpoint(args.service, token, args.timeout_s)
    table = ClassTable.from_json(_read_json(args.classes), str(args.classes)) if args.classes else None
    return Router(endpoint, table, MultiClassPolicy(args.multi_class), Engine(args.engine), args.seed)


def _estimate(args: argparse.Namespace) -> Any:
    from scheduler_plugin.explain import EstimateConfig

    return EstimateConfig(args.split_bytes, args.bytes_per_reducer, args.max_reducers)


def _history(args: argparse.Namespace) -> Any:
    from scheduler_plugin.history import HistoryStore, default_history_path

    return HistoryStore(args.history or default_history_path())


def _read_json(path: Path) -> Any:
    from placement_service.validate import load_json_file

    return load_json_file(path, "input")


def _write(path: Path | None, text: str) -> None:
    from placement_service.atomic import atomic_write_text

    if path is None or str(path) == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(path, text)


def _cmd_route(args: argparse.Namespace) -> int:
    from scheduler_plugin.explain import (
        job_document,
        parse_dag_description,
        parse_explain,
        parse_tez_dag_plan,
    )

    if (args.plan is None) == (args.tpcds is None):
        raise HarvestError("give either a PLAN file or --tpcds N")
    if args.tpcds is not None:
        from placement_service.core.tpcds import load_tpcds_plans

        plans = load_tpcds_plans()["queries"]
        if args.tpcds not in plans:
            raise HarvestError(f"--tpcds: no bundled plan for query {args.tpcds!r} (1..99)")
        doc, fmt, source, stem = plans[args.tpcds], "dag", f"TPC-DS query {args.tpcds}", f"tpcds-q{args.tpcds}"
    else:
        doc, fmt, source, stem = _read_json(args.plan), args.format, str(args.plan), Path(args.plan).stem
    name = args.name or stem
    if fmt == "job":
        job = doc
    else:
        last = _history(args).get(name)
        tasks = dict(last.vertex_tasks) if last else {}
        if fmt == "tez-dag":
            dag, recorded = parse_tez_dag_plan(doc, source)
            tasks.update(recorded)
        else:
            dag = parse_explain(doc, source) if fmt == "explain" else parse_dag_description(doc, source)
        job = job_document(name, dag, _estimate(args), last.last_duration_s if last else None, tasks)
    if args.job_out:
        _write(args.job_out, json.dumps(job, indent=1) + "\n")
    decision = _router(args).route(job)
    print(json.dumps(decision.to_json(), indent=1))
    return 0


def _cmd_hive(args: argparse.Namespace) -> int:
    from scheduler_plugin.hive import BeelineConfig, hiveconf_pairs, run_query

    cfg = BeelineConfig(args.url, args.beeline, tuple(args.beeline_arg or ()), hiveconf_pairs(args.hiveconf or []))
    name = args.name or Path(args.query_file).stem
    result = run_query(cfg, Path(args.query_file), _router(args), _history(args), name, _estimate(args), args.dry_run,
                       wait_s=args.wait_s, poll_s=args.poll_s)
    out = {
        "decision": result.decision.to_json(),
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
        "killed_attempts": result.summary.killed_attempts,
        "failed_attempts": result.summary.failed_attempts,
        "vertex_tasks": dict(result.summary.tasks),
    }
    if args.dry_run:
        out["job"] = result.job
    if args.result_json:
        _write(args.result_json, json.dumps({"name": name, **out}, indent=1) + "\n")
    print(json.dumps(out, indent=1), file=sys.stderr if not args.dry_run else sys.stdout)
    return result.exit_code


def _cmd_capacity(args: argparse.Namespace) -> int:
    from placement_service.core.types import ClassTable
    from scheduler_plugin.capacity_scheduler import (
        QueueSettings,
        add_labels_command,
        render_capacity_scheduler,
    )

    table = ClassTable.from_json(_read_json(args.classes), str(args.classes))
    ids = [c.id for c in table.classes]
    weights = None
    if args.weight != "equal":
        weights = {c.id: float(c.servers if args.weight == "servers" else c.cores) for c in table.classes}
    settings = QueueSettings(args.default_capacity, args.default_label_share)
    _write(args.out, render_capacity_scheduler(ids, settings, weights, source=str(args.classes)))
    print("next: " + add_labels_command(ids) + " && yarn rmadmin -refreshQueues", file=sys.stderr)
    return 0


def _cmd_hosts(args: argparse.Namespace) -> int:
    from placement_service.core.types import ClassTable
    from scheduler_plugin.hosts_file import DomainMode, build_hosts_file
    from scheduler_plugin.inventory import read_servers

    table = ClassTable.from_json(_read_json(args.classes), str(args.classes))
    if table.grid is None:
        raise HarvestError(f"{args.classes}: has no 'grid' (run 'harvest cluster' with reimages and inventory)")
    hosts = build_hosts_file(read_servers(args.inventory), table.grid, DomainMode(args.domain),
                             [s for s in (args.decommissioned or "").split(",") if s])
    _write(args.out, hosts.to_json())
    if hosts.unplaced_servers:
        print(f"warning: {len(hosts.unplaced_servers)} server(s) without an upgrade domain (tenant not in the "
              f"grid): {', '.join(hosts.unplaced_servers[:10])}", file=sys.stderr)
    print("next: hdfs dfsadmin -refreshNodes", file=sys.stderr)
    return 0


def _cmd_topology(args: argparse.Namespace) -> int:
    from scheduler_plugin.inventory import read_servers
    from scheduler_plugin.topology_map import build_topology_map, resolve_addresses

    def no_resolve(_host: str) -> list[str]:
        return []

    topo = build_topology_map(read_servers(args.inventory, require_rack=True, require_tenant=False),
                              resolve_addresses if args.resolve else no_resolve)
    _write(args.out, topo.text)
    if topo.unresolved:
        print(f"warning: {len(topo.unresolved)} server(s) without an address line (no 'ip' column value"
              f"{', not resolved' if args.resolve else ', --no-resolve'}): {', '.join(topo.unresolved[:10])}; "
              "the NameNode asks by IP, so their DataNodes will be in /default-rack", file=sys.stderr)
    if topo.ambiguous:
        print(f"warning: address(es) of servers in different racks left out: {', '.join(topo.ambiguous[:10])}",
              file=sys.stderr)
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    from placement_service.atomic import atomic_write_text

    src = Path(__file__).parent / "scripts"
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("node_label.py", "topology.py"):
        target = dest / name
        lines = (src / name).read_text(encoding="utf-8").splitlines(keepends=True)
        lines[0] = f"#!{args.python} -IS\n"  # -I -S: isolated interpreter, no site import (fast start)
        atomic_write_text(target, "".join(lines))
        target.chmod(0o755)
        print(target)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("route", help="route one Hive/Tez job: plan -> classes -> queue settings",
                              description="Estimate the job's tasks from its plan, ask the placement service "
                              "(or select locally), and print the settings to run it with.")
    p.add_argument("plan", type=Path, nargs="?", help="EXPLAIN FORMATTED JSON, a Tez DAG description, or a job JSON")
    p.add_argument("--tpcds", metavar="N", help="route the bundled Hive/Tez plan of TPC-DS query N instead of a file")
    p.add_argument("--format", choices=["explain", "dag", "tez-dag", "job"], default="explain",
                   help="what PLAN is: EXPLAIN FORMATTED JSON, a Tez DAG description (as bundled), Tez's own "
                   "DAG plan (Tez UI / timeline dagPlan), or a job JSON")
    p.add_argument("--name", help="job name (default: the file's stem); keys the history store")
    p.add_argument("--job-out", type=Path, help="also write the job JSON here")
    _add_routing_args(p)
    p.set_defaults(func=_cmd_route)

    p = subparsers.add_parser("hive", help="run a Hive query file through beeline on the routed class",
                              description="EXPLAIN FORMATTED the query, route it, run it with the queue "
                              "settings, and record its duration for next time.")
    p.add_argument("query_file", type=Path)
    p.add_argument("--url", required=True, help="JDBC URL for beeline -u, e.g. jdbc:hive2://hs2:10000/default")
    p.add_argument("--beeline", default="beeline", help="beeline executable (default: beeline on PATH)")
    p.add_argument("--beeline-arg", action="append", help="extra beeline argument (repeatable), e.g. -n=hive")
    p.add_argument("--hiveconf", action="append", metavar="K=V", help="extra --hiveconf setting (repeatable)")
    p.add_argument("--name", help="job name (default: the query file's stem)")
    p.add_argument("--dry-run", action="store_true", help="EXPLAIN and route, print the decision, do not run")
    p.add_argument("--result-json", type=Path, help="also write the run's decision and outcome here (JSON)")
    p.add_argument("--wait-s", type=finite_float, default=0.0,
                   help="when no class has room now, keep asking for up to this long (default 0: run at once)")
    p.add_argument("--poll-s", type=finite_float, default=30.0, help="seconds between those questions (default 30)")
    _add_routing_args(p)
    p.set_defaults(func=_cmd_hive)

    p = subparsers.add_parser("capacity-scheduler", help="generate capacity-scheduler.xml from classes.json",
                              description="One queue and one node label per class; capacities add up to 100 "
                              "per parent and partition.")
    p.add_argument("--classes", type=Path, required=True)
    p.add_argument("--out", type=output_file, default=None, help="output file (default: stdout)")
    p.add_argument("--default-capacity", type=finite_float, default=20.0,
                   help="DEFAULT-partition share of the default queue, percent (default 20)")
    p.add_argument("--default-label-share", type=finite_float, default=10.0,
                   help="share of every class partition for the default queue, percent (default 10)")
    p.add_argument("--weight", choices=["equal", "servers", "cores"], default="equal",
                   help="split the class queues' DEFAULT-partition share by this (default equal)")
    p.set_defaults(func=_cmd_capacity)

    p = subparsers.add_parser("hosts-file", help="upgrade-domain hosts file (CombinedHostFileManager JSON)",
                              description="Stock-only replica spreading: one upgrade domain per reimage row "
                              "(or grid cell) of the 3x3 grid.")
    p.add_argument("--classes", type=Path, required=True, help="classes.json with a 'grid'")
    p.add_argument("--inventory", type=Path, required=True, help="inventory CSV/Parquet (server, tenant)")
    p.add_argument("--domain", choices=["row", "cell"], default="row")
    p.add_argument("--decommissioned", help="comma-separated servers to list as DECOMMISSIONED")
    p.add_argument("--out", type=output_file, default=None, help="output file (default: stdout)")
    p.set_defaults(func=_cmd_hosts)

    p = subparsers.add_parser("topology-map", help="mapping file for the rack-awareness script",
                              description="Write '<server> <path>' and '<ip> <path>' lines for every server. The "
                              "NameNode resolves racks by DataNode IP address, so each server needs its address: "
                              "from the inventory's 'ip' column, else by resolving its name here (a name that "
                              "does not resolve gets a warning and only its name line).")
    p.add_argument("--inventory", type=Path, required=True,
                   help="inventory CSV/Parquet (server, rack[, datacenter][, ip])")
    p.add_argument("--no-resolve", dest="resolve", action="store_false",
                   help="do not resolve names that have no 'ip' value (they get only a name line)")
    p.add_argument("--out", type=output_file, default=None, help="output file (default: stdout)")
    p.set_defaults(func=_cmd_topology)

    p = subparsers.add_parser("install-scripts", help="copy the NM label and topology scripts to a directory",
                              description="Copy node_label.py and topology.py (standard library only) with "
                              "their #! line set to --python.")
    p.add_argument("dest", type=Path)
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter path on the nodes (default /usr/bin/python3)")
    p.set_defaults(func=_cmd_install)
