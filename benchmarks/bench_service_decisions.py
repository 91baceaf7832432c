"""Decision latency of a real server with 5,000 tenants / 15,000 nodes, with and without a
re-clustering running: ``ChooseTargets`` (gRPC, open loop) and ``POST /v1/jobs/select`` (HTTP).

    .venv/bin/python benchmarks/bench_service_decisions.py --duration-s 20

Steps: (1) seed 7 days of 5-minute history for 5,000 tenants straight into the service's Parquet
layout (the same files the compactor writes), (2) start ``harvest serve`` and register 15,000
nodes with one report each, (3) re-cluster once (timed) to get a class table, (4) measure both
decision paths alone for ``--duration-s`` each, then together (baseline), (5) measure both again
while re-clustering: ``--during single`` = one run (the daily one) and windows as long as it
takes, ``--during loop`` = runs back to back for ``--duration-s``; p99 during (5) should be at
most twice the baseline.

``--placement-cobusy on`` runs the server with HDFS-H-cobusy (each re-clustering also fits the
tenants x tenants co-busy estimates and stores them; every placer uses them); ``both`` runs the
whole measurement twice in one invocation, off then on, side by side. Each setting reports the
re-clustering child's peak RSS, the server's RSS and peak after the first adoption and at the end,
the stored estimates' size and the placement mode the service says it is in.

    .venv/bin/python benchmarks/bench_service_decisions.py --duration-s 10 --during single --placement-cobusy both
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.bench_service_common import (
    TOKEN,
    Server,
    load_average,
    now_utc,
    read_result,
    release,
    start_loadgen,
    start_server,
)
from placement_service.core.types import Pattern
from placement_service.server.history import SCHEMA, day_of, write_parquet_atomic
from placement_service.traces.synth import synth_tenant_cpu

SLOT_S = 300


def seed_history(data_dir: Path, tenants: int, days: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_slots = days * 86400 // SLOT_S
    start = (int(time.time()) // 86400 - days) * 86400
    patterns = [Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE]
    cpu = np.stack([synth_tenant_cpu(patterns[t % 3], n_slots, SLOT_S, rng, start_s=start) for t in range(tenants)])
    slots = start + np.arange(n_slots) * SLOT_S
    names = np.array([f"tenant-{t:05d}" for t in range(tenants)])
    per_day = 86400 // SLOT_S
    for d in range(days):
        sl = slice(d * per_day, (d + 1) * per_day)
        table = pa.table({
            "tenant": np.repeat(names, per_day), "slot_start_s": np.tile(slots[sl], tenants).astype(np.int64),
            "n_reports": np.full(tenants * per_day, 3, dtype=np.int64),
            "cpu_frac_sum": (cpu[:, sl] * 3).ravel(), "memory_frac_sum": np.full(tenants * per_day, 0.75),
        }, schema=SCHEMA)
        day_dir = data_dir / "history" / f"day={day_of(int(slots[sl][0]))}"
        day_dir.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(table, day_dir / "seg-0-0.parquet")


def call(server: Server, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(server.http + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=1200) as resp:
        return json.loads(resp.read())


def report_nodes(server: Server, tenants: int, nodes: int) -> None:
    """One report from each of ``nodes`` nodes (node i of tenant i mod ``tenants``), in batches."""
    now = time.time()
    for lo in range(0, nodes, 5000):
        reps = [{"node": f"node-{i:05d}", "tenant": f"tenant-{i % tenants:05d}", "timestamp": now,
                 "primary_cpu_cores": 4.0, "primary_memory_mb": 4096.0, "capacity_cores": 16.0,
                 "capacity_memory_mb": 65536.0, "busy": False, "free_storage_gb": 800.0}
                for i in range(lo, min(lo + 5000, nodes))]
        call(server, "POST", "/v1/reports", {"reports": reps})


def measure(server: Server, duration_s: float, rate: float, select_rate: float, nodes: int,
            which: tuple[str, ...] = ("choose_targets", "select"), warmup_s: float = 1.0) -> dict[str, Any]:
    """The chosen decision paths at once, each from its own load-generator process."""
    procs = {}
    if "choose_targets" in which:
        procs["choose_targets"] = start_loadgen("choose-targets", server, "--rate", str(rate), "--duration-s",
                                                str(duration_s), "--nodes", str(nodes), "--warmup-s", str(warmup_s))
    if "select" in which:
        procs["select"] = start_loadgen("select", server, "--rate", str(select_rate), "--duration-s",
                                        str(duration_s), "--connections", "4")
    results = {name: read_result(proc) for name, proc in procs.items()}
    for proc in procs.values():
        release(proc)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--nodes-per-tenant", type=int, default=3)
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=1000.0, help="ChooseTargets per second")
    p.add_argument("--select-rate", type=float, default=100.0, help="job selections per second")
    p.add_argument("--warmup-s", type=float, default=1.0,
                   help="ChooseTargets at the full rate before each measured window, reported apart "
                        "(warmup_latency): the start-up transient of a fresh channel and thread pool")
    p.add_argument("--during", choices=["single", "loop"], default="loop",
                   help="single: one re-clustering (the daily run) and windows as long as it takes; "
                        "loop: re-clusterings back to back for --duration-s")
    p.add_argument("--placement-cobusy", choices=["off", "on", "both"], default="off",
                   help="HDFS-H-cobusy in the server (co-busy estimates fitted at each re-clustering); "
                        "both: off then on, side by side")
    p.add_argument("--recluster-priority", choices=["idle", "low", "normal"], default="idle",
                   help="the server's --recluster-priority (idle: the child waits while other work keeps "
                        "both cores busy; normal measures the run itself on a loaded machine)")
    args = p.parse_args()
    settings = ["off", "on"] if args.placement_cobusy == "both" else [args.placement_cobusy]
    if len(settings) == 1:
        print(json.dumps(run_setting(args, settings[0] == "on"), indent=1))
    else:
        print(json.dumps({s: run_setting(args, s == "on") for s in settings}, indent=1))
    return 0


def run_setting(args: argparse.Namespace, cobusy: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"when": now_utc(), "tenants": args.tenants, "placement_cobusy": cobusy}
    with tempfile.TemporaryDirectory(prefix="bench-decisions-") as tmp:
        data = Path(tmp) / "data"
        t = time.perf_counter()
        seed_history(data, args.tenants, args.days, seed=1)
        out["seed_s"] = round(time.perf_counter() - t, 1)
        server = start_server(data, "--recluster-interval-s", "0", "--recluster-priority", args.recluster_priority,
                              "--placement-cobusy" if cobusy else "--no-placement-cobusy")
        try:
            nodes = args.tenants * args.nodes_per_tenant
            report_nodes(server, args.tenants, nodes)
            t = time.perf_counter()
            status = call(server, "POST", "/v1/recluster?wait=1")
            out["first_recluster_s"] = round(time.perf_counter() - t, 1)
            out["recluster_status"] = {k: status[k] for k in ("runs", "failures", "last_error", "last_duration_s")}
            out["first_recluster_child"] = status.get("last_child", {})
            out["classes"] = len(call(server, "GET", "/v1/classes")["classes"])
            out["server_memory_after_first_recluster"] = server.memory_mb()
            out["placement_mode"] = call(server, "GET", "/v1/placement/quality").get("placement_mode")
            out["state_sqlite_mb"] = round(sum(f.stat().st_size for f in data.glob("state.sqlite*")) / 2**20, 1)
            out["load_alone"] = load_average()
            out["choose_targets_alone"] = measure(server, args.duration_s, args.rate, args.select_rate, nodes,
                                                  ("choose_targets",), args.warmup_s)["choose_targets"]
            out["select_alone"] = measure(server, args.duration_s, args.rate, args.select_rate, nodes,
                                          ("select",))["select"]
            duration = args.duration_s
            if args.during == "single":
                duration = max(5.0, 1.1 * out["first_recluster_s"])
            out["during_mode"] = args.during
            out["window_s"] = round(duration, 1)
            out["load_baseline"] = load_average()
            out["baseline"] = measure(server, duration, args.rate, args.select_rate, nodes, warmup_s=args.warmup_s)
            # Keep re-clustering back to back for the whole window, so every request of the second
            # measurement overlaps a run (clustering in the child, adoption in the server).
            stop = threading.Event()
            runs_before = call(server, "GET", "/v1/recluster")["runs"]

            def recluster_loop() -> None:
                # Start once the load generators are past their warm-up (process start ~0.5 s), so
                # the re-clustering falls in the measured window.
                stop.wait(args.warmup_s + 0.5)
                while not stop.is_set():
                    call(server, "POST", "/v1/recluster?wait=1")
                    if args.during == "single":
                        return

            looper = threading.Thread(target=recluster_loop)
            looper.start()
            time.sleep(0.2)
            cpu0 = server.cpu_s()
            out["load_recluster"] = load_average()
            out["during_recluster"] = measure(server, duration, args.rate, args.select_rate, nodes,
                                              warmup_s=args.warmup_s)
            out["server_cpu_s_during"] = round(server.cpu_s() - cpu0, 1)
            stop.set()
            looper.join()
            status = call(server, "GET", "/v1/recluster")
            out["reclusterings_during"] = status["runs"] - runs_before
            out["last_recluster_s"] = round(status["last_duration_s"], 1)
            out["recluster_failures"] = status["failures"]
            out["during_recluster_child"] = status.get("last_child", {})
            out["server_memory_end"] = server.memory_mb()
        finally:
            server.stop()
    return out


if __name__ == "__main__":
    raise SystemExit(main())
