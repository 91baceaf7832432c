"""The ``harvest whatif`` report: the figure of example tenants and ``report.md`` (``sim/whatif.py`` runs
the steps; this module only reads their records).

What the report says is what the records show, nothing more:

- policy names and whether the service runs them come from ``sim.policy.service_placement`` (the
  service's own configuration defaults), not from text written here;
- failed reads are reads of placed blocks only; blocks that found no space are reported apart;
- the replication advice names a replication only where the runs support it (no lost block and no
  failed read at the data's level); otherwise it states what the runs showed (whether more replicas
  or a lower level reduced the failures) and advises only what those comparisons support.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from placement_service.sim.policy import HdfsSystem, service_placement

DAY_S = 86400.0
PATTERN_ORDER = ("periodic", "constant", "unpredictable")


# ----------------------------------------------------------------------------------------------
# The figure of example tenants
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatternPanel:
    pattern: str
    members: int
    tenants: tuple[str, ...]
    """The tenants shown: those at the 25th, 50th and 75th percentile of the pattern's mean CPU
    (weighted by servers), so the panel shows the pattern's typical range, not an end of the alphabet."""
    ymax_pct: float
    """Top of the y axis (CPU %): the shown series' highest value plus a margin, at most 100."""


def representative(members: Sequence[str], mean_cpu: dict[str, float], servers: dict[str, int],
                   k: int = 3) -> tuple[str, ...]:
    """Up to ``k`` distinct members at evenly spaced server-weighted quantiles of their mean CPU
    (25/50/75% for three); ties by name."""
    order = sorted(members, key=lambda t: (mean_cpu.get(t, 0.0), t))
    if len(order) <= k:
        return tuple(order)
    w = np.array([max(1, servers.get(t, 1)) for t in order], dtype=np.float64)
    cum = (np.cumsum(w) - 0.5 * w) / w.sum()
    picked: list[str] = []
    for q in (np.arange(1, k + 1) / (k + 1)).tolist():
        for i in np.argsort(np.abs(cum - q), kind="stable").tolist():
            if order[i] not in picked:
                picked.append(order[i])
                break
    return tuple(picked)


def pattern_panels(series: Any, classes: dict[str, Any], servers_of: dict[str, int], n_slots: int,
                   per_pattern: int = 3) -> list[PatternPanel]:
    """One panel per pattern present in ``classes`` (``classes.json``), in ``PATTERN_ORDER``."""
    tenant_info = classes.get("tenants", {})
    row_of = {t: i for i, t in enumerate(series.tenants)}
    cpu = np.asarray(series.cpu[:, :n_slots], dtype=np.float64)
    panels = []
    for pattern in PATTERN_ORDER:
        members = [t for t, v in tenant_info.items() if v.get("pattern") == pattern and t in row_of]
        if not members:
            continue
        means = {t: float(np.nan_to_num(np.nanmean(cpu[row_of[t]]))) for t in members}
        shown = representative(members, means, servers_of, per_pattern)
        top = max(float(np.nan_to_num(np.nanmax(cpu[row_of[t]]))) for t in shown)
        ymax = min(100.0, max(1.0, 100.0 * top * 1.15))
        panels.append(PatternPanel(pattern, len(members), shown, ymax))
    return panels


def tenants_figure(series: Any, classes: dict[str, Any], servers_of: dict[str, int], path: Path,
                   per_pattern: int = 3, days: float = 7.0) -> tuple[Path, list[PatternPanel]]:
    """A row per pattern: a week of CPU of representative tenants (``pattern_panels``), each row's
    y axis scaled to the tenants it shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row_of = {t: i for i, t in enumerate(series.tenants)}
    n = min(series.n_slots, int(days * DAY_S / series.interval_s))
    hours = np.arange(n) * series.interval_s / 3600.0
    panels = pattern_panels(series, classes, servers_of, n, per_pattern)
    fig, axes = plt.subplots(len(panels) or 1, 1, figsize=(10, 2.6 * max(1, len(panels))), sharex=True,
                             squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=False):
        for t in panel.tenants:
            ax.plot(hours, 100 * series.cpu[row_of[t], :n], lw=0.8, label=t)
        which = ("all shown" if len(panel.tenants) == panel.members else
                 f"{len(panel.tenants)} shown: the 25th, 50th and 75th percentile of mean CPU")
        ax.set_title(f"{panel.pattern}: {panel.members} tenants ({which})", fontsize=10)
        ax.set_ylabel("CPU %")
        ax.set_ylim(0, panel.ymax_pct)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("hours since the first sample")
    fig.suptitle("Primary tenants' CPU by pattern (the tenant's average server; each row's own scale)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, panels


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------


def _mean_by(records: Sequence[dict[str, Any]], keys: Sequence[str], metric: str) -> dict[tuple[Any, ...], float]:
    acc: dict[tuple[Any, ...], list[float]] = {}
    for r in records:
        if metric in r:
            acc.setdefault(tuple(r[k] for k in keys), []).append(float(r[metric]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def _figure_links(out: Path, sub: str) -> list[str]:
    return [f"![{p.stem}]({sub}/{p.name})" for p in sorted((out / sub).glob("*.png"))]


def _reimage_source(dur: Sequence[dict[str, Any]], note: str) -> str:
    how = {r.get("reimage_source") for r in dur}
    days = max((float(r.get("reimage_source_days", 0.0)) for r in dur), default=0.0)
    if how == {"as-is"}:
        used = f"used as it is ({days:.1f} days of events cover the simulated days)"
    elif how == {"bootstrap"}:
        used = f"bootstrapped from its own {days:.1f}-day span to the simulated days (docs/simulator.md)"
    elif how == {"none"}:
        used = "no event touched an inventory server: nothing could be lost"
    else:
        used = f"used as {', '.join(sorted(str(h) for h in how))}"
    return f"Reimages: {note}; {used} (`reimage_source` in the records)."


def _per_million(failed: dict[tuple[Any, ...], float], accesses: dict[tuple[Any, ...], float],
                 key: tuple[Any, ...]) -> float | None:
    n = accesses.get(key)
    return 1e6 * failed.get(key, 0.0) / n if n else None


def _replication_advice(*, replicas: Sequence[int], levels: Sequence[float], u0: float, system: str,
                        lost: dict[tuple[Any, ...], float], failed: dict[tuple[Any, ...], float],
                        accesses: dict[tuple[Any, ...], float]) -> str:
    """The replication line of section 5: only what the records support (module docstring)."""
    pm = {(r, lv): _per_million(failed, accesses, (system, r, lv)) for r in replicas for lv in levels}
    for r in sorted(replicas):
        if lost.get(("HDFS-H", r)) == 0.0 and pm.get((r, u0)) == 0.0:
            return (f"`dfs.replication = {r}` with {system}: at the data's level ({100 * u0:.0f}%) it lost no block "
                    "and failed no read in these runs.")
    lo_r, hi_r = min(replicas), max(replicas)
    facts = [f"no replication of {', '.join(map(str, sorted(replicas)))} kept {system} at zero lost blocks and "
             f"zero failed reads at the data's level ({100 * u0:.0f}%)"]
    advice: list[str] = []
    a, b = pm.get((lo_r, u0)), pm.get((hi_r, u0))
    if a is not None and b is not None and hi_r != lo_r:
        if b < a:
            facts.append(f"{hi_r} replicas failed fewer reads than {lo_r} ({b:,.1f} against {a:,.1f} per million)")
            advice.append(f"`dfs.replication = {hi_r}` fails the fewest reads of those simulated")
        else:
            facts.append(f"{hi_r} replicas failed no fewer reads than {lo_r} ({b:,.1f} against {a:,.1f} per "
                         "million): replication is not what limits reads here")
    below = [lv for lv in levels if lv < u0]
    if below and b is not None:
        lv = max(below)
        c = pm.get((hi_r, lv))
        if c is not None and c < b:
            facts.append(f"at {100 * lv:.0f}% utilization {hi_r} replicas failed {c:,.1f} per million")
            advice.append("keeping the primary tenants' level lower (or such data off harvested servers) helps")
    lost_h = [lost.get(("HDFS-H", r)) for r in sorted(replicas)]
    if any(x is not None and x > 0 for x in lost_h):
        facts.append("HDFS-H lost " + ", ".join(f"{x:,.1f} at {r}" for r, x in zip(sorted(replicas), lost_h, strict=True)
                                                 if x is not None))
    text = "; ".join(facts) + "."
    return text + (" From these runs: " + "; ".join(advice) + "." if advice else
                   " These runs support no replication setting; see sections 3-4.")


def render_report(*, title: str, dc_summary: dict[str, Any], classes: dict[str, Any], docs: dict[str, Any],
                  reserve_frac: float, reimage_note: str, pattern_fig: Path, out: Path, config: Any,
                  size_notes: Sequence[str] = (), panels: Sequence[PatternPanel] = ()) -> str:
    s = dc_summary
    svc = service_placement()
    lines = [f"# What-if report: {title}", "",
             f"{s['servers']:,} servers in {s['tenants']:,} primary tenants, {s['days']:.1f} days of samples "
             f"every {s['interval_s']:g} s ({s['interval_note']}). The data's own core-weighted mean primary "
             f"utilization is **{100 * s['u0']:.1f}%**; the simulations run at "
             f"{', '.join(f'{100 * x:.0f}%' for x in s['levels'])} (the data's level and one step either side, by "
             f"scaling every tenant's series). The policy learns from the first {config.history_days:g} days; "
             f"{config.runs} run(s) per point, seed {config.seed}.", ""]
    if size_notes:
        lines += ["How much was simulated (sized to this cluster; `harvest whatif --help`):", ""]
        lines += [f"- {n}" for n in size_notes] + [""]
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
    shown = "; ".join(f"{p.pattern}: {', '.join(p.tenants)}" for p in panels)
    lines += ["", f"![representative tenants per pattern]({pattern_fig.as_posix()})", "",
              *([f"Shown (the 25th, 50th and 75th percentile of each pattern's mean CPU): {shown}.", ""] if shown else []),
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
    one = _mean_by(dur, ("system", "replicas"), "one_left")
    unplaced_d = _mean_by(dur, ("system", "replicas"), "failed_placements")
    n_dur = int(max((r.get("blocks", 0) for r in dur), default=0))
    days_d = float(docs["durability"].get("settings", {}).get("days", 365.0))
    lines += ["## 3. Durability: blocks lost to reimages", "",
              f"{n_dur:,} blocks over {days_d:g} days. {_reimage_source(dur, reimage_note)} Stock HDFS spreads "
              "replicas over racks only; HDFS-H also spreads them over tenants that are reimaged rarely and not "
              "together (the 3x3 reimage x peak grid, which every HDFS-H placement of the service uses, "
              f"{svc.system.value} included). *To one replica*: times reimages took a block down to one replica or "
              "none (every lost block was counted there first; a measure of exposure with more events than losses).",
              "", "| replicas | HDFS-Stock lost | HDFS-H lost | HDFS-Stock to one replica | HDFS-H to one replica | "
              "blocks without space |", "|---|---|---|---|---|---|"]
    for r in config.replicas:
        nospace = max(unplaced_d.get(("HDFS-Stock", r), 0.0), unplaced_d.get(("HDFS-H", r), 0.0))
        lines.append(f"| {r} | {lost.get(('HDFS-Stock', r), float('nan')):,.1f} | "
                     f"{lost.get(('HDFS-H', r), float('nan')):,.1f} | {one.get(('HDFS-Stock', r), float('nan')):,.0f} | "
                     f"{one.get(('HDFS-H', r), float('nan')):,.0f} | {nospace:,.0f} |")
    lines += ["", *_figure_links(out, "durability"), ""]
    # Availability
    av = docs["availability"]["records"]
    av_systems = [x.value for x in dict.fromkeys((HdfsSystem.STOCK, HdfsSystem.H, HdfsSystem.H_HOURS, svc.system))
                  if any(r["system"] == x.value for r in av)]
    failed = _mean_by(av, ("system", "replicas", "level"), "failed_accesses")
    accesses = _mean_by(av, ("system", "replicas", "level"), "accesses")
    unplaced = sum(int(r.get("unplaced_blocks", 0)) for r in av)
    described = "; ".join(f"{x}: {svc.describe(HdfsSystem(x))}" for x in av_systems)
    lines += ["## 4. Availability: block reads that found every replica busy", "",
              "Failed reads per million reads of placed blocks (a read fails when every replica's server has its "
              f"primary busy). {described}.", "",
              "| utilization | replicas | " + " | ".join(av_systems) + " |", "|---|---|" + "---|" * len(av_systems)]
    for lvl in s["levels"]:
        for r in config.replicas:
            cells: list[str] = []
            for sysname in av_systems:
                pm = _per_million(failed, accesses, (sysname, r, lvl))
                cells.append(f"{pm:,.1f}" if pm is not None else "-")
            lines.append(f"| {100 * lvl:.0f}% | {r} | " + " | ".join(cells) + " |")
    if unplaced:
        lines += ["", f"**{unplaced:,} block placements found no space** (summed over the runs): those blocks are "
                  "not in the table (`unplaced_blocks`, `unplaced_accesses` in the records); the cluster's storage is "
                  "too small for the simulated blocks."]
    lines += ["", *_figure_links(out, "availability"), ""]
    # Recommendations
    u0 = min(s["levels"], key=lambda x: abs(x - s["u0"]))
    advice_system = svc.system.value if svc.system.value in av_systems else HdfsSystem.H.value
    lines += ["## 5. What to configure", "",
              f"- **Agent reserve:** {100 * reserve_frac:.1f}% of each server's cores, e.g. `--reserve-cores "
              f"{math.ceil(10 * reserve_frac * s['median_cores']) / 10:g}` on a {s['median_cores']:g}-core server (the "
              f"core-weighted 99th percentile of a tenant's CPU rise between two samples {s['interval_s']:g} s apart; "
              "the agent restores the reserve within about a second, so this is conservative). Round up per hardware "
              "type.",
              "- **HDFS replication:** " + _replication_advice(
                  replicas=config.replicas, levels=s["levels"], u0=u0, system=advice_system, lost=lost,
                  failed=failed, accesses=accesses),
              "- **Classes:** load `classes.json` into the placement service (`POST /v1/recluster` rebuilds it daily "
              "from live reports) and generate the queues with `harvest capacity-scheduler --classes classes.json`.",
              "", "Every figure above comes from the simulations named in `docs/simulator.md`, run by `harvest whatif` "
              "on these files; the raw records are in `schedule/`, `durability/` and `availability/` "
              "(`results.json`, `results.csv`).", ""]
    return "\n".join(lines)
