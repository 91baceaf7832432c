"""A primary tenant on a testbed worker: replay one tenant's CPU series and probe its own latency.

Both testbeds run this module: ``harvest testbed up`` (one per worker host) and the ``docker/``
compose (``worker.sh``: ``python3 -m scheduler_plugin.testbed.primary``).

1. The tenant's series: the mean ``cpu`` (fraction of a server's cores) over the tenant's servers
   per timestamp, from a utilization file (``harvest generate`` / ``harvest convert-real``; Parquet,
   CSV or CSV.gz with ``timestamp, tenant, cpu``).
2. Replay: slot ``j`` lasts ``slot_s / speedup`` seconds (at least 0.5 s); during it ``cores``
   worker processes each stay busy for ``cpu[j]`` of every 100 ms period (duty cycle), so the
   primary's CPU follows the series: ``cpu[j] * cores`` cores.
3. Latency probe: every ``probe_interval_s`` the main process times a fixed piece of work (the
   tenant's "request"); every ``window_s`` it appends ``time, slot, cpu_target, requests, p50_ms,
   p99_ms, max_ms`` to ``--latency-out`` (``time``: the window's end, epoch seconds). Rising
   latency while batch work runs is the interference the harvest agent must prevent.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from placement_service import csvsafe

PERIOD_S = 0.1
LATENCY_HEADER = ["time", "slot", "cpu_target", "requests", "p50_ms", "p99_ms", "max_ms"]


class PrimaryError(SystemExit):
    """Bad input for the primary tenant (the process exits with this message)."""


def tenant_series(rows: Iterable[tuple[Any, Any, Any]], tenant: str) -> list[tuple[float, float]]:
    """[(timestamp, mean cpu clipped to 0..1)] of ``tenant`` from (timestamp, tenant, cpu) rows, time-ordered."""
    sums: dict[float, float] = defaultdict(float)
    counts: dict[float, int] = defaultdict(int)
    for ts, t, cpu in rows:
        if t == tenant and cpu is not None and not math.isnan(float(cpu)):
            sums[float(ts)] += float(cpu)
            counts[float(ts)] += 1
    if not sums:
        raise PrimaryError(f"primary: tenant {tenant!r} has no samples")
    return [(ts, min(1.0, max(0.0, sums[ts] / counts[ts]))) for ts in sorted(sums)]


def read_rows(path: str) -> Iterable[tuple[Any, Any, Any]]:
    """(timestamp, tenant, cpu) rows of a utilization file (Parquet, CSV or CSV.gz)."""
    if path.endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["timestamp", "tenant", "cpu"])
        cols = [table.column(n).to_pylist() for n in ("timestamp", "tenant", "cpu")]
        return list(zip(*cols, strict=True))
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"timestamp", "tenant", "cpu"} - set(reader.fieldnames or [])
            if missing:
                raise PrimaryError(f"primary: {path}: missing column(s) {', '.join(sorted(missing))}")
            return [(float(r["timestamp"]), r["tenant"], float(r["cpu"])) for r in reader]
    except (OSError, ValueError) as exc:
        raise PrimaryError(f"primary: {path}: {exc}") from None


def step_seconds(series: list[tuple[float, float]], speedup: float) -> float:
    """Seconds one slot of the series lasts in the replay: slot length / speedup, at least 0.5 s."""
    slot_s = (series[1][0] - series[0][0]) if len(series) > 1 else 300.0
    return max(0.5, float(slot_s) / speedup)


def busy_worker(target: Any, stop: Any) -> None:
    """Keep one core busy for ``target.value`` of every period until ``stop`` is set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while not stop.is_set():
        start = time.perf_counter()
        busy_until = start + PERIOD_S * target.value
        while time.perf_counter() < busy_until:
            pass
        rest = PERIOD_S - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)


def probe_once(work: int = 20000) -> float:
    """Milliseconds a fixed piece of work takes now (the tenant's request)."""
    start = time.perf_counter()
    sum(i * i for i in range(work))
    return (time.perf_counter() - start) * 1000.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of ``values``; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m scheduler_plugin.testbed.primary", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utilization", required=True, help="utilization file (Parquet, CSV or CSV.gz)")
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--cores", type=int, default=1, help="busy-loop processes (default 1)")
    ap.add_argument("--speedup", type=float, default=30.0, help="replay this much faster than real time")
    ap.add_argument("--probe-interval-s", type=float, default=0.2)
    ap.add_argument("--window-s", type=float, default=60.0, help="one latency row per this many seconds")
    ap.add_argument("--latency-out", required=True)
    args = ap.parse_args(argv)
    for name in ("speedup", "probe_interval_s", "window_s"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            ap.error(f"--{name.replace('_', '-')}: must be a positive number, got {value}")
    if args.cores < 1:
        ap.error(f"--cores: must be >= 1, got {args.cores}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # run the cleanup below
    series = tenant_series(read_rows(args.utilization), args.tenant)
    step_s = step_seconds(series, args.speedup)
    target = mp.Value("d", series[0][1], lock=False)
    stop = mp.Event()
    workers = [mp.Process(target=busy_worker, args=(target, stop), daemon=True) for _ in range(args.cores)]
    for w in workers:
        w.start()
    new_file = not os.path.exists(args.latency_out)
    out = open(args.latency_out, "a", newline="")  # noqa: SIM115 (closed in finally)
    writer = csvsafe.writer(out)
    if new_file:
        writer.writerow(LATENCY_HEADER)
        out.flush()
    print(f"primary: tenant {args.tenant}, {len(series)} slots, {step_s:.1f} s per slot, "
          f"{args.cores} cores, a latency row every {args.window_s:g} s", file=sys.stderr, flush=True)
    samples: list[float] = []
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
            if now - window_start >= args.window_s:
                writer.writerow([round(now, 3), slot, round(target.value, 4), len(samples),
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
