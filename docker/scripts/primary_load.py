#!/usr/bin/env python3
"""Primary-tenant load generator: replay one tenant's CPU series on this node and probe its latency.

1. The tenant's series: the mean ``cpu`` (fraction of a server's cores) over the tenant's servers
   per timestamp, from the utilization file of ``harvest generate`` (Parquet or CSV with
   ``timestamp, server, tenant, cpu``).
2. Replay: slot ``j`` lasts ``slot_s / speedup`` seconds; during it ``cores`` worker processes
   each stay busy for ``cpu[j]`` of every 100 ms period (duty cycle), so the node's primary CPU
   follows the series, ``cpu[j] * cores`` cores.
3. Latency probe: every ``probe_interval_s`` the main process times a fixed piece of work (the
   primary tenant's "request"); once a minute it appends ``time, slot, cpu_target, requests,
   p50_ms, p99_ms, max_ms`` to ``--latency-out``. Rising latency while batch work runs is the
   interference the harvest agent must prevent.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import defaultdict

PERIOD_S = 0.1


def tenant_series(rows, tenant):
    """[(timestamp, mean cpu)] of ``tenant`` from (timestamp, tenant, cpu) rows, time-ordered."""
    sums = defaultdict(float)
    counts = defaultdict(int)
    for ts, t, cpu in rows:
        if t == tenant and cpu is not None and not math.isnan(float(cpu)):
            sums[ts] += float(cpu)
            counts[ts] += 1
    if not sums:
        raise SystemExit(f"primary_load: tenant {tenant!r} has no samples")
    return [(ts, min(1.0, max(0.0, sums[ts] / counts[ts]))) for ts in sorted(sums)]


def read_rows(path):
    if path.endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["timestamp", "tenant", "cpu"])
        cols = [table.column(n).to_pylist() for n in ("timestamp", "tenant", "cpu")]
        return zip(*cols, strict=True)
    with open(path, newline="") as handle:
        return [(float(r["timestamp"]), r["tenant"], float(r["cpu"])) for r in csv.DictReader(handle)]


def busy_worker(target, stop):
    """Keep one core busy for ``target.value`` of every period until ``stop`` is set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while not stop.is_set():
        start = time.perf_counter()
        busy_until = start + PERIOD_S * target.value
        while time.perf_counter() < busy_until:
            pass
        rest = PERIOD_S - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)


def probe_once(work=20000):
    start = time.perf_counter()
    sum(i * i for i in range(work))
    return (time.perf_counter() - start) * 1000.0


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utilization", required=True)
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--speedup", type=float, default=30.0, help="replay this much faster than real time")
    ap.add_argument("--probe-interval-s", type=float, default=0.2)
    ap.add_argument("--latency-out", required=True)
    args = ap.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # run the cleanup below
    series = tenant_series(read_rows(args.utilization), args.tenant)
    slot_s = (series[1][0] - series[0][0]) if len(series) > 1 else 300.0
    step_s = max(0.5, float(slot_s) / args.speedup)
    target = mp.Value("d", series[0][1], lock=False)
    stop = mp.Event()
    workers = [mp.Process(target=busy_worker, args=(target, stop), daemon=True) for _ in range(args.cores)]
    for w in workers:
        w.start()
    new_file = not os.path.exists(args.latency_out)
    out = open(args.latency_out, "a", newline="")
    writer = csv.writer(out)
    if new_file:
        writer.writerow(["time", "slot", "cpu_target", "requests", "p50_ms", "p99_ms", "max_ms"])
    print(f"primary_load: tenant {args.tenant}, {len(series)} slots, {step_s:.1f} s per slot, "
          f"{args.cores} cores", file=sys.stderr)
    samples = []
    window_start = time.time()
    slot = 0
    slot_end = time.time() + step_s
    try:
        while True:
            now = time.time()
            if now >= slot_end:
                slot = (slot + 1) % len(series)
                target.value = series[slot][1]
                slot_end = now + step_s
            samples.append(probe_once())
            if now - window_start >= 60.0:
                writer.writerow([round(now), slot, round(target.value, 4), len(samples),
                                 round(percentile(samples, 0.5), 3), round(percentile(samples, 0.99), 3),
                                 round(max(samples), 3)])
                out.flush()
                samples = []
                window_start = now
            time.sleep(args.probe_interval_s)
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
        for w in workers:
            w.join(1.0)
            if w.is_alive():
                w.terminate()
        out.close()


if __name__ == "__main__":
    sys.exit(main())
