"""Trace input speed: generating, writing, loading + validating a 5,000-server month, vs bare pyarrow.

Usage (from the repository root):

    .venv/bin/python benchmarks/bench_traces.py [--servers 5000] [--days 30] [--interval-s 300]
        [--csv-rows 2000000] [--repeats 3] [--write-docs]

Steps, in one process, each timed ``--repeats`` times (median and best reported):

1. ``generate_datacenter`` (3 sampled servers per tenant, the default) and ``write_datacenter``
   (Parquet, zstd);
2. **load**: ``io.load_utilization(..., known_servers=inventory)`` (every contract check) against
   the **bare** baseline ``pyarrow.parquet.read_table`` + ``to_numpy`` of the same columns (no
   checks): the price of validation;
3. ``tenant_series`` on the loaded samples (grid, average server, gap filling);
4. the same load on a CSV file of ``--csv-rows`` rows (first rows of the samples) against a bare
   ``pyarrow.csv.read_csv``.

With ``--write-docs`` the table goes to ``docs/bench/traces.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from placement_service.traces import io
from placement_service.traces.generate import generate_datacenter, write_datacenter
from placement_service.traces.series import tenant_series

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "bench" / "traces.md"


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), result


def bare_parquet(path: Path) -> int:
    t = pq.read_table(path, columns=["timestamp", "server", "tenant", "cpu"])
    arrays = [c.to_numpy() for c in t.columns]
    return len(arrays[0])


def bare_csv(path: Path) -> int:
    t = pacsv.read_csv(path)
    return t.num_rows


HEADER = """# Trace input benchmark

Generating, writing, loading + validating and building tenant series for a synthetic month; the
baseline is a bare pyarrow read of the same file (no checks). One section per configuration,
replaced when re-run with the same configuration. Script: `benchmarks/bench_traces.py`.
"""


def write_section(path: Path, config: str, text: str) -> None:
    """Replace (or append) the ``## config`` section of ``path``, keeping the others."""
    old = path.read_text() if path.exists() else HEADER
    parts = old.split("\n## ")
    head, sections = parts[0], ["## " + p for p in parts[1:]]
    sections = [sec for sec in sections if not sec.startswith(f"## {config}\n")] + [text]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head.rstrip() + "\n\n" + "\n".join(sec.rstrip() + "\n" for sec in sections))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, default=5000)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--interval-s", type=float, default=300.0)
    ap.add_argument("--csv-rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        med, best, dc = timed(
            lambda: generate_datacenter(args.servers, seed=args.seed, days=args.days, interval_s=args.interval_s),
            args.repeats,
        )
        n = len(dc.utilization)  # type: ignore[attr-defined]
        rows.append(("generate_datacenter", f"{n:,} samples", med, best))
        med, best, paths = timed(lambda: write_datacenter(dc, d / "dc"), args.repeats)  # type: ignore[arg-type]
        util = paths["utilization"]  # type: ignore[index]
        size_mb = util.stat().st_size / 1e6
        rows.append(("write_datacenter (Parquet)", f"{size_mb:.0f} MB", med, best))
        inv = io.load_inventory(paths["inventory"])  # type: ignore[index]
        med_b, best_b, _ = timed(lambda: bare_parquet(util), args.repeats)
        rows.append(("bare pyarrow read_table + to_numpy", f"{n:,} rows", med_b, best_b))
        med, best, samples = timed(lambda: io.load_utilization(util, known_servers=inv.server), args.repeats)
        rows.append(("load_utilization (all checks)", f"{n:,} rows", med, best))
        ratio_parquet = med / med_b
        med, best, series = timed(lambda: tenant_series(samples), args.repeats)  # type: ignore[arg-type]
        shape = series.cpu.shape  # type: ignore[attr-defined]
        rows.append(("tenant_series", f"{shape[0]} x {shape[1]}", med, best))
        # CSV: the first csv_rows samples.
        k = min(args.csv_rows, n)
        s = samples  # type: ignore[assignment]
        part = io.UtilizationSamples(s.timestamp_s[:k], s.server[:k], s.tenant[:k], s.cpu[:k])  # type: ignore[attr-defined]
        csv_path = d / "u.csv"
        io.write_utilization(part, csv_path)
        med_b, best_b, _ = timed(lambda: bare_csv(csv_path), args.repeats)
        rows.append(("bare pyarrow read_csv", f"{k:,} rows", med_b, best_b))
        med, best, _ = timed(lambda: io.load_utilization(csv_path), args.repeats)
        rows.append(("load_utilization CSV (all checks)", f"{k:,} rows", med, best))
        ratio_csv = med / med_b
    load_after = os.getloadavg()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    config = f"{args.servers} servers, {args.days:g} days, {args.interval_s:g} s slots"
    lines = [
        f"## {config}",
        "",
        f"`benchmarks/bench_traces.py --servers {args.servers} --days {args.days:g} --interval-s "
        f"{args.interval_s:g} --csv-rows {args.csv_rows} --repeats {args.repeats}` on {platform.machine()} "
        f"({os.cpu_count()} cores), Python {platform.python_version()}, numpy {np.__version__}; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (machine shared with other "
        f"sessions); peak RSS {peak_mb:.0f} MB.",
        "",
        "| step | size | median s | best s |",
        "|---|---|---|---|",
        *[f"| {name} | {size} | {med:.2f} | {best:.2f} |" for name, size, med, best in rows],
        "",
        f"Validation overhead: load_utilization / bare read = {ratio_parquet:.1f}x (Parquet), "
        f"{ratio_csv:.1f}x (CSV). The checks (numbers, ranges, NaN, duplicates, unknown servers, one "
        "tenant per server) are vector operations; the Parquet path also builds the object arrays and "
        "the cached factorization the tenant series uses.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_docs:
        write_section(OUT, config, text)
        print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
