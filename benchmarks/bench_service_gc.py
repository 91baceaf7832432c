"""Benchmark: `ChooseTargets` tail and full garbage collections, survivors frozen after each
compaction tick (``gc_full_collect_interval_s`` > 0, the default) vs not (0), in one run.

Per setting: a fresh server (5,000 tenants, 15,000 nodes, one re-clustering), then ``--windows``
windows of `ChooseTargets` alone at ``--rate`` per second (each after a 1-s warm-up, reported
apart), and the server's full-collection pauses (``harvest_gc_pause_seconds``, generation 2) over
those windows.

    .venv/bin/python -m benchmarks.bench_service_gc [--windows 3] [--duration-s 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.bench_service_common import TOKEN, Server, load_average, loadgen, start_server
from benchmarks.bench_service_decisions import call, report_nodes, seed_history


def gen2_pauses(server: Server) -> tuple[int, float]:
    req = urllib.request.Request(server.http + "/metrics")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    count = re.search(r'harvest_gc_pause_seconds_count\{generation="2"\} (\S+)', text)
    total = re.search(r'harvest_gc_pause_seconds_sum\{generation="2"\} (\S+)', text)
    return (int(float(count.group(1))) if count else 0), (float(total.group(1)) if total else 0.0)


def run_setting(interval_s: float, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["HARVEST_GC_FULL_COLLECT_INTERVAL_S"] = str(interval_s)
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as tmp:
        data = Path(tmp) / "data"
        seed_history(data, args.tenants, 7, seed=1)
        server = start_server(data, "--recluster-interval-s", "0")
        try:
            nodes = args.tenants * 3
            report_nodes(server, args.tenants, nodes)
            call(server, "POST", "/v1/recluster?wait=1")
            windows = []
            for _ in range(args.windows):
                before = gen2_pauses(server)
                load = load_average()
                r = loadgen("choose-targets", server, "--rate", str(args.rate), "--duration-s", str(args.duration_s),
                            "--nodes", str(nodes), "--warmup-s", "1")
                after = gen2_pauses(server)
                windows.append({"load": load, "latency": r["latency"], "warmup_latency": r["warmup_latency"],
                                "gen2_collections": after[0] - before[0],
                                "gen2_pause_ms": round(1000 * (after[1] - before[1]), 1)})
        finally:
            server.stop()
    return {"gc_full_collect_interval_s": interval_s, "windows": windows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=1000.0)
    args = p.parse_args()
    results = [run_setting(0.0, args), run_setting(3600.0, args)]
    print(json.dumps(results, indent=1))
    print("| survivors frozen | window | load | p50 / p99 / max ms | full collections (pause ms) |")
    print("|---|---|---|---|---|")
    for res in results:
        label = "no (0)" if res["gc_full_collect_interval_s"] == 0 else "yes (default)"
        for k, w in enumerate(res["windows"], start=1):
            lat = w["latency"]
            print(f"| {label} | {k} | {w['load']} | {lat['p50_ms']:.2f} / {lat['p99_ms']:.2f} / {lat['max_ms']:.1f} | "
                  f"{w['gen2_collections']} ({w['gen2_pause_ms']}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
