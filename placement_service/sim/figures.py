"""PNG figures in the style of the paper's Figures 13-16 (matplotlib, Agg backend, atomic writes).

- ``schedule_job_time.png``: average job time vs average utilization, one line per (system,
  scaling), points = mean over runs, bars = min..max over runs (Figure 13);
- ``schedule_killed.png``: killed tasks vs utilization, same layout;
- ``schedule_improvement.png``: YARN-H's (and YARN-H-forecast's) job-time reduction over YARN-PT per
  level, min / mean / max over runs (Figure 14, one datacenter);
- ``durability_lost.png``: lost blocks (% of blocks, log scale) per (system, replicas), bars =
  mean, whiskers = min..max; no bar = no loss in any run (Figure 15);
- ``availability_failed.png``: failed accesses (%) vs utilization per (system, replicas)
  (Figure 16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from placement_service.atomic import atomic_path

IMPROVED_SYSTEMS = ("YARN-H", "YARN-H-forecast")
"""Systems whose job-time reduction against YARN-PT the figures and the report show."""

Record = Mapping[str, Any]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight")
    finally:
        _plt().close(fig)
    return path


def _groups(records: Sequence[Record], keys: Sequence[str]) -> dict[tuple[Any, ...], list[Record]]:
    out: dict[tuple[Any, ...], list[Record]] = {}
    for r in records:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def _line_stats(rows: Sequence[Record], x: str, y: str) -> tuple[np.ndarray, ...]:
    """Per level: mean x, mean y, min y, max y (sorted by level)."""
    by_level = _groups(rows, ["level"])
    levels = sorted(by_level, key=lambda k: float(k[0]))
    xs, ym, ylo, yhi = [], [], [], []
    for lv in levels:
        rs = by_level[lv]
        vals = np.array([float(r[y]) for r in rs])
        xs.append(float(np.mean([float(r[x]) for r in rs])))
        ym.append(vals.mean())
        ylo.append(vals.min())
        yhi.append(vals.max())
    return np.array(xs), np.array(ym), np.array(ylo), np.array(yhi)


def _errorbar_lines(ax: Any, records: Sequence[Record], keys: Sequence[str], y: str, scale: float = 1.0) -> None:
    for key, rows in sorted(_groups(records, keys).items(), key=lambda kv: str(kv[0])):
        xs, ym, ylo, yhi = _line_stats(rows, "utilization", y)
        label = " / ".join(str(k) for k in key if k is not None)
        ax.errorbar(
            100 * xs, ym * scale, yerr=[(ym - ylo) * scale, (yhi - ym) * scale], marker="o", capsize=3, label=label
        )


def schedule_figures(records: Sequence[Record], out_dir: str | Path, title: str = "") -> list[Path]:
    plt = _plt()
    out = Path(out_dir)
    paths = []
    for name, metric, ylabel, scale in (
        ("schedule_job_time.png", "avg_job_time_s", "average job time (min)", 1 / 60.0),
        ("schedule_killed.png", "killed_tasks", "killed tasks", 1.0),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _errorbar_lines(ax, records, ["system", "scaling"], metric, scale)
        ax.set_xlabel("average primary CPU utilization (%)")
        ax.set_ylabel(ylabel)
        ax.set_title(title or "scheduling")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / name))
    pairs = paired_gains(records)
    if pairs:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _errorbar_lines(ax, pairs, ["system", "scaling"], "gain")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("average primary CPU utilization (%)")
        ax.set_ylabel("job time reduction vs YARN-PT (%)")
        ax.set_title(title or "scheduling")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / "schedule_improvement.png"))
    return paths


def durability_figures(records: Sequence[Record], out_dir: str | Path, title: str = "") -> list[Path]:
    plt = _plt()
    groups = _groups(records, ["replicas", "system"])
    keys = sorted(groups, key=lambda k: (int(k[0]), str(k[1])))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels, means, lo, hi = [], [], [], []
    for k in keys:
        vals = np.array([float(r["lost_pct"]) for r in groups[k]])
        labels.append(f"{k[1]}\n{k[0]} replicas")
        means.append(vals.mean())
        lo.append(vals.min())
        hi.append(vals.max())
    pos = np.arange(len(keys))
    m = np.array(means)
    floor = 1e-7
    shown = np.where(m > 0, m, np.nan)
    ax.bar(pos, shown, color=["tab:red" if "Stock" in str(k[1]) else "tab:blue" for k in keys])
    low = np.maximum(np.array(lo), floor)  # a run without loss sits at the axis floor on a log scale
    ax.errorbar(pos, shown, yerr=[np.maximum(m - low, 0.0), np.array(hi) - m], fmt="none", ecolor="k", capsize=4)
    for p, v in zip(pos, m, strict=True):
        if v <= 0:
            ax.text(p, floor * 2, "no loss", ha="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xticks(pos, labels, fontsize=8)
    ax.set_ylabel("lost blocks (% of blocks)")
    ax.set_title(title or "durability (one year)")
    ax.grid(alpha=0.3, axis="y")
    return [_save(fig, Path(out_dir) / "durability_lost.png")]


def availability_figures(records: Sequence[Record], out_dir: str | Path, title: str = "") -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    _errorbar_lines(ax, records, ["system", "replicas"], "failed_access_pct")
    ax.set_xlabel("average primary CPU utilization (%)")
    ax.set_ylabel("failed accesses (%)")
    ax.set_title(title or "availability")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, Path(out_dir) / "availability_failed.png")]


def paired_gains(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Job-time reduction of YARN-H and YARN-H-forecast against YARN-PT, ``100 * (1 - X / PT)``, one
    entry per record of those systems paired with YARN-PT's record of the same (scaling, level, run)."""
    pt = {(r.get("scaling"), r["level"], r["run"]): r for r in records if r["system"] == "YARN-PT"}
    return [
        {
            "system": r["system"], "scaling": r.get("scaling"), "level": r["level"], "run": r["run"],
            "utilization": r["utilization"],
            "gain": 100.0 * (1.0 - r["avg_job_time_s"] / pt[k]["avg_job_time_s"]),
        }
        for r in records
        if r["system"] in IMPROVED_SYSTEMS
        and (k := (r.get("scaling"), r["level"], r["run"])) in pt
        and pt[k]["avg_job_time_s"] > 0
    ]


def improvement_rows(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per schedule result (name, doc), system (YARN-H, YARN-H-forecast) and scaling: min / mean / max
    over levels and runs of :func:`paired_gains`."""
    rows = []
    for name, doc in docs:
        by_key: dict[tuple[str, str], list[float]] = {}
        for g in paired_gains(doc["records"]):
            by_key.setdefault((g["system"], str(g["scaling"])), []).append(g["gain"])
        for (system, scaling), gains in sorted(by_key.items(), key=lambda kv: (kv[0][1], IMPROVED_SYSTEMS.index(kv[0][0]))):
            rows.append({"name": name, "datacenter": doc["datacenter"], "system": system, "scaling": scaling,
                         "min": min(gains), "mean": float(np.mean(gains)), "max": max(gains), "points": len(gains)})
    return rows


def improvement_figure(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Bars of the mean reduction per (datacenter, scaling), whiskers min..max (Figure 14 style)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7.0, 0.7 * len(rows)), 4.6))
    pos = np.arange(len(rows))
    mean = np.array([r["mean"] for r in rows])
    lo = np.array([r["min"] for r in rows])
    hi = np.array([r["max"] for r in rows])
    colors = {("YARN-H", "linear"): "tab:blue", ("YARN-H", "root"): "tab:green",
              ("YARN-H-forecast", "linear"): "tab:orange", ("YARN-H-forecast", "root"): "tab:red"}
    ax.bar(pos, mean, color=[colors.get((r.get("system", "YARN-H"), r["scaling"]), "tab:gray") for r in rows])
    ax.errorbar(pos, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor="k", capsize=4)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(pos, [f"{r['name']}\n{r.get('system', 'YARN-H')} {r['scaling']}" for r in rows], fontsize=6,
                  rotation=30, ha="right")
    ax.set_ylabel("job time reduction vs YARN-PT (%)")
    ax.set_title("min / mean / max over utilization levels and runs")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, Path(path))


def figures_for(doc: Mapping[str, Any], out_dir: str | Path, title: str = "") -> list[Path]:
    """The figures of one ``results.json`` document."""
    records = doc["records"]
    kind = doc["experiment"]
    if kind == "schedule":
        return schedule_figures(records, out_dir, title)
    if kind == "durability":
        return durability_figures(records, out_dir, title)
    if kind == "availability":
        return availability_figures(records, out_dir, title)
    raise ValueError(f"unknown experiment {kind!r}")
