"""Decision latency with the service's self-explanation: explain off (no regression against a tree
without it) and explain on (what it costs).

    git worktree add /tmp/baseline <commit before server/insight.py>
    .venv/bin/python -m benchmarks.bench_explain --baseline-tree /tmp/baseline

Steps: (1) write a class table of ``--tenants`` tenants in 50 classes with a 3x3 grid, (2) start
``harvest serve`` from this tree and, when given, from ``--baseline-tree`` (same Python, the tree's
own package first on the path), (3) register ``--nodes`` nodes with one report each, (4) measure,
alternating blocks of ``--calls`` calls from ``--threads`` closed-loop clients: gRPC
``ChooseTargets``, HTTP ``POST /v1/blocks/place`` and ``POST /v1/jobs/select``, each without and
(this tree only) with ``?explain=1``. Prints one JSON document: p50 / p99 per path and server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_service_common import ROOT, TOKEN, Server, load_average, now_utc, start_server
from benchmarks.service_loadgen import pct


def write_classes(path: Path, tenants: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    classes: dict[str, dict[str, Any]] = {}
    doc: dict[str, Any] = {"classes": [], "tenants": {}, "grid": {}}
    for t in range(tenants):
        name = f"t{t:05d}"
        cid = f"constant-{t % 50}"
        c = classes.setdefault(cid, {"id": cid, "pattern": "constant", "avg_cpu": float(rng.uniform(0.1, 0.5)),
                                     "peak_cpu": 0.7, "current_cpu": 0.3, "servers": 0, "cores": 0.0, "tenants": []})
        c["tenants"].append(name)
        c["servers"] += 3
        c["cores"] += 96.0
        doc["tenants"][name] = {"class": cid, "pattern": "constant"}
        doc["grid"][name] = {"reimage_row": int(rng.integers(3)), "peak_column": int(rng.integers(3))}
    doc["classes"] = list(classes.values())
    path.write_text(json.dumps(doc))


def start(tree: Path, data_dir: Path, classes: Path) -> Server:
    return start_server(data_dir, "--classes-file", str(classes), "--recluster-interval-s", "0",
                        "--compact-interval-s", "5", tree=tree)


def register(server: Server, nodes: int, tenants: int) -> None:
    now = time.time()
    for lo in range(0, nodes, 1000):
        reps = [{"node": f"n{i:05d}", "tenant": f"t{i % tenants:05d}", "timestamp": now, "primary_cpu_cores": 8.0,
                 "primary_memory_mb": 1024.0, "capacity_cores": 32.0, "capacity_memory_mb": 131072.0,
                 "busy": False, "free_storage_gb": 2000.0, "seq": 1} for i in range(lo, min(nodes, lo + 1000))]
        req = urllib.request.Request(server.http + "/v1/reports", json.dumps({"reports": reps}).encode(),
                                     {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
    time.sleep(7)  # one compaction tick: the view now holds every node


def http_calls(server: Server, path: str, body: dict[str, Any], calls: int, threads: int) -> list[float]:
    host = server.http.split("//", 1)[1]
    lat: list[float] = []
    lock = threading.Lock()
    payload = json.dumps(body)

    def worker(n: int) -> None:
        conn = http.client.HTTPConnection(host, timeout=30)
        mine = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("POST", path, payload, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path}: HTTP {resp.status}")
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(calls // threads,)) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return lat


def grpc_calls(server: Server, calls: int, threads: int, nodes: int) -> list[float]:
    import grpc

    from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc

    lat: list[float] = []
    lock = threading.Lock()

    def worker(n: int, w: int) -> None:
        with grpc.insecure_channel(server.grpc) as ch:
            stub = harvest_pb2_grpc.PlacementStub(ch)
            mine = []
            for k in range(n):
                t0 = time.perf_counter()
                stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(writer=f"n{(w * 997 + k) % nodes:05d}",
                                                                    replicas=3), timeout=10)
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(calls // threads, w)) for w in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return lat


JOB = {"name": "q", "last_duration_s": 900.0, "vertices": {"Map 1": {"tasks": 40}, "Reducer 2": {"tasks": 10}},
       "edges": [{"src": "Map 1", "dst": "Reducer 2"}]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-tree", type=Path, help="a checkout without the explain code (side by side)")
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--nodes", type=int, default=15000)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out: dict[str, Any] = {"when": now_utc(), "load_before": load_average(), "nodes": args.nodes,
                           "tenants": args.tenants, "calls_per_block": args.calls, "threads": args.threads}
    with tempfile.TemporaryDirectory(prefix="bench-explain-") as tmp:
        classes = Path(tmp) / "classes.json"
        write_classes(classes, args.tenants, args.seed)
        trees = {"ours": ROOT} | ({"baseline": args.baseline_tree} if args.baseline_tree else {})
        servers = {k: start(t, Path(tmp) / k / "data", classes) for k, t in trees.items()}
        try:
            for s in servers.values():
                register(s, args.nodes, args.tenants)
            lat: dict[str, list[float]] = {}
            for _ in range(args.rounds):  # alternate so drifting load hits every path alike
                for name, s in servers.items():
                    lat.setdefault(f"{name} ChooseTargets (gRPC)", []).extend(grpc_calls(s, args.calls, args.threads, args.nodes))
                    lat.setdefault(f"{name} place", []).extend(
                        http_calls(s, "/v1/blocks/place", {"replicas": 3}, args.calls, args.threads))
                    lat.setdefault(f"{name} select", []).extend(
                        http_calls(s, "/v1/jobs/select", JOB, args.calls, args.threads))
                    if name == "ours":
                        lat.setdefault("ours place ?explain=1", []).extend(
                            http_calls(s, "/v1/blocks/place?explain=1", {"replicas": 3}, args.calls, args.threads))
                        lat.setdefault("ours select ?explain=1", []).extend(
                            http_calls(s, "/v1/jobs/select?explain=1", JOB, args.calls, args.threads))
            out["latency"] = {k: {q: round(v, 3) for q, v in pct(v).items()} for k, v in lat.items()}
        finally:
            for s in servers.values():
                s.stop()
    out["load_after"] = load_average()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
