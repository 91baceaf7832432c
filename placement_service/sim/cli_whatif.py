"""``harvest whatif``: trace files in, one Markdown report with figures out (see ``sim/whatif.py``)."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from placement_service.validate import finite_float


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "whatif",
        help="from your trace files to a what-if report: classes, job-time gain, lost blocks, failed reads",
        description=(
            "Run clustering and the schedule, durability and availability simulations at the utilization "
            "your data has (and one step either side), then write DIR/report.md with PNG figures: the "
            "classes found, the expected job-time gain and killed tasks against YARN-PT, lost blocks and "
            "failed accesses against stock HDFS, and what to configure (reserve, replication). Inputs are "
            "the trace files of 'harvest import' / 'harvest generate'. Without --reimages, reimages are "
            "drawn from the generator's model and the report says so. The durability and availability runs "
            "are sized to the cluster's servers and storage (the report says how; a cluster too small to hold a "
            "useful number of blocks is refused). Progress, with an estimate of the time left, goes to stderr."
        ),
    )
    p.add_argument("--utilization", required=True, help="utilization samples (timestamp, server, tenant, cpu)")
    p.add_argument("--inventory", required=True, help="inventory (server, tenant, environment, rack, ...)")
    p.add_argument("--reimages", help="reimage events (timestamp, server); default: synthetic, said in the report")
    p.add_argument("--jobs", metavar="DIR", help="folder of job JSON files (default: the bundled TPC-DS DAGs)")
    p.add_argument("--out", required=True, help="output folder (report.md, figures, raw results)")
    p.add_argument("--level-step", type=finite_float, default=0.1,
                   help="utilization step either side of the data's own level (default 0.1)")
    p.add_argument("--runs", type=int, default=1, help="runs per point (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--history-days", type=finite_float, default=7.0, help="days of history the policy learns from")
    p.add_argument("--durability-blocks", type=int, default=None,
                   help="blocks in the durability run (default: 100 a server, at most 500,000 and half of what the "
                        "inventory's storage holds at the highest replication; the report says what was used)")
    p.add_argument("--durability-days", type=finite_float, default=365.0, help="days of the durability run")
    p.add_argument("--availability-blocks", type=int, default=None,
                   help="blocks in the availability runs (default: 100 a server, at most 100,000 and the same "
                        "storage bound; 5 reads a block, at most 500,000)")
    p.add_argument("--interval-s", type=finite_float, default=None,
                   help="seconds between samples (default: inferred from the timestamps, and the report says so; "
                        "give it when the inferred interval is wrong)")
    p.add_argument("--schedule-step-s", type=finite_float, default=300.0,
                   help="time step of the scheduling simulation (default 300 s: minutes for a 5,000-server month; "
                        "the simulator's own default is 60 s)")
    p.add_argument("--name", help="the datacenter's name in the report and figures (default: the utilization file's "
                                  "folder for 'mydc/utilization.parquet', else the file's name)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes for the simulation points (default: this machine's cores)")
    p.set_defaults(func=_whatif)


def _whatif(args: argparse.Namespace) -> int:
    from placement_service.sim.whatif import WhatIfConfig, WhatIfError, run_whatif

    for flag, value, low in (("--level-step", args.level_step, 0.0), ("--history-days", args.history_days, 0.0),
                             ("--durability-days", args.durability_days, 0.0),
                             ("--schedule-step-s", args.schedule_step_s, 0.0),
                             ("--interval-s", args.interval_s if args.interval_s is not None else 1.0, 0.0)):
        if not (math.isfinite(value) and value > low):
            raise WhatIfError(f"{flag}: expected a positive number, got {value}")
    if args.runs < 1 or args.workers < 1:
        raise WhatIfError("--runs and --workers must be >= 1")
    for flag, n in (("--durability-blocks", args.durability_blocks), ("--availability-blocks", args.availability_blocks)):
        if n is not None and n < 1:
            raise WhatIfError(f"{flag} must be >= 1, got {n}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise WhatIfError(f"--out {args.out}: exists and is not a folder")
    config = WhatIfConfig(level_step=args.level_step, history_days=args.history_days, runs=args.runs,
                          seed=args.seed, durability_blocks=args.durability_blocks,
                          durability_days=args.durability_days, availability_blocks=args.availability_blocks,
                          schedule_step_s=args.schedule_step_s, workers=args.workers, name=args.name,
                          interval_s=args.interval_s)
    run_whatif(utilization=args.utilization, inventory=args.inventory, reimages=args.reimages, out=out,
               config=config, jobs=args.jobs)
    return 0
