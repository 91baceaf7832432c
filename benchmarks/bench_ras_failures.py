"""Online Mover under real outages: LANL system 18 (1,024 nodes, 2002-2005) replayed on a region.

Data: Los Alamos National Laboratory failure data 1996-2005, release LA-UR-05-7318 (we acknowledge
Los Alamos for providing these data), read from ``../shared/data/failures/``. Node ``n`` of the
system becomes server ``n`` of a synthetic 1,024-server region (8 MSBs, 3 hardware types,
10 reservations). Every outage takes its server down until it is fixed; the Online Mover replaces
reservation servers from the shared buffer; the solver re-runs every ``--resolve-days`` with the
current assignment as the previous one.

    .venv/bin/python benchmarks/bench_ras_failures.py [--resolve-days 7] [--buffer 0.02]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import json
import lzma
import os
import pathlib
import time

from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.scenario import Outage, replay
from placement_service.capacity.ras.solve import solve

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "failures"
LANL = "LA-UR-05-7318-failure-data-1996-2005.csv.xz"


def lanl_outages(system: str, servers: tuple[str, ...]) -> list[Outage]:
    path = DATA / LANL
    if not path.exists():
        path = pathlib.Path("/work/shared/data/failures") / LANL

    def t(s: str) -> float:
        return dt.datetime.strptime(s, "%m/%d/%Y %H:%M").replace(tzinfo=dt.UTC).timestamp()

    out = []
    with lzma.open(path, "rt") as f:
        for row in csv.DictReader(f):
            if row["System"] != system or not row["nodenumz"].isdigit():
                continue
            n = int(row["nodenumz"])
            if n < len(servers):
                start, end = t(row["Prob Started"]), t(row["Prob Fixed"])
                out.append(Outage(servers[n], start, max(end, start + 60)))
    return sorted(out, key=lambda o: o.start_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="18")
    ap.add_argument("--resolve-days", type=float, default=7.0)
    ap.add_argument("--buffer", type=float, default=0.02, help="shared random-failure buffer per hardware type")
    args = ap.parse_args()
    region = generate_region(n_servers=1024, n_msbs=8, n_hardware=3, seed=11)
    requests = generate_requests(region, n_reservations=10, fill=0.8, seed=11)
    problem = Problem(region, requests, Settings(time_limit_s=10, random_failure_buffer=args.buffer))
    outages = lanl_outages(args.system, region.server)
    t0 = time.monotonic()
    plan = solve(problem)
    stats = replay(problem, plan.assignment, outages, resolve_every_s=args.resolve_days * 86400)
    days = (outages[-1].start_s - outages[0].start_s) / 86400 if outages else 0.0
    print(json.dumps({
        "system": args.system, "outage_records": len(outages), "span_days": round(days, 1),
        "resolve_days": args.resolve_days, "buffer": args.buffer, **dataclasses.asdict(stats),
        "wall_s": round(time.monotonic() - t0, 1), "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
