#!/usr/bin/env python3
"""Summarise a testbed run: jobs.csv (one row per query run) and primary-latency.csv (per worker,
the probe's p50/p99 during the run window). Usage: summarize.py RESULTS_DIR START_S END_S."""

from __future__ import annotations

import csv
import glob
import json
import os
import sys


def jobs(results: str) -> list[dict[str, object]]:
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "runs", "*.json"))):
        with open(path) as handle:
            run = json.load(handle)
        d = run.get("decision", {})
        rows.append({
            "run": os.path.basename(path)[:-5], "query": run.get("name"), "queue": d.get("queue"),
            "classes": " ".join(d.get("classes") or []), "job_type": d.get("job_type"),
            "source": d.get("source"), "duration_s": run.get("duration_s"), "exit_code": run.get("exit_code"),
            "killed_attempts": run.get("killed_attempts"),
        })
    return rows


def latency(results: str, start_s: float, end_s: float) -> list[dict[str, object]]:
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "primary-latency-*.csv"))):
        worker = os.path.basename(path)[len("primary-latency-"):-4]
        p50, p99 = [], []
        with open(path, newline="") as handle:
            for r in csv.DictReader(handle):
                if start_s <= float(r["time"]) <= end_s + 60:
                    p50.append(float(r["p50_ms"]))
                    p99.append(float(r["p99_ms"]))
        if p50:
            rows.append({"worker": worker, "minutes": len(p50), "p50_ms_median": sorted(p50)[len(p50) // 2],
                         "p99_ms_worst": max(p99)})
    return rows


def write(path: str, rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as handle:
        w = csv.DictWriter(handle, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str]) -> int:
    results, start_s, end_s = argv[0], float(argv[1]), float(argv[2])
    job_rows = jobs(results)
    write(os.path.join(results, "jobs.csv"), job_rows)
    write(os.path.join(results, "primary-latency.csv"), latency(results, start_s, end_s))
    ok = [r for r in job_rows if r["exit_code"] == 0]
    killed = sum(int(r["killed_attempts"] or 0) for r in job_rows)
    print(f"{len(ok)}/{len(job_rows)} query runs succeeded, {killed} task attempts killed; "
          f"see {results}/jobs.csv and {results}/primary-latency.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
