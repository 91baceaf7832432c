"""Decision latency while the service's own background work runs, in one process (no network, no
load-generator process: what is left is the server's own stalls).

    .venv/bin/python -m benchmarks.bench_service_tick [--baseline-tree DIR] [--runs 2]

A ``PlacementService`` with 5,000 tenants / 15,000 nodes (9 classes, every tenant in the grid)
answers ``place`` calls for 128 MB blocks at 1,000 per second on an asyncio loop thread, as the
gRPC server does; latency = answered - due. Meanwhile the main thread does what the compaction
thread does: the tick (``refresh_policy`` + ``age_out_of_gc``) at 2 s and 5 s, a node joining
(a view rebuild) at 8 s, the tick again after the rebuild. Printed: p50 / p99 / max over the run,
and around each event the slowest call and the calls over 5 ms. With ``--baseline-tree`` each run
alternates between that checkout and this one (the same machine load).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TENANTS, NODES, RATE, DURATION_S = 5000, 15000, 1000.0, 14.0
EVENTS = ((2.0, "tick"), (5.0, "tick"), (8.0, "node joins: view rebuilt"), (10.5, "tick"))


def measure() -> dict[str, object]:
    from placement_service.server.config import build_config
    from placement_service.server.reports import parse_report_batch
    from placement_service.server.service import PlacementService

    tmp = Path(tempfile.mkdtemp(prefix="bench-tick-"))
    classes = [{"id": f"constant-{c}", "pattern": "constant", "avg_cpu": 0.2, "peak_cpu": 0.3 + 0.05 * c,
                "current_cpu": 0.25, "servers": NODES // 9, "cores": 16.0 * NODES / 9,
                "tenants": [f"t{t:05d}" for t in range(TENANTS) if t % 9 == c]} for c in range(9)]
    tenants = {f"t{t:05d}": {"class": f"constant-{t % 9}", "pattern": "constant"} for t in range(TENANTS)}
    grid = {f"t{t:05d}": {"reimage_row": (t // 9) % 3, "peak_column": (t // 27) % 3} for t in range(TENANTS)}
    (tmp / "classes.json").write_text(json.dumps({"classes": classes, "tenants": tenants, "grid": grid}))
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp / "d"), "compact_interval_s": 3600, "recluster_interval_s": 0,
        "classes_file": str(tmp / "classes.json")}))
    svc.start()
    now = time.time()
    reps = [{"node": f"n{i:05d}", "tenant": f"t{i % TENANTS:05d}", "timestamp": now, "primary_cpu_cores": 4.0,
             "primary_memory_mb": 1024.0, "capacity_cores": 16.0, "capacity_memory_mb": 65536.0, "busy": False,
             "free_storage_gb": 800.0, "seq": 1} for i in range(NODES)]
    svc.ingest_and_wait(parse_report_batch({"reports": reps}, now, 300.0, 20000))
    svc.refresh_policy()
    sys.setswitchinterval(0.001)  # as `harvest serve` sets it, and its start-up freeze
    gc.collect()
    gc.freeze()
    svc.place("n00001", 3, [], 128 << 20)  # the 128 MB bucket is in use before the rebuild
    lat: list[tuple[float, float]] = []
    writers = [f"n{int(i):05d}" for i in np.random.default_rng(0).integers(0, NODES, 4096)]

    async def decide() -> None:
        t0 = time.perf_counter() + 0.1
        for k in range(int(DURATION_S * RATE)):
            due = t0 + k / RATE
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            svc.place(writers[k % len(writers)], 3, [], 128 << 20)
            lat.append((due - t0, time.perf_counter() - due))

    loop_thread = threading.Thread(target=lambda: asyncio.run(decide()))
    loop_thread.start()
    start = time.perf_counter()
    events = []
    for at_s, what in EVENTS:
        time.sleep(max(0.0, start + at_s - time.perf_counter()))
        t = time.perf_counter()
        if what.startswith("node joins"):
            r = dict(reps[0], node="n-new", timestamp=time.time())
            svc.ingest_and_wait(parse_report_batch({"reports": [r]}, time.time(), 300.0, 20000))
        svc.refresh_policy()
        svc.age_out_of_gc()
        events.append((what, t - start, time.perf_counter() - t))
    loop_thread.join()
    svc.close()
    ms = np.array([x for _, x in lat]) * 1000.0
    out: dict[str, object] = {"tree": str(Path(sys.modules["placement_service"].__file__ or "").parent.parent),
                              "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
                              "p50_ms": round(float(np.percentile(ms, 50)), 2),
                              "p99_ms": round(float(np.percentile(ms, 99)), 2), "max_ms": round(float(ms.max()), 1),
                              "over_5ms": int((ms > 5).sum()), "calls": len(ms)}
    near_events = []
    for what, at_s, took_s in events:
        near = [x * 1000.0 for t, x in lat if at_s - 0.1 <= t <= at_s + took_s + 1.0]
        near_events.append({"what": what, "at_s": round(at_s, 2), "took_ms": round(1000 * took_s, 1),
                            "slowest_call_ms": round(max(near, default=0.0), 1),
                            "calls_over_5ms": sum(1 for x in near if x > 5.0)})
    out["events"] = near_events
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline-tree", type=Path, help="another checkout to run alternately with this one")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return 0
    trees = ([args.baseline_tree.resolve()] if args.baseline_tree else []) + [ROOT]
    for run in range(args.runs):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=str(tree))
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"], env=env, cwd=tree,
                                  capture_output=True, text=True, check=True)
            doc = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"run {run + 1}, {doc['tree']} (load {doc['load']}): p50 {doc['p50_ms']} ms, p99 {doc['p99_ms']} ms, "
                  f"max {doc['max_ms']} ms, {doc['over_5ms']} of {doc['calls']} calls over 5 ms")
            for e in doc["events"]:
                print(f"    {e['what']} at {e['at_s']} s (took {e['took_ms']} ms): slowest call {e['slowest_call_ms']} ms, "
                      f"{e['calls_over_5ms']} calls over 5 ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
