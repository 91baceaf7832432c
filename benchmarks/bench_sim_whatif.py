"""Issue 41 item 2: ``harvest whatif`` wall time on a generated datacenter, with the load average.

Generates the datacenter once (``harvest generate --servers N --days D --interval-s I``), then runs
``harvest whatif`` on it with the given code checkouts side by side (default: this checkout only;
``--baseline DIR`` adds a checkout of the code before, e.g. ``git archive <commit> placement_service
| tar -x -C DIR``), one after the other, and prints per run: wall, CPU (this process's children:
the what-if and its workers), the load average before and after, and the report's durability and
availability tables::

    .venv/bin/python benchmarks/bench_sim_whatif.py --work /tmp/wi --servers 400 --days 14 --interval-s 600
    .venv/bin/python benchmarks/bench_sim_whatif.py --work /tmp/wi --baseline /tmp/old-code
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def harvest(code: Path, *argv: str) -> list[str]:
    return [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from placement_service.cli import main; raise SystemExit(main(sys.argv[1:]))", str(code), *argv]


def tables(report: Path) -> str:
    text = report.read_text().splitlines()
    keep = [line for line in text if line.startswith("|") and ("lost" in line or "|---" not in line)]
    start = next((i for i, line in enumerate(keep) if "replicas |" in line and "lost" in line), 0)
    return "\n".join(keep[start:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--servers", type=int, default=400)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--interval-s", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="a checkout of the code to compare against (its parent of placement_service)")
    args = ap.parse_args()
    dc = args.work / f"dc{args.servers}"
    if not (dc / "utilization.parquet").exists():
        subprocess.run(harvest(ROOT, "generate", "--servers", str(args.servers), "--days", f"{args.days:g}",
                               "--interval-s", f"{args.interval_s:g}", "--seed", str(args.seed), "--out", str(dc)),
                       check=True, stdout=subprocess.DEVNULL)
    runs = [("baseline", args.baseline)] if args.baseline else []
    runs.append(("this checkout", ROOT))
    for label, code in runs:
        out = args.work / f"wi-{label.replace(' ', '-')}"
        load0 = os.getloadavg()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(harvest(code, "whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                               str(dc / "inventory.parquet"), "--out", str(out)), check=True)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        print(f"\n{label} ({code}): wall {wall:.0f} s, CPU {cpu:.0f} s, load {load0[0]:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after\n{tables(out / 'report.md')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
