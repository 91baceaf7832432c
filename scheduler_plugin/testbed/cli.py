"""``harvest hadoop up|down|status``: a real Hadoop cluster on this machine (see ``cluster.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from placement_service.validate import finite_float
from scheduler_plugin.testbed.versions import VERSIONS


def _set(text: str) -> tuple[tuple[str, str], str]:
    file, sep, rest = text.partition(":")
    key, eq, value = rest.partition("=")
    if not sep or not eq or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected FILE:KEY=VALUE, e.g. hdfs-site:dfs.replication=2")
    return (file, key), value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def _cmd_up(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.cluster import make_plan, up

    isolate = {"auto": None, "netns": True, "loopback": False}[args.network]
    plan = make_plan(args.version, datanodes=args.datanodes, nodemanagers=args.nodemanagers, directory=args.dir,
                     overrides=dict(args.set or []), classpath=args.classpath or [], isolate=isolate)
    info = up(plan, timeout_s=args.timeout_s, hive=args.hive)
    print(json.dumps(info, indent=1))
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.cluster import down

    print(json.dumps(down(args.dir)))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.cluster import status

    report = status(args.dir)
    print(json.dumps(report, indent=1))
    return 0 if report["healthy"] else 1


def _cmd_assemble(args: argparse.Namespace) -> int:
    from scheduler_plugin.testbed.versions import assemble

    for version in args.versions or VERSIONS:
        lay = assemble(version)
        print(lay.root)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("hadoop", help="start, check and stop a real Hadoop cluster on this machine",
                              description="A real Apache Hadoop cluster (jars from Maven Central, 'make hadoop') "
                              "with one host per worker: a network namespace with its own IP address when run as "
                              "root with iproute2, else everything on 127.0.0.1. See docs/hadoop.md, 'Test cluster'.")
    sub = p.add_subparsers(dest="hadoop_command", metavar="<up|down|status|assemble>")
    u = sub.add_parser("up", help="start a cluster; prints one JSON object (progress on stderr)")
    u.add_argument("--version", required=True, help=f"{', '.join(VERSIONS)} or latest")
    u.add_argument("--datanodes", type=_count, required=True, help="DataNodes (on worker1..N)")
    u.add_argument("--nodemanagers", type=_count, required=True, help="NodeManagers (on worker1..M)")
    u.add_argument("--dir", type=Path, required=True, help="directory for state, configuration, data and logs")
    u.add_argument("--set", type=_set, action="append", metavar="FILE:KEY=VALUE",
                   help="a property of core-site, hdfs-site, yarn-site, mapred-site or capacity-scheduler; "
                   "{dir} {host} {ip} {lib} are replaced per host (repeatable)")
    u.add_argument("--classpath", action="append", metavar="PATH", help="extra class path entry for every daemon")
    u.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto",
                   help="worker hosts: namespaces (root + iproute2), 127.0.0.1, or netns when possible (default)")
    u.add_argument("--timeout-s", type=finite_float, default=300.0, help="give up when not healthy after this (default 300)")
    u.add_argument("--hive", action="store_true",
                   help="also start HiveServer2 (embedded metastore) with Tez on YARN; adds 'hiveserver2' to the JSON")
    u.set_defaults(func=_cmd_up)
    d = sub.add_parser("down", help="stop every process 'up' started in --dir and remove its namespaces")
    d.add_argument("--dir", type=Path, required=True)
    d.set_defaults(func=_cmd_down)
    s = sub.add_parser("status", help="report the cluster's health as JSON (exit 1 when not healthy)")
    s.add_argument("--dir", type=Path, required=True)
    s.set_defaults(func=_cmd_status)
    a = sub.add_parser("assemble", help="resolve the jars of VERSION(s) into .cache/hadoop-<version>/ (make hadoop)")
    a.add_argument("versions", nargs="*", help=f"default: {' '.join(VERSIONS)}")
    a.set_defaults(func=_cmd_assemble)

    def _no_sub(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=_no_sub)
