"""Sustained ingest: 15,000 nodes reporting every 3 s (5,000 reports/s) into a real server, then a
check that every acknowledged report is stored (count in the Parquet history, last seq per node).

    .venv/bin/python benchmarks/bench_service_ingest.py --duration-s 300 --mode http
    .venv/bin/python benchmarks/bench_service_ingest.py --duration-s 20 --mode grpc --nodes 3000

``http``: reports relayed in batches of 100 nodes per ``POST /v1/reports`` (one relay per rack);
``grpc``: one ``Placement.Report`` stream per node, one message per report.
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq

from benchmarks.bench_service_common import load_average, loadgen, now_utc, start_server


def stored_reports(data_dir: Path) -> int:
    total = 0
    for path in (data_dir / "history").rglob("*.parquet"):
        total += int(pq.read_table(path, columns=["n_reports"])["n_reports"].to_numpy().sum())
    return total


def check_last_seq(http_url: str, acked: dict[str, int]) -> int:
    """Nodes whose stored last seq is below their last acknowledged one (must be 0)."""
    u = urlparse(http_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    bad = 0
    for node, seq in acked.items():
        conn.request("GET", f"/v1/nodes/{node}")
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        if resp.status != 200 or doc["last_seq"] < seq:
            bad += 1
    conn.close()
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["http", "grpc"], default="http")
    p.add_argument("--nodes", type=int, default=15000)
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--duration-s", type=float, default=30.0)
    p.add_argument("--channels", type=int, default=16)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        data = Path(tmp) / "data"
        server = start_server(data)
        load_before = load_average()
        cpu0 = server.cpu_s()
        acked_file = Path(tmp) / "acked.json"
        common = ["--nodes", str(args.nodes), "--tenants", str(args.tenants), "--duration-s", str(args.duration_s),
                  "--acked-out", str(acked_file)]
        if args.mode == "http":
            result = loadgen("ingest-http", server, *common, "--batch", "100")
        else:
            result = loadgen("ingest-grpc", server, *common, "--channels", str(args.channels))
        cpu1 = server.cpu_s()
        load_after = load_average()
        server.stop()  # graceful: the last log segment is compacted into Parquet
        stored = stored_reports(data)
        server = start_server(data)  # the restart rebuilds the node view from SQLite (+ log)
        try:
            acked = json.loads(acked_file.read_text())
            t = time.perf_counter()
            behind = check_last_seq(server.http, acked)
            check_s = time.perf_counter() - t
        finally:
            server.stop()
    summary = {
        "when": now_utc(), "mode": args.mode, "nodes": args.nodes, "duration_s": round(result["duration_s"], 1),
        "acked_reports": result["acked_reports"], "stored_reports": stored,
        "lost": max(0, result["acked_reports"] - stored), "nodes_behind_last_ack": behind,
        "reports_per_s": round(result["reports_per_s"], 1),
        "latency": result.get("request_latency") or result.get("ack_latency"),
        "latency_after_first_2_intervals": result.get("ack_latency_after_first_2_intervals"),
        "stream_retries": result.get("stream_retries"),
        "server_cpu_s": round(cpu1 - cpu0, 1), "load_before": load_before, "load_after": load_after,
        "check_s": round(check_s, 1),
    }
    print(json.dumps(summary, indent=1))
    return 0 if summary["lost"] == 0 and behind == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
