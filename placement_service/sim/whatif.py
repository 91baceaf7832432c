"""``harvest whatif``: from an operator's trace files to one Markdown report with figures.

Steps (each one an existing command with the flags a user would type, so the report shows exactly
what those commands compute; progress with the elapsed time goes to stderr, and within each
simulation one line per finished run with an estimate of the time it has left):

1. load the trace once (``--interval-s`` overrides the inferred sampling interval): its
   core-weighted mean primary utilization ``U0`` and the levels to simulate, ``U0`` and
   ``U0 +- step`` (clipped to [0.05, 0.85]); the durability and availability runs sized to the
   cluster (``sim/whatif_size.py``: blocks per server within the storage, or a refusal that says
   why), which the report states;
2. ``harvest cluster``: the classes (FFT patterns + K-means) and the 3x3 reimage x peak grid;
3. ``harvest sim schedule`` at those levels: job time and killed tasks, YARN-H-forecast and YARN-H
   against YARN-PT (primary-aware YARN without history);
4. ``harvest sim durability``: lost blocks, HDFS-H against stock HDFS, with the user's reimage log
   or, without one, reimages drawn from the generator's model (the report says which, and whether
   the log was used as it is or bootstrapped); HDFS-H's new blocks placed in daily batches;
5. ``harvest sim availability`` at those levels: failed reads of placed blocks (blocks that found
   no space reported apart), stock HDFS, HDFS-H, HDFS-H-hours and the placement service's default
   (``availability_systems``: HDFS-H-cobusy with the default settings);
6. ``DIR/report.md`` (``sim/whatif_report.py``): the tables, the figures, and what to configure:
   - reserve (cores kept for the primary, as a fraction of a server): the core-weighted 99th
     percentile of a tenant's CPU rise between two consecutive samples of the export. The agent
     restores the reserve within about a second (docs/agent.md), so the reserve must cover what
     the primary can add faster than that; one export interval (minutes) is an upper bound of that
     window, so this is conservative;
   - replication: the smallest of 3 and 4 at which HDFS-H lost no block and the service's default
     placement failed no read at the data's own level, or what the runs showed instead.

Steps 3-5 run in this process on the datacenter loaded in step 1 and share one clustering per
level (``sim.run.SharedInputs``); their flags are parsed by the same parser as ``harvest sim``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement_service import HarvestError

logger = logging.getLogger(__name__)

DAY_S = 86400.0


class WhatIfError(HarvestError):
    """The what-if inputs cannot support the report (too short a trace, a failed step)."""


def availability_systems() -> list[str]:
    """HDFS-Stock, HDFS-H, HDFS-H-hours and the placement service's default (``core.service_defaults``)."""
    from placement_service.sim.systems import service_placement

    systems = ["HDFS-Stock", "HDFS-H", "HDFS-H-hours"]
    default = service_placement().system.value
    return systems if default in systems else [*systems, default]


@dataclass(frozen=True)
class WhatIfConfig:
    level_step: float = 0.1
    history_days: float = 7.0
    runs: int = 1
    seed: int = 0
    durability_blocks: int | None = None  # None: sized to the cluster (sim/whatif_size.py)
    durability_days: float = 365.0
    availability_blocks: int | None = None  # None: sized to the cluster
    replicas: tuple[int, ...] = (3, 4)
    block_size_mb: float = 256.0
    # Scheduling time step: 300 s (the simulator's own default is 60 s) keeps a 5,000-server month
    # to minutes; within a step every node's agent still decides once a second until it kills nothing.
    schedule_step_s: float = 300.0
    workers: int = 1  # processes for the simulation points
    name: str | None = None  # the datacenter's name in the report and figures (default: datacenter_name)
    interval_s: float | None = None  # seconds between samples (None: inferred from the timestamps)


def datacenter_name(utilization: str | Path) -> str:
    """The name figures and the report give the data: the file's stem, or its folder's name when
    the file has the generic name of ``harvest import`` (``mydc/utilization.parquet`` -> ``mydc``)."""
    path = Path(utilization).resolve()
    return path.parent.name if path.stem == "utilization" and path.parent.name else path.stem


def levels_around(u0: float, step: float) -> list[float]:
    """``U0`` and one level either side, inside [0.05, 0.85], rounded to 0.01, without repeats."""
    out: list[float] = []
    for x in (u0 - step, u0, u0 + step):
        v = round(min(0.85, max(0.05, x)), 2)
        if v not in out:
            out.append(v)
    return out


def reserve_fraction(cpu: np.ndarray, weights: np.ndarray, quantile: float = 0.99) -> float:
    """Core-weighted ``quantile`` of the rise of each tenant's CPU between consecutive samples."""
    rise = np.diff(np.asarray(cpu, dtype=np.float64), axis=1)
    rise = np.where(np.isnan(rise), 0.0, np.maximum(rise, 0.0))
    per_tenant = np.quantile(rise, quantile, axis=1) if rise.shape[1] else np.zeros(len(cpu))
    w = np.asarray(weights, dtype=np.float64)
    return float((per_tenant * w).sum() / w.sum())


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_whatif(
    *,
    utilization: str,
    inventory: str,
    reimages: str | None,
    out: Path,
    config: WhatIfConfig,
    jobs: str | None = None,
    progress: Callable[[str], None] = _stderr,
) -> Path:
    """Run every step and write ``out/report.md``; returns its path. Progress (with the elapsed
    time, and within each simulation an estimate of the time it has left) goes to ``progress``."""
    from placement_service.cli import build_parser
    from placement_service.cli import main as harvest
    from placement_service.sim import datacenter as dcm
    from placement_service.sim.run import SharedInputs
    from placement_service.sim.whatif_report import render_report, tenants_figure
    from placement_service.sim.whatif_size import SizeError, size_runs

    out.mkdir(parents=True, exist_ok=True)
    steps = 6
    t0 = time.perf_counter()

    def step(k: int, what: str) -> None:
        progress(f"[{k}/{steps}] {what} ({time.perf_counter() - t0:.0f} s so far)")

    # 1. One load of the trace for the three simulations (and one clustering per level: SharedInputs).
    step(1, "loading the data")
    name = config.name or datacenter_name(utilization)
    dc = dcm.load_datacenter(utilization, inventory, reimages, name=name, interval_s=config.interval_s)
    days = dc.series.n_slots * dc.series.interval_s / DAY_S
    sim_days = days - config.history_days
    if sim_days < 1.0:
        raise WhatIfError(
            f"{utilization}: {days:.1f} days of samples; the policy learns from {config.history_days:g} days of "
            "history and needs at least one more day to simulate"
        )
    try:
        size = size_runs(dc.inventory, replicas=config.replicas, block_size_mb=config.block_size_mb,
                         sim_days=sim_days, durability_days=config.durability_days,
                         durability_blocks=config.durability_blocks, availability_blocks=config.availability_blocks)
    except SizeError as exc:
        raise WhatIfError(f"{inventory}: {exc}") from None
    u0 = dc.average_utilization()
    levels = levels_around(u0, config.level_step)
    level_arg = ",".join(f"{x:g}" for x in levels)
    reserve = reserve_fraction(dc.series.cpu, dc.tenant_cores())
    interval_args = ["--interval-s", f"{config.interval_s:g}"] if config.interval_s is not None else []
    common = ["--utilization", utilization, "--inventory", inventory, "--name", name, "--runs", str(config.runs),
              "--seed", str(config.seed), "--history-days", f"{config.history_days:g}", *interval_args]
    interval_note = ("given with --interval-s" if config.interval_s is not None
                     else "inferred from the timestamps; --interval-s corrects it")

    reimage_note = f"the reimage log {reimages}"
    if reimages is None:
        from placement_service.traces import io
        from placement_service.traces.importer import synthetic_reimages

        start_s = float(dc.series.start_s)
        events = synthetic_reimages(dc.inventory, start_s=start_s, days=config.durability_days, seed=config.seed)
        reimages = str(out / "reimages.synthetic.parquet")
        io.write_reimages(events, reimages)
        dc = dataclasses.replace(dc, reimages=events, reimage_window_s=config.durability_days * DAY_S)
        reimage_note = (f"{len(events.server)} synthetic reimages drawn from the generator's model over "
                        f"{config.durability_days:g} days (no reimage log was given; docs/generator.md)")
    shared = SharedInputs(dc, config.seed)

    log_path = out / "whatif.log"
    log_path.write_text("")

    def run(args: Sequence[str], what: str) -> None:
        # Each step's own summary goes to whatif.log; errors still reach stderr.
        with open(log_path, "a") as log, contextlib.redirect_stdout(log):
            print(f"$ harvest {' '.join(args)}", flush=True)
            if args[0] == "sim":  # in-process on the loaded datacenter, the flags parsed as typed
                parsed = build_parser().parse_args(list(args))
                status = parsed.func(parsed, dc=dc, shared=shared)
            else:
                status = harvest(list(args))
        if status != 0:
            raise WhatIfError(f"{what} failed (exit {status}); see the error above and {log_path}")

    step(2, "clustering the primary tenants")
    classes_path = out / "classes.json"
    run(["cluster", "--utilization", utilization, "--inventory", inventory, "--reimages", reimages,
         *interval_args, "--out", str(classes_path)], "harvest cluster")
    classes = json.loads(classes_path.read_text())
    figures = out / "figures"
    figures.mkdir(exist_ok=True)
    servers_of = dict(zip(dc.series.tenants, dc.tenant_servers().tolist(), strict=True))
    pattern_fig, panels = tenants_figure(dc.series, classes, servers_of, figures / "tenants_by_pattern.png")

    step(3, f"job times at utilization {level_arg} (YARN-PT, YARN-H, YARN-H-forecast)")
    sched_args = ["sim", "schedule", *common, "--levels", level_arg, "--days", f"{sim_days:.3g}",
                  "--step-s", f"{config.schedule_step_s:g}", "--workers", str(config.workers),
                  "--out", str(out / "schedule")]
    if jobs:
        sched_args += ["--jobs", jobs]
    run(sched_args, "harvest sim schedule")

    replicas = ",".join(map(str, config.replicas))
    step(4, f"a {size.durability_days:g}-day durability run ({size.durability_blocks:,} blocks)")
    run(["sim", "durability", *common, "--reimages", reimages, "--blocks", str(size.durability_blocks),
         "--days", f"{size.durability_days:g}", "--replicas", replicas, "--block-size-mb", f"{config.block_size_mb:g}",
         "--place-every-s", f"{DAY_S:g}", "--workers", str(config.workers), "--out", str(out / "durability")],
        "harvest sim durability")

    step(5, f"availability at utilization {level_arg} ({size.availability_blocks:,} blocks)")
    run(["sim", "availability", *common, "--levels", level_arg, "--days", f"{size.availability_days:.3g}",
         "--blocks", str(size.availability_blocks), "--accesses", str(size.availability_accesses),
         "--replicas", replicas, "--block-size-mb", f"{config.block_size_mb:g}",
         "--systems", ",".join(availability_systems()),
         "--workers", str(config.workers), "--out", str(out / "availability")],
        "harvest sim availability")

    step(6, "writing the report")
    docs = {name: json.loads((out / name / "results.json").read_text())
            for name in ("schedule", "durability", "availability")}
    text = render_report(
        title=name, dc_summary={
            "servers": dc.n_servers, "tenants": dc.n_tenants, "days": days, "u0": u0, "levels": levels,
            "interval_s": dc.series.interval_s, "interval_note": interval_note,
            "median_cores": float(np.median(dc.inventory.cores)),
        }, classes=classes, docs=docs, reserve_frac=reserve, reimage_note=reimage_note,
        pattern_fig=pattern_fig.relative_to(out), out=out, config=config, size_notes=size.notes, panels=panels,
    )
    report = out / "report.md"
    from placement_service.atomic import atomic_write_text

    atomic_write_text(report, text)
    progress(f"wrote {report} ({time.perf_counter() - t0:.0f} s)")
    return report
