"""Regenerate ``docs/results.md``: run every simulator experiment, then write the report.

    .venv/bin/python benchmarks/run_results.py                 # standard: 5,000-server datacenters, ~3 h CPU
    .venv/bin/python benchmarks/run_results.py --profile full  # more runs, levels and seeds, ~8 h CPU
    .venv/bin/python benchmarks/run_results.py --quick         # small datacenters, a few minutes
    .venv/bin/python benchmarks/run_results.py --report-only   # re-write the report from --work

Each experiment is one ``harvest sim ...`` command writing ``WORK/<name>/results.json``; an
experiment whose results already exist is skipped unless ``--force`` (so an interrupted run
resumes). ``--parallel 2`` runs two at once (the standard profile then takes about 1.5 h of wall time
on an otherwise idle 2-core machine). Since the simulator drives the agent's own decision function
(issue 14, item 6) a simulated month of one system costs 1-4 minutes, so the standard profile runs
each scheduling point once; ``full`` is the former three-run sweep. The report (``harvest sim report`` underneath) copies
figures and result files to ``docs/figures/sim/<name>/``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARVEST = [sys.executable, "-m", "placement_service.cli"]

GEN = ["--generate", "5000", "--generate-seed", "1"]
AZ = ["--real", "azure", "--real-servers", "5000"]
PL = ["--real", "planetlab", "--real-servers", "5000"]
LEVELS = "0.2,0.3,0.4,0.5,0.6"

FULL: dict[str, list[str]] = {
    "gen-durability-r3": ["durability", *GEN, "--reimage-days", "365", "--replicas", "3", "--blocks", "4000000",
                          "--runs", "3", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "gen-durability-r4": ["durability", *GEN, "--reimage-days", "365", "--replicas", "4", "--blocks", "4000000",
                          "--runs", "2"],
    "gen-schedule-linear": ["schedule", *GEN, "--generate-days", "37", "--levels", LEVELS, "--scaling", "linear",
                            "--runs", "3", "--days", "30", "--step-s", "120"],
    "gen-schedule-root": ["schedule", *GEN, "--generate-days", "37", "--levels", LEVELS, "--scaling", "root",
                          "--runs", "3", "--days", "30", "--step-s", "120"],
    "gen-schedule-ablation": ["schedule", *GEN, "--generate-days", "37", "--levels", "0.3,0.5", "--scaling", "linear",
                              "--runs", "1", "--days", "30", "--step-s", "120",
                              "--systems", "YARN-Stock,YARN-PT,YARN-PT-spread,YARN-H,YARN-PT-forecast,YARN-H-forecast"],
    "gen2-schedule-linear": ["schedule", "--generate", "5000", "--generate-seed", "2", "--generate-days", "37",
                             "--levels", LEVELS, "--scaling", "linear", "--runs", "1", "--days", "30", "--step-s", "120"],
    "gen3-schedule-linear": ["schedule", "--generate", "5000", "--generate-seed", "3", "--generate-days", "37",
                             "--levels", LEVELS, "--scaling", "linear", "--runs", "1", "--days", "30", "--step-s", "120"],
    "gen-availability": ["availability", *GEN, "--levels", LEVELS + ",0.7", "--replicas", "3,4", "--runs", "3",
                         "--blocks", "200000", "--accesses", "1000000", "--days", "21", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours,HDFS-H-risk"],
    "azure-schedule-linear": ["schedule", *AZ, "--levels", "0.3,0.4,0.5", "--scaling", "linear", "--runs", "2",
                              "--days", "7", "--step-s", "120"],
    "azure-durability": ["durability", *AZ, "--replicas", "3,4", "--blocks", "1000000", "--runs", "3",
                         "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "azure-availability": ["availability", *AZ, "--levels", LEVELS, "--replicas", "3,4", "--runs", "2",
                           "--blocks", "200000", "--accesses", "1000000", "--days", "14", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours,HDFS-H-risk"],
    "planetlab-schedule-linear": ["schedule", *PL, "--levels", "0.3,0.4,0.5", "--scaling", "linear", "--runs", "2",
                                  "--days", "6", "--history-days", "3", "--step-s", "120"],
    "planetlab-durability": ["durability", *PL, "--replicas", "3,4", "--blocks", "1000000", "--runs", "3",
                             "--history-days", "3", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "planetlab-availability": ["availability", *PL, "--levels", LEVELS, "--replicas", "3,4", "--runs", "2",
                               "--blocks", "200000", "--accesses", "1000000", "--days", "6", "--history-days", "3", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours,HDFS-H-risk"],
}

# The standard profile, ordered by what the report checks first: availability (3 and 4 replicas, all
# four placements), durability over several seeds on generated and real datacenters, then scheduling
# (one run per point; the ablation over 14 days; the other generator seeds at two levels).
STANDARD: dict[str, list[str]] = {
    "gen-availability": FULL["gen-availability"],
    "azure-availability": FULL["azure-availability"],
    "planetlab-availability": FULL["planetlab-availability"],
    "gen-durability-r3": ["durability", *GEN, "--reimage-days", "365", "--replicas", "3", "--blocks", "4000000",
                          "--runs", "2", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "azure-durability": ["durability", *AZ, "--replicas", "3", "--blocks", "1000000", "--runs", "3",
                         "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "planetlab-durability": ["durability", *PL, "--replicas", "3", "--blocks", "1000000", "--runs", "3",
                             "--history-days", "3", "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours"],
    "gen-durability-r4": ["durability", *GEN, "--reimage-days", "365", "--replicas", "4", "--blocks", "4000000",
                          "--runs", "1"],
    "gen-schedule-linear": ["schedule", *GEN, "--generate-days", "37", "--levels", LEVELS, "--scaling", "linear",
                            "--runs", "1", "--days", "30", "--step-s", "120"],
    "azure-schedule-linear": ["schedule", *AZ, "--levels", "0.3,0.4,0.5", "--scaling", "linear", "--runs", "1",
                              "--days", "7", "--step-s", "120"],
    "planetlab-schedule-linear": ["schedule", *PL, "--levels", "0.3,0.4,0.5", "--scaling", "linear", "--runs", "1",
                                  "--days", "6", "--history-days", "3", "--step-s", "120"],
    "gen-schedule-root": ["schedule", *GEN, "--generate-days", "37", "--levels", "0.2,0.4,0.6", "--scaling", "root",
                          "--runs", "1", "--days", "30", "--step-s", "120"],
    "gen-schedule-ablation": ["schedule", *GEN, "--generate-days", "21", "--levels", "0.3,0.5", "--scaling", "linear",
                              "--runs", "1", "--days", "14", "--step-s", "120",
                              "--systems", "YARN-Stock,YARN-PT,YARN-PT-spread,YARN-H,YARN-PT-forecast,YARN-H-forecast"],
    "gen2-schedule-linear": ["schedule", "--generate", "5000", "--generate-seed", "2", "--generate-days", "37",
                             "--levels", "0.3,0.5", "--scaling", "linear", "--runs", "1", "--days", "30", "--step-s", "120"],
    "gen3-schedule-linear": ["schedule", "--generate", "5000", "--generate-seed", "3", "--generate-days", "37",
                             "--levels", "0.3,0.5", "--scaling", "linear", "--runs", "1", "--days", "30", "--step-s", "120"],
}

QGEN = ["--generate", "600", "--generate-seed", "1"]
QUICK: dict[str, list[str]] = {
    "quick-gen-schedule-linear": ["schedule", *QGEN, "--levels", "0.3,0.45", "--runs", "2", "--days", "2",
                                  "--step-s", "120"],
    "quick-gen-durability": ["durability", *QGEN, "--replicas", "3,4", "--blocks", "200000", "--runs", "2"],
    "quick-gen-availability": ["availability", *QGEN, "--levels", "0.3,0.45", "--replicas", "3", "--runs", "2",
                               "--blocks", "30000", "--accesses", "200000", "--days", "5"],
}

NOTES = """\
Regenerate with `.venv/bin/python benchmarks/run_results.py` (this page: the {profile} profile; `--profile
full` for more runs and levels, `--quick` for a small version). Each section says when and from which
commit its run finished. The model, its parameters and the choices we made are in [simulator.md](simulator.md);
timings in [bench/sim.md](bench/sim.md). Each check below is computed from the results: **yes**
means the paper's claim reproduces here, **NO** means it does not (see the discussion at the end).
Checks marked *beyond the paper* compare our YARN-H-forecast (class selection plus a per-tenant
headroom forecast) with the paper's YARN-H; *experimental* lines show HDFS-H-risk, a grid variant
that is off by default.
Generated datacenters come from `traces.generate.generate_datacenter(5000, seed=1)` (untuned);
real ones group the public Azure / PlanetLab VMs into tenants (`traces.real`, one tenant per VM,
servers per VM so the datacenter has ~5,000 servers; reimages from the generator's model because no
public reimage trace exists).
"""

DISCUSSION = """\
## Discussion

Numbers below are from the seeded runs above (seed 0; regenerating gives the same results).

**Scheduling: reproduces in direction, at the low end of the paper's size.** On the generated
5,000-server datacenter (a simulated month per point, three runs) YARN-H lowers the average job
time by 9.5-12% at 20-50% primary utilization under linear scaling and 6-11% under root scaling,
and kills 1.5-4x fewer tasks; on the real-trace datacenters the reduction is 11-15% (Azure) and
12-15% (PlanetLab). The paper reports 12-56% on average across its datacenters. At 60% the gain
disappears (linear: 0.5%) or turns into a loss (root: YARN-H 8% slower): the offered batch load (5%
of the cores) then equals what the 33% reserve and the rounded-up primaries leave, queues dominate,
and restricting a job to its classes only adds waiting. Unlike the paper, YARN-PT's job times do
not take off earlier under linear than under root scaling here: the generated tenants are mostly
constant (most tenants, ~35% of the servers) and their periodic ones vary smoothly, so linear
scaling adds less temporal variation than the paper's production tenants had. The job times have
a floor: YARN-Stock, which never kills (and overcommits the primaries instead), averages 3,220 s,
so no primary-aware policy can cut YARN-PT's 3,600-4,500 s (20-60%, linear) by more than ~11-28%.

**Beating the paper's YARN-H: YARN-H-forecast.** Our scheduler keeps class selection as a
preference and adds the policy core's headroom forecast (per tenant and hour of day, the 0.9
quantile of the next hour's peak in the history; see [simulator.md](simulator.md)): a job's
containers go to cores the primary is not expected to take back first, and to the rest only when
those run out. It beats YARN-H at every level of every sweep, on the generated and on both
real-trace datacenters: 1.8-17% lower average job time and 1.0-12.5x fewer killed tasks (largest
at low utilization: 12,487 vs 156,624 kills at 20%, linear). Against YARN-PT it cuts the average
job time by 11-18% (mean 15.2%) under linear and 10-17% (mean 13.4%) under root scaling on the
generated datacenter, 17-20% on Azure and 16-20.5% on PlanetLab tenants, i.e. inside the paper's
12-56% range, and at 30% it is within 1.3% of YARN-Stock's floor (3,263 s vs 3,220 s). The same
holds on two more generated datacenters (`gen2-`, `gen3-schedule-linear`, generator seeds 2 and 3,
one run each): YARN-H-forecast beats YARN-H at every level (1.9-17.5% lower job time, 1.2-10x fewer
kills) and is 10.7-17.2% below YARN-PT.

**Where the gain comes from (ablation, `gen-schedule-ablation`).** YARN-PT-spread is YARN-PT with
YARN-H's server choice (probability proportional to free cores) and no class selection; it matches
YARN-H at 30% (3,372 s vs 3,368 s, with 3.6x fewer kills) and beats it at 50% (3,681 s vs
3,760 s). YARN-PT-forecast is the forecast without class selection; it matches YARN-H-forecast
(3,272 s vs 3,263 s at 30%, 3,434 s vs 3,433 s at 50%). So on these traces class selection adds
nothing measurable on top of a good server choice: the gain of YARN-H over YARN-PT comes from
spreading containers over servers with room (a server filled to its last harvestable core loses a
container whenever its primary grows by one core), and the further gain of YARN-H-forecast from
knowing, per server, which free cores the primary will want back within the hour. We keep class
selection in YARN-H-forecast because it costs nothing here and is what the NodeManager labels
and the Hive router already implement; the forecast is simulator-only so far.

**Durability: reproduces.** On the generated datacenter, with the generator's own year of
reimages (`--reimage-days 365`: per-tenant rates drifting month to month, correlated environment
events), HDFS-Stock lost 473-480 of 4M blocks at 3 replicas (three runs) and 1-3 at 4 replicas
(two runs); HDFS-H lost one block in one of its three runs at 3 replicas (over 1,000x fewer on
average, the paper says more than 100x) and none at 4 replicas, where, as in the paper, HDFS-Stock
still loses some. On the real-trace
datacenters (a month of generated reimages per tenant, extended to a year by the circular
bootstrap of [simulator.md](simulator.md)) HDFS-Stock lost 15 of 1M blocks (Azure tenants) and
HDFS-H none; on the PlanetLab tenants neither system lost any, so that case shows no contrast. A
loss needs every replica inside one burst of reimages before re-replication (30 blocks/hour/
server) catches up; stock HDFS puts two replicas on one remote rack and the writer's replica in the
writer's environment, which a correlated event can take out together, while HDFS-H spreads the
replicas over environments and reimage-frequency rows. HDFS-H pays in repair traffic: it re-created
1.3x (generated year) to 2.8x (bootstrapped year, see [bench/sim.md](bench/sim.md)) more replicas,
because the storage-balanced grid keeps one replica of every block in the most frequently reimaged
third of the storage and re-creates it there.

**Availability: HDFS-H fails 2-200x fewer accesses, but is not failure-free up to 40% at 3 replicas.** On the
generated datacenter at 3 replicas HDFS-H had no failed access at 20%, 1 in a million in one run at
30% and 9 per million at 40%, against 2, 174 and 1,733 per million for HDFS-Stock; at 4 replicas
HDFS-H had none up to 40% while HDFS-Stock had some from 30%, which is the paper's claim. Why not at
3 replicas: computing the exact failure probability over the whole access window, 84% of HDFS-H's
at 40% comes from blocks whose low-peak-column replica sits on an *unpredictable* tenant (5.6% of
that column's servers) that bursts above the busy threshold in the weeks after the 7-day history its
p99 was taken from, while the block's other two replicas sit in hot cells. The experimental
HDFS-H-risk ranks unpredictable tenants by max(p99, mean + 4 std) instead: at 40% it fails 2 per
million instead of 9 (3 replicas), and it is lower at 50-70% and on both real-trace datacenters at
nearly every level, but still not zero, and it is off by default because on a 600-server datacenter
it made things worse (see [simulator.md](simulator.md)). On the
real-trace datacenters HDFS-H fails some accesses from 20% (Azure 4, PlanetLab 16 per million at
3 replicas, vs 258 and 390 for HDFS-Stock): each tenant there is one VM driving ~50 (Azure) or ~11
(PlanetLab) servers in lockstep, and those VMs spike to 100% CPU often, so the peak-CPU columns
cannot find three tenants that are never busy together (at 4 replicas too: at 30%, 9 (Azure) and 42
(PlanetLab) per million; 3-11x fewer than HDFS-Stock at 30-40%). As in the paper, HDFS-H with 3 replicas
is more available than HDFS-Stock with 4 from 30% to 50% on the generated datacenter (not above 50%,
and not on the real-trace ones, where HDFS-Stock with 4 replicas wins from 30%).
"""


def run(name: str, argv: list[str], work: Path, force: bool) -> tuple[str, float, int]:
    out = work / name
    if (out / "results.json").exists() and not force:
        return name, 0.0, 0
    cmd = [*HARVEST, "-v", "sim", *argv, "--out", str(out)]
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with open(work / f"{name}.log", "w") as log:
        log.write(f"# {shlex.join(cmd)}\n# load average at start: {os.getloadavg()}\n")
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.write(f"# load average at end: {os.getloadavg()}\n")
    return name, time.perf_counter() - t0, rc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", choices=("quick", "standard", "full"), default="standard",
                   help="quick: 600-server datacenters (minutes); standard: 5,000 servers, one run per scheduling "
                        "point (~3 h CPU); full: three runs and more levels (~8 h CPU)")
    p.add_argument("--quick", action="store_true", help="the same as --profile quick")
    p.add_argument("--work", default="/tmp/harvest-sim-results", help="where experiment outputs go")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    p.add_argument("--only", help="comma list of experiment names to run")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--force", action="store_true", help="re-run experiments whose results exist")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--notes-file", help="Markdown appended after the generated sections (discussion)")
    args = p.parse_args()
    profile = "quick" if args.quick else args.profile
    plan = {"quick": QUICK, "standard": STANDARD, "full": FULL}[profile]
    if args.only:
        plan = {k: v for k, v in plan.items() if k in args.only.split(",")}
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for name, wall, rc in pool.map(lambda kv: run(kv[0], kv[1], work, args.force), plan.items()):
                print(f"{name}: {'skipped (results exist)' if wall == 0 else f'{wall:.0f} s'}, exit {rc}", flush=True)
    sys.path.insert(0, str(ROOT))
    from placement_service.sim.report import write_report

    dirs = [work / k for k in plan if (work / k / "results.json").exists()]
    tail = DISCUSSION if profile != "quick" else ""
    if args.notes_file:
        tail += "\n" + Path(args.notes_file).read_text()
    path = write_report(dirs, Path(args.out), notes=NOTES.format(profile=profile), tail=tail, title="Simulation results")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
