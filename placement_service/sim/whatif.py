"""``harvest whatif``: from an operator's trace files to one Markdown report with figures.

Steps (each one is an existing command, run in-process with the same flags a user would type, so
the report shows exactly what those commands compute; progress is printed per step):

1. load the data once: its core-weighted mean primary utilization ``U0`` (the level it has) and
   the levels to simulate: ``U0`` and ``U0 +- step`` (clipped to [0.05, 0.85]);
2. ``harvest cluster``: the classes (FFT patterns + K-means) and the 3x3 reimage x peak grid;
3. ``harvest sim schedule`` at those levels: job time and killed tasks, YARN-H-forecast and YARN-H
   against YARN-PT (primary-aware YARN without history);
4. ``harvest sim durability``: lost blocks, HDFS-H against stock HDFS, with the user's reimage log
   or, without one, reimages drawn from the generator's model (the report says which);
5. ``harvest sim availability`` at those levels: failed block accesses, HDFS-H against stock;
6. ``DIR/report.md``: the tables, the figures, and what to configure:
   - reserve (cores kept for the primary, as a fraction of a server): the core-weighted 99th
     percentile of a tenant's CPU rise between two consecutive samples of the export. The agent
     restores the reserve within about a second (docs/agent.md), so the reserve must cover what
     the primary can add faster than that; one export interval (minutes) is an upper bound of that
     window, so this is conservative;
   - replication: the smallest of 3 and 4 at which HDFS-H lost no block and failed no access at
     the data's own level.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from placement_service import HarvestError

logger = logging.getLogger(__name__)

DAY_S = 86400.0
PATTERN_ORDER = ("periodic", "constant", "unpredictable")


class WhatIfError(HarvestError):
    """The what-if inputs cannot support the report (too short a trace, a failed step)."""


@dataclass(frozen=True)
class WhatIfConfig:
    level_step: float = 0.1
    history_days: float = 7.0
    runs: int = 1
    seed: int = 0
    durability_blocks: int = 500_000
    durability_days: float = 365.0
    availability_blocks: int = 100_000
    availability_accesses: int = 500_000
    replicas: tuple[int, ...] = (3, 4)
    # Scheduling time step: 300 s (the simulator's own default is 60 s) keeps a 5,000-server month
    # to minutes; within a step every node's agent still decides once a second until it kills nothing.
    schedule_step_s: float = 300.0
    workers: int = 1  # processes for the simulation points
    name: str | None = None  # the datacenter's name in the report and figures (default: datacenter_name)


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


def run_whatif(
    *,
    utilization: str,
    inventory: str,
    reimages: str | None,
    out: Path,
    config: WhatIfConfig,
    jobs: str | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """Run every step and write ``out/report.md``; returns its path."""
    from placement_service.cli import main as harvest
    from placement_service.sim import datacenter as dcm

    out.mkdir(parents=True, exist_ok=True)
    steps = 6
    t0 = time.perf_counter()

    def step(k: int, what: str) -> None:
        progress(f"[{k}/{steps}] {what} ({time.perf_counter() - t0:.0f} s so far)")

    step(1, "loading the data")
    name = config.name or datacenter_name(utilization)
    dc = dcm.load_datacenter(utilization, inventory, None, name=name)
    days = dc.series.n_slots * dc.series.interval_s / DAY_S
    sim_days = days - config.history_days
    if sim_days < 1.0:
        raise WhatIfError(
            f"{utilization}: {days:.1f} days of samples; the policy learns from {config.history_days:g} days of "
            "history and needs at least one more day to simulate"
        )
    u0 = dc.average_utilization()
    levels = levels_around(u0, config.level_step)
    level_arg = ",".join(f"{x:g}" for x in levels)
    reserve = reserve_fraction(dc.series.cpu, dc.tenant_cores())
    common = ["--utilization", utilization, "--inventory", inventory, "--name", name, "--runs", str(config.runs),
              "--seed", str(config.seed), "--history-days", f"{config.history_days:g}"]

    reimage_note = f"the reimage log {reimages}"
    if reimages is None:
        from placement_service.traces import io
        from placement_service.traces.importer import synthetic_reimages

        start_s = float(dc.series.start_s)
        events = synthetic_reimages(dc.inventory, start_s=start_s, days=config.durability_days, seed=config.seed)
        reimages = str(out / "reimages.synthetic.parquet")
        io.write_reimages(events, reimages)
        reimage_note = (f"{len(events.server)} synthetic reimages drawn from the generator's model over "
                        f"{config.durability_days:g} days (no reimage log was given; docs/generator.md)")

    log_path = out / "whatif.log"
    log_path.write_text("")

    def run(args: Sequence[str], what: str) -> None:
        # Each step's own summary goes to whatif.log; errors still reach stderr.
        with open(log_path, "a") as log, contextlib.redirect_stdout(log):
            print(f"$ harvest {' '.join(args)}", flush=True)
            status = harvest(list(args))
        if status != 0:
            raise WhatIfError(f"{what} failed (exit {status}); see the error above and {log_path}")

    step(2, "clustering the primary tenants")
    classes_path = out / "classes.json"
    run(["cluster", "--utilization", utilization, "--inventory", inventory, "--reimages", reimages,
         "--out", str(classes_path)], "harvest cluster")
    classes = json.loads(classes_path.read_text())
    figures = out / "figures"
    figures.mkdir(exist_ok=True)
    servers_of = dict(zip(dc.series.tenants, dc.tenant_servers().tolist(), strict=True))
    pattern_fig = tenants_figure(dc.series, classes, servers_of, figures / "tenants_by_pattern.png")

    step(3, f"job times at utilization {level_arg} (YARN-PT, YARN-H, YARN-H-forecast)")
    sched_args = ["sim", "schedule", *common, "--levels", level_arg, "--days", f"{sim_days:.3g}",
                  "--step-s", f"{config.schedule_step_s:g}", "--workers", str(config.workers),
                  "--out", str(out / "schedule")]
    if jobs:
        sched_args += ["--jobs", jobs]
    run(sched_args, "harvest sim schedule")

    step(4, f"a {config.durability_days:g}-day durability run ({config.durability_blocks} blocks)")
    run(["sim", "durability", *common, "--reimages", reimages, "--blocks", str(config.durability_blocks),
         "--days", f"{config.durability_days:g}", "--replicas", ",".join(map(str, config.replicas)),
         "--workers", str(config.workers), "--out", str(out / "durability")], "harvest sim durability")

    step(5, f"availability at utilization {level_arg}")
    run(["sim", "availability", *common, "--levels", level_arg, "--days", f"{min(sim_days, 21.0):.3g}",
         "--blocks", str(config.availability_blocks), "--accesses", str(config.availability_accesses),
         "--replicas", ",".join(map(str, config.replicas)), "--systems", "HDFS-Stock,HDFS-H,HDFS-H-hours",
         "--workers", str(config.workers), "--out", str(out / "availability")],
        "harvest sim availability")

    step(6, "writing the report")
    docs = {name: json.loads((out / name / "results.json").read_text())
            for name in ("schedule", "durability", "availability")}
    text = render_report(
        title=name, dc_summary={
            "servers": dc.n_servers, "tenants": dc.n_tenants, "days": days, "u0": u0, "levels": levels,
            "interval_s": dc.series.interval_s, "median_cores": float(np.median(dc.inventory.cores)),
        }, classes=classes, docs=docs, reserve_frac=reserve, reimage_note=reimage_note,
        pattern_fig=pattern_fig.relative_to(out), out=out, config=config,
    )
    report = out / "report.md"
    from placement_service.atomic import atomic_write_text

    atomic_write_text(report, text)
    progress(f"wrote {report} ({time.perf_counter() - t0:.0f} s)")
    return report


# ----------------------------------------------------------------------------------------------
# Figures and the report
# ----------------------------------------------------------------------------------------------


def tenants_figure(series: Any, classes: dict[str, Any], servers_of: dict[str, int], path: Path,
                   per_pattern: int = 3, days: float = 7.0) -> Path:
    """A row per pattern: a week of CPU of the pattern's largest tenants (by servers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tenant_info = classes.get("tenants", {})
    row_of = {t: i for i, t in enumerate(series.tenants)}
    n = min(series.n_slots, int(days * DAY_S / series.interval_s))
    hours = np.arange(n) * series.interval_s / 3600.0
    patterns = [p for p in PATTERN_ORDER if any(v.get("pattern") == p for v in tenant_info.values())]
    fig, axes = plt.subplots(len(patterns) or 1, 1, figsize=(10, 2.6 * max(1, len(patterns))), sharex=True,
                             squeeze=False)
    for ax, pattern in zip(axes[:, 0], patterns, strict=False):
        members = [t for t, v in tenant_info.items() if v.get("pattern") == pattern and t in row_of]
        members.sort(key=lambda t: (-servers_of.get(t, 0), t))
        for t in members[:per_pattern]:
            ax.plot(hours, 100 * series.cpu[row_of[t], :n], lw=0.8, label=t)
        ax.set_title(f"{pattern}: {len(members)} tenants (first {min(per_pattern, len(members))} shown)", fontsize=10)
        ax.set_ylabel("CPU %")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("hours since the first sample")
    fig.suptitle("Primary tenants' CPU by pattern (the tenant's average server)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mean_by(records: Sequence[dict[str, Any]], keys: Sequence[str], metric: str) -> dict[tuple[Any, ...], float]:
    acc: dict[tuple[Any, ...], list[float]] = {}
    for r in records:
        if metric in r:
            acc.setdefault(tuple(r[k] for k in keys), []).append(float(r[metric]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def _figure_links(out: Path, sub: str) -> list[str]:
    return [f"![{p.stem}]({sub}/{p.name})" for p in sorted((out / sub).glob("*.png"))]


def render_report(*, title: str, dc_summary: dict[str, Any], classes: dict[str, Any], docs: dict[str, Any],
                  reserve_frac: float, reimage_note: str, pattern_fig: Path, out: Path, config: WhatIfConfig) -> str:
    s = dc_summary
    lines = [f"# What-if report: {title}", "",
             f"{s['servers']:,} servers in {s['tenants']:,} primary tenants, {s['days']:.1f} days of samples "
             f"every {s['interval_s']:g} s. The data's own core-weighted mean primary utilization is "
             f"**{100 * s['u0']:.1f}%**; the simulations run at {', '.join(f'{100 * x:.0f}%' for x in s['levels'])} "
             f"(the data's level and one step either side, by scaling every tenant's series). The policy learns "
             f"from the first {config.history_days:g} days; {config.runs} run(s) per point, seed {config.seed}.", ""]
    # Classes
    cls = classes.get("classes", [])
    by_pattern: dict[str, list[int]] = {}
    for c in cls:
        v = by_pattern.setdefault(c.get("pattern", "?"), [0, 0, 0])
        v[0] += 1
        v[1] += len(c.get("tenants", []))
        v[2] += int(c.get("servers", 0))
    lines += ["## 1. The primary tenants' classes", "",
              "Each tenant's history is labelled periodic, constant or unpredictable (FFT + autocorrelation), then "
              "grouped into utilization classes (K-means per pattern); jobs are routed to classes whose headroom "
              "fits them.", "", "| pattern | classes | tenants | servers |", "|---|---|---|---|"]
    for p in PATTERN_ORDER:
        if p in by_pattern:
            v = by_pattern[p]
            lines.append(f"| {p} | {v[0]} | {v[1]} | {v[2]:,} |")
    lines += ["", f"![a few tenants per pattern]({pattern_fig.as_posix()})", "",
              "| class | pattern | mean CPU | peak CPU | servers |", "|---|---|---|---|---|"]
    for c in sorted(cls, key=lambda c: -int(c.get("servers", 0)))[:12]:
        lines.append(f"| {c['id']} | {c.get('pattern', '?')} | {100 * c.get('avg_cpu', 0):.0f}% | "
                     f"{100 * c.get('peak_cpu', 0):.0f}% | {int(c.get('servers', 0)):,} |")
    if len(cls) > 12:
        lines.append(f"| ... {len(cls) - 12} more (classes.json) | | | | |")
    lines.append("")
    # Scheduling
    sched = docs["schedule"]["records"]
    jt = _mean_by(sched, ("system", "level"), "avg_job_time_s")
    kills = _mean_by(sched, ("system", "level"), "killed_tasks")
    systems = [x for x in ("YARN-PT", "YARN-H", "YARN-H-forecast") if any(k[0] == x for k in jt)]
    lines += ["## 2. Batch job time and killed tasks", "",
              "YARN-PT is YARN that respects the primary tenants (the agent's reserve) but ignores their history; "
              "YARN-H adds class selection; YARN-H-forecast also prefers servers whose primary is not about to grow. "
              "Lower is better.", "",
              "| utilization | " + " | ".join(f"{x} job time (s)" for x in systems) + " | gain vs YARN-PT | "
              + " | ".join(f"{x} killed tasks" for x in systems) + " |",
              "|---|" + "---|" * (2 * len(systems) + 1)]
    for lvl in s["levels"]:
        base = jt.get(("YARN-PT", lvl))
        best = min((jt[(x, lvl)] for x in systems if (x, lvl) in jt and x != "YARN-PT"), default=None)
        gain = f"{100 * (1 - best / base):.1f}%" if base and best is not None else "-"
        lines.append(f"| {100 * lvl:.0f}% | " + " | ".join(f"{jt.get((x, lvl), float('nan')):,.0f}" for x in systems)
                     + f" | {gain} | " + " | ".join(f"{kills.get((x, lvl), float('nan')):,.0f}" for x in systems) + " |")
    lines += ["", *_figure_links(out, "schedule"), ""]
    # Durability
    dur = docs["durability"]["records"]
    lost = _mean_by(dur, ("system", "replicas"), "lost_blocks")
    lines += ["## 3. Durability: blocks lost to reimages", "",
              f"{config.durability_blocks:,} blocks over {config.durability_days:g} days with {reimage_note}. "
              "Stock HDFS spreads replicas over racks only; HDFS-H also spreads them over tenants that are "
              "reimaged rarely and not together (the 3x3 reimage x peak grid).", "",
              "| replicas | HDFS-Stock lost | HDFS-H lost |", "|---|---|---|"]
    for r in config.replicas:
        lines.append(f"| {r} | {lost.get(('HDFS-Stock', r), float('nan')):,.1f} | {lost.get(('HDFS-H', r), float('nan')):,.1f} |")
    lines += ["", *_figure_links(out, "durability"), ""]
    # Availability
    av = docs["availability"]["records"]
    failed = _mean_by(av, ("system", "replicas", "level"), "failed_accesses")
    accesses = _mean_by(av, ("system", "replicas", "level"), "accesses")
    lines += ["## 4. Availability: block reads that found every replica busy", "",
              "Failed accesses per million reads (a read fails when every replica's server has its primary busy). "
              "HDFS-H-hours (simulator only, not yet in the service) also keeps a block's replicas on tenants "
              "that are not busy at the same hours of the day.", "",
              "| utilization | replicas | HDFS-Stock | HDFS-H | HDFS-H-hours |", "|---|---|---|---|---|"]
    for lvl in s["levels"]:
        for r in config.replicas:
            row = []
            for sysname in ("HDFS-Stock", "HDFS-H", "HDFS-H-hours"):
                n = accesses.get((sysname, r, lvl))
                row.append(f"{1e6 * failed[(sysname, r, lvl)] / n:,.1f}" if n else "-")
            lines.append(f"| {100 * lvl:.0f}% | {r} | {row[0]} | {row[1]} | {row[2]} |")
    lines += ["", *_figure_links(out, "availability"), ""]
    # Recommendations
    u0 = min(s["levels"], key=lambda x: abs(x - s["u0"]))
    replication = None
    for r in sorted(config.replicas):
        ok_lost = lost.get(("HDFS-H", r), 1.0) == 0.0
        ok_av = failed.get(("HDFS-H", r, u0), 1.0) == 0.0
        if ok_lost and ok_av:
            replication = r
            break
    lines += ["## 5. What to configure", "",
              f"- **Agent reserve:** {100 * reserve_frac:.1f}% of each server's cores, e.g. `--reserve-cores "
              f"{math.ceil(10 * reserve_frac * s['median_cores']) / 10:g}` on a {s['median_cores']:g}-core server (the core-weighted "
              f"99th percentile of a tenant's CPU rise between two samples {s['interval_s']:g} s apart; the agent "
              "restores the reserve within about a second, so this is conservative). Round up per hardware type.",
              ("- **HDFS replication:** " + (f"`dfs.replication = {replication}` with the HDFS-H placement: at the data's "
               f"level ({100 * u0:.0f}%) it lost no block and failed no access in these runs." if replication else
               f"none of {', '.join(map(str, config.replicas))} replicas kept HDFS-H at zero lost blocks and zero failed "
               f"accesses at the data's level ({100 * u0:.0f}%): use the highest and lower the harvested utilization, "
               "or keep such data off harvested servers.")),
              "- **Classes:** load `classes.json` into the placement service (`POST /v1/recluster` rebuilds it daily "
              "from live reports) and generate the queues with `harvest capacity-scheduler --classes classes.json`.",
              "", "Every figure above comes from the commands named in `docs/simulator.md`, run by `harvest whatif` "
              "on these files; the raw records are in `schedule/`, `durability/` and `availability/` "
              "(`results.json`, `results.csv`).", ""]
    return "\n".join(lines)
