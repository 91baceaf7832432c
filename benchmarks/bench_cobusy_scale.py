"""HDFS-H-cobusy placement cost as the tenant count grows, ours against a baseline checkout.

    .venv/bin/python benchmarks/bench_cobusy_scale.py --tenants 654,2000,5000
    git worktree add /tmp/harvest-base <commit>
    .venv/bin/python benchmarks/bench_cobusy_scale.py --baseline-tree /tmp/harvest-base

For each tenant count: a synthetic co-busy model (``m2`` from random low-rank busy profiles, so
scores differ and ties are rare), 3 servers per tenant, a 3x3 grid with every tenant in a cell;
then ``ReplicaPlacer.place`` for ``--blocks`` new blocks (3 replicas) and as many re-replications
(one more replica next to one holder, under the risk target), each booked and released at once as
the service does. Each tree runs in its own process (its package first on the path), one after the
other, so both see the same machine; the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
from placement_service.core.cobusy import CobusyModel
from placement_service.core.placement import ReplicaPlacer
from placement_service.core.types import GridCell, Inventory

T, per, blocks, seed = (int(a) for a in sys.argv[1:5])
rng = np.random.default_rng(seed)
names = [f"tenant-{i:05d}" for i in range(T)]
x = rng.uniform(0.0, 1.0, (T, 24))
x = x ** 4  # a few busy hours each
m2 = (x @ x.T) / 24 * 0.2
m1 = np.clip(np.diag(m2).copy(), 1e-4, 1.0)
np.fill_diagonal(m2, m1)
model = CobusyModel(tuple(names), m1, np.maximum(m2, 1e-9))
servers = [f"node-{i:06d}" for i in range(T * per)]
tenant = [names[i % T] for i in range(T * per)]
inv = Inventory(server=tuple(servers), tenant=tuple(tenant), environment=tuple(tenant),
                rack=tuple("/r" for _ in servers), cores=np.full(len(servers), 16.0),
                memory_mb=np.full(len(servers), 65536.0), storage_gb=np.full(len(servers), 800.0))
grid = {t: GridCell(i % 3, (i // 3) % 3) for i, t in enumerate(names)}
t0 = time.perf_counter()
placer = ReplicaPlacer(inv, grid, seed=seed, cobusy=model)
build_s = time.perf_counter() - t0
size = placer.config.block_size_mb

def run(existing):
    draws = np.random.default_rng(seed + 1)
    t0 = time.perf_counter()
    for b in range(blocks):
        held = [servers[int(draws.integers(len(servers)))]] if existing else []
        res = placer.place(None, 1 if existing else 3, existing=held)
        for s in res.targets:
            placer.release(s, size)
    return (time.perf_counter() - t0) / blocks * 1e6

run(False)  # warm-up
print(json.dumps({"build_ms": build_s * 1e3, "new_us": run(False), "repair_us": run(True)}))
"""


def measure(tree: Path, tenants: int, per: int, blocks: int, seed: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tenants), str(per), str(blocks), str(seed)],
                         capture_output=True, text=True, env=env, cwd=tree, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tenants", default="654,2000,5000", help="comma list of tenant counts")
    p.add_argument("--servers-per-tenant", type=int, default=3)
    p.add_argument("--blocks", type=int, default=3000, help="blocks (and re-replications) timed per point")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline-tree", type=Path, help="a checkout to compare with (e.g. a git worktree)")
    args = p.parse_args()
    trees = [("ours", ROOT)] + ([("baseline", args.baseline_tree.resolve())] if args.baseline_tree else [])
    print(f"load average at start: {os.getloadavg()}")
    print("| tenants | tree | build (ms) | new block, 3 replicas (us) | re-replication, 1 replica (us) |")
    print("|---|---|---|---|---|")
    for t in (int(x) for x in args.tenants.split(",")):
        for name, tree in trees:
            r = measure(tree, t, args.servers_per_tenant, args.blocks, args.seed)
            print(f"| {t:,} | {name} | {r['build_ms']:.0f} | {r['new_us']:.0f} | {r['repair_us']:.0f} |", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
