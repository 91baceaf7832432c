"""Benchmark: class selection decisions per second with 50 classes, ours vs a naive Python loop.

Both implementations answer the same stream of (job type, peak concurrency) requests against the
same 50 classes, one after the other in one run:

- ``ClassSelector.select_typed``: per-class arrays precomputed once (and on ``update_current``);
  a decision is a few numpy operations;
- ``naive``: the textbook per-call loop, recomputing every class's headroom, capacity and weight in
  Python for each request and sampling with ``random``;
- ``ClassSelector.select`` on the 99 bundled TPC-DS DAGs: the full path including the DAG analysis.

Requests: job types uniform; demands log-uniform between 1 and 200,000 containers, so that a mix
of single-class, multi-class and no-class answers is exercised (the mix is printed).

Usage: ``.venv/bin/python benchmarks/bench_selection.py [--decisions 100000] [--classes 50] [--seed 0]``
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import Counter

import numpy as np

from placement_service.core.dag import max_concurrency
from placement_service.core.selection import ClassSelector, SelectionConfig, headroom
from placement_service.core.tpcds import tpcds_jobs
from placement_service.core.types import JobType, Pattern, Selection, UtilizationClass

TYPES = (JobType.SHORT, JobType.MEDIUM, JobType.LONG)


def make_classes(n: int, rng: np.random.Generator) -> list[UtilizationClass]:
    """``n`` classes: patterns in turn, average CPU 5-70 %, peak up to +40 %, 20-400 servers of 16 cores."""
    out = []
    patterns = (Pattern.CONSTANT, Pattern.PERIODIC, Pattern.UNPREDICTABLE)
    for i in range(n):
        avg = float(rng.uniform(0.05, 0.7))
        peak = min(1.0, avg + float(rng.uniform(0.0, 0.4)))
        cur = float(np.clip(avg + rng.normal(0.0, 0.1), 0.0, 1.0))
        servers = int(rng.integers(20, 400))
        p = patterns[i % 3]
        out.append(UtilizationClass(f"{p.value}-{i}", p, avg, peak, cur, (f"t{i}",), servers, servers * 16.0))
    return out


class NaiveSelector:
    """Class selection written as a plain per-call loop (the baseline)."""

    def __init__(self, classes: list[UtilizationClass], config: SelectionConfig) -> None:
        self.classes = classes
        self.config = config

    def select_typed(self, job_type: JobType, req: int, rnd: random.Random) -> Selection:
        cands = []
        for c in self.classes:
            h = headroom(job_type, c)
            usable = max(0.0, h - self.config.reserve_frac)
            cap = (
                c.cores * usable / self.config.container_cores
                if c.cores > 0
                else (float("inf") if usable > 0 else 0.0)
            )
            w = h * self.config.weights[job_type][c.pattern] if usable > 0 else 0.0
            if w > 0:
                cands.append((c.id, cap, w))
        fits = [(cid, w) for cid, cap, w in cands if cap >= req]
        if fits:
            u = rnd.random() * sum(w for _, w in fits)
            for cid, w in fits:
                u -= w
                if u < 0:
                    return Selection(job_type, req, (cid,))
            return Selection(job_type, req, (fits[-1][0],))
        if sum(cap for _, cap, _ in cands) >= req:
            left = list(cands)
            chosen: list[str] = []
            covered = 0.0
            while covered < req:
                u = rnd.random() * sum(w for _, _, w in left)
                for i, (cid, cap, w) in enumerate(left):
                    u -= w
                    if u < 0 or i == len(left) - 1:
                        chosen.append(cid)
                        covered += cap
                        left.pop(i)
                        break
            return Selection(job_type, req, tuple(chosen))
        return Selection(job_type, req, ())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    classes = make_classes(args.classes, rng)
    config = SelectionConfig(reserve_frac=0.33)
    types = [TYPES[i] for i in rng.integers(0, 3, args.decisions)]
    demands = np.exp(rng.uniform(0.0, np.log(200_000), args.decisions)).astype(int).clip(1).tolist()

    ours = ClassSelector(classes, config)
    draw = np.random.default_rng(args.seed + 1)
    t0, c0 = time.perf_counter(), time.process_time()
    answers = [ours.select_typed(t, d, draw) for t, d in zip(types, demands, strict=True)]
    ours_s, ours_cpu = time.perf_counter() - t0, time.process_time() - c0

    naive = NaiveSelector(classes, config)
    rnd = random.Random(args.seed + 1)
    t0, c0 = time.perf_counter(), time.process_time()
    naive_answers = [naive.select_typed(t, d, rnd) for t, d in zip(types, demands, strict=True)]
    naive_s, naive_cpu = time.perf_counter() - t0, time.process_time() - c0

    def mix(sels: list[Selection]) -> Counter[str]:
        return Counter("none" if not s.classes else "one" if len(s.classes) == 1 else "several" for s in sels)

    jobs = tpcds_jobs()
    reps = max(1, args.decisions // (10 * len(jobs)))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        for job in jobs:
            ours.select(job, draw)
    full_s, full_cpu = time.perf_counter() - t0, time.process_time() - c0
    full_n = reps * len(jobs)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        for job in jobs:
            max_concurrency(job)
    dag_s, dag_cpu = time.perf_counter() - t0, time.process_time() - c0

    load = os.getloadavg()
    print(f"class selection, {args.classes} classes, {args.decisions:,} decisions, seed {args.seed}")
    print(
        f"load average (1/5/15 min) before timing end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, cpus {os.cpu_count()}"
    )
    print(f"answer mix (ours):  {dict(mix(answers))}")
    print(f"answer mix (naive): {dict(mix(naive_answers))}")
    print()
    print("| implementation | decisions/s (wall) | decisions/s (CPU time) | us/decision (wall) |")
    print("|---|---:|---:|---:|")
    for label, n, wall, cpu in (
        ("ClassSelector.select_typed (ours)", args.decisions, ours_s, ours_cpu),
        ("naive per-call Python loop (baseline)", args.decisions, naive_s, naive_cpu),
        ("ClassSelector.select on the 99 TPC-DS DAGs (with DAG analysis)", full_n, full_s, full_cpu),
        ("of which max_concurrency alone", full_n, dag_s, dag_cpu),
    ):
        print(f"| {label} | {n / wall:,.0f} | {n / cpu:,.0f} | {1e6 * wall / n:.1f} |")
    print(f"\nspeed-up over the naive loop: {naive_s / ours_s:.1f}x")


if __name__ == "__main__":
    main()
