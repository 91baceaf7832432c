"""Load generator for the placement service (runs in its own process, talks over loopback).

Modes (each prints one JSON line of results):

- ``ingest-grpc``: ``--nodes`` simulated agents, one gRPC ``Report`` stream each, every agent sends
  one report every ``--interval-s`` (phases spread evenly) and waits for its acknowledgement;
- ``ingest-http``: the same nodes, reports relayed in batches of ``--batch`` per ``POST /v1/reports``
  (one relay per rack of ``--batch`` nodes);
- ``choose-targets``: open-loop ``ChooseTargets`` calls at ``--rate`` per second;
- ``select``: open-loop ``POST /v1/jobs/select`` at ``--rate`` per second over keep-alive connections.

Latencies are measured from the scheduled send time (so a stalled server cannot hide its queueing
delay by slowing the generator down) and reported as p50 / p99 / max in milliseconds. Acknowledged
reports are written to ``--acked-out`` (node -> last acknowledged seq, count) for the loss check.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np


def pct(lat_s: list[float]) -> dict[str, float]:
    if not lat_s:
        return {"n": 0}
    a = np.asarray(lat_s) * 1000.0
    return {"n": len(a), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max())}


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def tenant_of(i: int, tenants: int) -> str:
    return f"tenant-{i % tenants:05d}"


def report_doc(i: int, seq: int, tenants: int, now: float) -> dict[str, Any]:
    cpu = 1.0 + (i * 7 + seq) % 13 * 0.5
    return {"node": node_name(i), "tenant": tenant_of(i, tenants), "timestamp": now, "primary_cpu_cores": cpu,
            "primary_memory_mb": 4096.0, "capacity_cores": 16.0, "capacity_memory_mb": 65536.0,
            "busy": cpu > 6.5, "free_storage_gb": 800.0, "seq": seq}


# -- ingest over gRPC -------------------------------------------------------------------------------
async def _agent(stub: Any, pb2: Any, i: int, args: argparse.Namespace, t0: float, end: float,
                 lat: list[float], steady: list[float], acked: dict[str, int], seq0: int,
                 retries: list[int]) -> None:
    """One agent: open a stream, report every interval, wait for each ack. Like the real agent, a
    broken stream is reopened and the unacknowledged report resent with the same seq (the service
    de-duplicates it if it was stored after all)."""
    phase = (i / args.nodes) * args.interval_s
    k = 0
    delay = t0 + phase - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)  # an agent opens its stream when it starts reporting
    call = stub.Report(metadata=(("authorization", f"Bearer {args.token}"),))
    attempts = 0
    while True:
        due = t0 + phase + k * args.interval_s
        if due >= end:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        seq = seq0 + k + 1
        try:
            await call.write(pb2.NodeReport(**report_doc(i, seq, args.tenants, time.time())))
            reply = await call.read()
        except Exception as exc:
            attempts += 1
            retries[0] += 1
            if attempts > 5:
                print(f"agent {i}: giving up at k={k}: {exc!r}", file=sys.stderr)
                return
            await asyncio.sleep(0.1 * attempts)
            call = stub.Report(metadata=(("authorization", f"Bearer {args.token}"),))
            continue
        attempts = 0
        lat.append(time.perf_counter() - due)
        if due - t0 >= 2 * args.interval_s:
            steady.append(lat[-1])
        acked[node_name(i)] = reply.acked_seq
        k += 1
    try:
        await call.done_writing()
    except Exception:
        pass


async def ingest_grpc(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc

    channels = [grpc.aio.insecure_channel(args.grpc) for _ in range(args.channels)]
    stubs = [harvest_pb2_grpc.PlacementStub(c) for c in channels]
    lat: list[float] = []
    acked: dict[str, int] = {}
    t0 = time.perf_counter() + 2.0
    end = t0 + args.duration_s
    seq0 = args.seq_base
    retries = [0]
    steady: list[float] = []
    tasks = [asyncio.create_task(_agent(stubs[i % len(stubs)], harvest_pb2, i, args, t0, end, lat, steady, acked,
                                        seq0, retries)) for i in range(args.nodes)]
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    for c in channels:
        await c.close()
    return {"mode": "ingest-grpc", "nodes": args.nodes, "duration_s": wall, "acked_reports": len(lat),
            "reports_per_s": len(lat) / wall, "ack_latency": pct(lat), "acked_nodes": len(acked),
            "stream_retries": retries[0], "ack_latency_after_first_2_intervals": pct(steady),
            "acked": acked}


# -- ingest over HTTP (batched relays) ---------------------------------------------------------------
def _relay(base: str, token: str, nodes: list[int], args: argparse.Namespace, t0: float, end: float,
           lat: list[float], acked: dict[str, int], counts: list[int], lock: threading.Lock) -> None:
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    phase = (nodes[0] / args.nodes) * args.interval_s
    k = 0
    while True:
        due = t0 + phase + k * args.interval_s
        if due >= end:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        seq = args.seq_base + k + 1
        now = time.time()
        body = json.dumps({"reports": [report_doc(i, seq, args.tenants, now) for i in nodes]})
        conn.request("POST", "/v1/reports", body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status == 202:
            with lock:
                lat.append(time.perf_counter() - due)
                counts[0] += len(nodes)
                for i in nodes:
                    acked[node_name(i)] = seq
        k += 1
    conn.close()


def ingest_http(args: argparse.Namespace) -> dict[str, Any]:
    lat: list[float] = []
    acked: dict[str, int] = {}
    counts = [0]
    lock = threading.Lock()
    t0 = time.perf_counter() + 1.0
    end = t0 + args.duration_s
    groups = [list(range(s, min(s + args.batch, args.nodes))) for s in range(0, args.nodes, args.batch)]
    threads = [threading.Thread(target=_relay, args=(args.http, args.token, g, args, t0, end, lat, acked, counts,
                                                     lock)) for g in groups]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return {"mode": "ingest-http", "nodes": args.nodes, "batch": args.batch, "duration_s": wall,
            "acked_reports": counts[0], "reports_per_s": counts[0] / wall, "request_latency": pct(lat),
            "acked_nodes": len(acked), "acked": acked}


# -- decision paths ---------------------------------------------------------------------------------
async def choose_targets(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc

    channel = grpc.aio.insecure_channel(args.grpc)
    stub = harvest_pb2_grpc.PlacementStub(channel)
    lat: list[float] = []
    errors: list[str] = []
    rng = np.random.default_rng(args.seed)
    writers = [node_name(int(i)) for i in rng.integers(0, args.nodes, size=4096)]

    warm: list[float] = []

    async def one(due: float, writer: str) -> None:
        try:
            await stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(writer=writer, replicas=3,
                                                                      block_size=128 << 20), timeout=2.0)
            took = time.perf_counter() - due
            if due < t0:
                warm.append(took)
                return
            lat.append(took)
            slow.append((took, due - t0))
        except grpc.RpcError as exc:
            errors.append(str(exc.code()))

    slow: list[tuple[float, float]] = []  # (latency, due s after start) of every measured call
    lags: list[tuple[float, float]] = []

    async def watch() -> None:  # this process's own event-loop stalls, to tell them from the server's
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lag = time.perf_counter() - t
            if lag > 0.005:
                lags.append((round(t - t0, 4), round(1000 * lag, 1)))

    watcher = asyncio.ensure_future(watch())
    await stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(writer=writers[0], replicas=3), timeout=5.0)
    # The client's own garbage collections (its heap grows with every finished call it keeps) must
    # not be measured as the server's latency: none during the run (a short-lived process).
    if args.client_gc == "off":
        gc.freeze()
        gc.disable()
    # The first --warmup-s of calls at the full rate are sent but reported apart: the server's
    # thread pool and the HTTP/2 stream windows grow during them, a start-up transient that would
    # otherwise decide the p99 of a 20-s window (all of the slowest calls were in its first 10 ms).
    start = time.perf_counter() + 0.2
    t0 = start + args.warmup_s
    n = int(args.rate * (args.warmup_s + args.duration_s))
    # Only the calls in flight are kept: gathering all n tasks at the end registered n callbacks in
    # one step, a 25-60 ms stall of this loop that the last calls of every window counted as the
    # server's latency (the slowest call of a quiet run was always at the window's end).
    pending: set[asyncio.Task[None]] = set()
    # Spawn each call at its due time (a pacer, not n tasks created up front); a late pacer sends at
    # once and the lateness counts in the latency.
    for k in range(n):
        due = start + k / args.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(due, writers[k % len(writers)]))
        pending.add(task)
        task.add_done_callback(pending.discard)
    while pending:
        await asyncio.wait(set(pending))
    wall = time.perf_counter() - t0
    watcher.cancel()
    if args.dump_latencies:
        Path(args.dump_latencies).write_text("".join(f"{t:.5f} {1000 * x:.3f}\n" for x, t in slow))
    slowest = sorted(slow, reverse=True)[:40]
    await channel.close()
    # Stalls of this process's own loop (> 5 ms, worst first, [s after start, ms]): a slow call at
    # the same moment is the client's, not the server's.
    return {"client_loop_stalls": sorted(lags, key=lambda x: -x[1])[:20], "mode": "choose-targets",
            "rate": args.rate, "duration_s": wall, "ok": len(lat),
            "errors": len(errors), "error_codes": sorted(set(errors))[:5], "latency": pct(lat),
            "warmup_s": args.warmup_s, "warmup_latency": pct(warm),
            "slowest_at_s": [round(t, 2) for _, t in slowest[:10]],
            "slowest": [[round(t, 4), round(1000 * took, 1)] for took, t in slowest],
            "t0_epoch": time.time() - (time.perf_counter() - t0)}


def select(args: argparse.Namespace) -> dict[str, Any]:
    job = json.dumps({"name": "q", "last_duration_s": 1200.0,
                      "vertices": {"Map 1": {"tasks": 40}, "Map 2": {"tasks": 10}, "Reducer 3": {"tasks": 8}},
                      "edges": [{"src": "Map 1", "dst": "Reducer 3", "type": "SIMPLE_EDGE"},
                                {"src": "Map 2", "dst": "Reducer 3", "type": "BROADCAST_EDGE"}]})
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    n_threads = max(1, args.connections)
    per_thread_rate = args.rate / n_threads
    t0 = time.perf_counter() + 0.5
    end = t0 + args.duration_s

    def worker(w: int) -> None:
        u = urlparse(args.http)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        k = 0
        while True:
            due = t0 + (w / n_threads + k) / per_thread_rate
            if due >= end:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            conn.request("POST", "/v1/jobs/select", job, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            with lock:
                if resp.status == 200:
                    lat.append(time.perf_counter() - due)
                else:
                    errors[0] += 1
            k += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return {"mode": "select", "rate": args.rate, "duration_s": wall, "ok": len(lat), "errors": errors[0],
            "latency": pct(lat)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["ingest-grpc", "ingest-http", "choose-targets", "select"])
    p.add_argument("--http", default="http://127.0.0.1:8470")
    p.add_argument("--grpc", default="127.0.0.1:8471")
    p.add_argument("--token", default="")
    p.add_argument("--nodes", type=int, default=15000)
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--interval-s", type=float, default=3.0)
    p.add_argument("--duration-s", type=float, default=30.0)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--client-gc", choices=["on", "off"], default="off",
                   help="choose-targets: the load generator's own garbage collector during the run")
    p.add_argument("--warmup-s", type=float, default=1.0,
                   help="choose-targets: calls at the full rate before the measured window, reported apart")
    p.add_argument("--dump-latencies", metavar="FILE",
                   help="choose-targets: write every measured call as '<due s after start> <latency ms>'")
    p.add_argument("--seq-base", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--acked-out", help="write node -> last acknowledged seq here (JSON)")
    p.add_argument("--hold", action="store_true", help="after printing the result, wait for stdin to close")
    args = p.parse_args(argv)
    if args.mode == "ingest-grpc":
        out = asyncio.run(ingest_grpc(args))
    elif args.mode == "ingest-http":
        out = ingest_http(args)
    elif args.mode == "choose-targets":
        out = asyncio.run(choose_targets(args))
    else:
        out = select(args)
    acked = out.pop("acked", None)
    if args.acked_out and acked is not None:
        with open(args.acked_out, "w") as fh:
            json.dump(acked, fh)
    print(json.dumps(out), flush=True)
    if args.hold:
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
