"""The 99 TPC-DS queries' EXPLAIN FORMATTED from a real HiveServer2, through the router's parser.

    harvest hadoop up --version 3.4.2 --datanodes 1 --nodemanagers 2 --dir /tmp/c --hive
    python benchmarks/bench_tpcds_real_plans.py --cluster /tmp/c [--save-plans DIR]

Steps: 1. the 24 TPC-DS tables (schema only, no data; ``tpcds_data.schema_ddl``) in a database
``tpcds``; 2. one beeline run (``--force``) with ``EXPLAIN FORMATTED`` of each query (DuckDB's texts,
``tpcds_data.adapt``), each after a marker row; 3. every plan through ``explain.parse_explain`` and
``job_document``; 4. vertex and edge counts against ``../shared/data/tpcds/hive_tez_tpcds30tb_dag_summary.csv``
(Hive on Tez plans of a 30 TB warehouse: with no statistics here, joins become broadcasts, so the
counts are expected to differ; the figure is how many agree).

Prints one JSON object: compiled, parsed, failures per stage, adaptations, agreement with the shared plans.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_plugin.explain import STAGE_ORDER, PlanError, VertexKind, job_document, parse_explain  # noqa: E402
from scheduler_plugin.hive import extract_plan  # noqa: E402
from scheduler_plugin.testbed import tpcds_data  # noqa: E402

MARK = "harvest-plan-of-q"
#: ../shared beside the main repository (a worktree lives one level deeper: /work/wt/NAME).
SHARED = next((p / "shared" / "data" / "tpcds" / "hive_tez_tpcds30tb_dag_summary.csv" for p in REPO.parents
               if (p / "shared" / "data" / "tpcds").is_dir()), REPO.parent / "shared")


def run_beeline(beeline: str, url: str, sql: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(sql)
        path = fh.name
    try:
        return subprocess.run([beeline, "-u", url, "--outputformat=tsv2", "--showHeader=false", "--silent=true",
                               "--force=true", "-f", path], capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    finally:
        os.unlink(path)


def split_outputs(stdout: str) -> dict[int, str]:
    """Query number -> the output that followed its marker row."""
    out: dict[int, str] = {}
    current: int | None = None
    lines: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(MARK):
            if current is not None:
                out[current] = "\n".join(lines)
            current, lines = int(line[len(MARK):].strip()), []
        else:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", type=Path, required=True, help="directory of 'harvest hadoop up --hive'")
    ap.add_argument("--save-plans", type=Path, help="write each plan as q<N>.json here")
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    args = ap.parse_args(argv)
    state = json.loads((args.cluster / "cluster.json").read_text())
    hs2 = state.get("hiveserver2")
    if not hs2:
        print(f"{args.cluster}: no HiveServer2 (start the cluster with --hive)", file=sys.stderr)
        return 2
    url, beeline = hs2["jdbc"].rsplit("/", 1)[0] + "/default", hs2["beeline"]
    con = tpcds_data.connect()
    queries = tpcds_data.queries(con)
    ddl = tpcds_data.schema_ddl(con)
    adaptations: dict[str, int] = {}
    script = ["CREATE DATABASE IF NOT EXISTS tpcds", "USE tpcds", *ddl]
    for n in sorted(queries):
        text, counts = tpcds_data.adapt(queries[n])
        for k, v in counts.items():
            adaptations[k] = adaptations.get(k, 0) + v
        script += [f"SELECT '{MARK}{n}'", f"EXPLAIN FORMATTED {text}"]
    started = time.monotonic()
    proc = run_beeline(beeline, url, ";\n".join(script) + ";\n", args.timeout_s)
    compile_s = time.monotonic() - started
    outputs = split_outputs(proc.stdout)
    shared = {int(r["query"]): r for r in csv.DictReader(SHARED.open())} if SHARED.is_file() else {}
    compiled, parsed, failures = 0, 0, {"compile": [], "parse": []}
    same_vertices = same_edges = same_maps = same_unions = compared = 0
    rows: list[dict[str, Any]] = []
    for n in sorted(queries):
        try:
            plan = extract_plan(outputs.get(n, ""), f"q{n}")
        except Exception:  # noqa: BLE001 - a query that did not compile has no plan
            failures["compile"].append(n)
            continue
        compiled += 1
        if args.save_plans:
            args.save_plans.mkdir(parents=True, exist_ok=True)
            (args.save_plans / f"q{n}.json").write_text(json.dumps(plan, indent=1, sort_keys=True))
        try:
            dag = parse_explain(plan, f"q{n}")
            job_document(f"q{n}", dag)
        except PlanError as exc:
            failures["parse"].append({"query": n, "error": str(exc)[:200]})
            continue
        parsed += 1
        vertices = len(dag.vertices)
        edges = sum(1 for e in dag.edges if e.type != STAGE_ORDER)  # STAGE_ORDER: ours, not Hive's
        unions = sum(1 for v in dag.vertices.values() if v.kind is VertexKind.UNION)
        maps = sum(1 for v in dag.vertices.values() if v.kind is VertexKind.MAP)
        row = {"query": n, "vertices": vertices, "edges": edges, "unions": unions}
        if n in shared:
            compared += 1
            same_vertices += int(shared[n]["vertices"]) == vertices
            same_edges += int(shared[n]["edges"]) == edges
            same_maps += int(shared[n]["maps"]) == maps
            same_unions += int(shared[n]["unions"]) == unions
            row.update(shared_vertices=int(shared[n]["vertices"]), shared_edges=int(shared[n]["edges"]))
        rows.append(row)
    report = {
        "queries": len(queries), "compiled": compiled, "parsed": parsed, "failures": failures,
        "adaptations": adaptations, "compile_s": round(compile_s, 1),
        "vertices_total": sum(r["vertices"] for r in rows), "edges_total": sum(r["edges"] for r in rows),
        "compared_with_shared": compared, "same_vertex_count": same_vertices, "same_edge_count": same_edges,
        "same_map_count": same_maps, "same_union_count": same_unions,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(report, indent=1))
    if proc.returncode != 0 and compiled < len(queries):
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
        print("\n".join(errors[:20]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
