"""Cluster the public Azure and PlanetLab CPU traces (each VM a tenant) and report patterns and classes.

Usage (from the repository root):

    .venv/bin/python benchmarks/report_real_classes.py [--data-dir ../shared/data/cpu] [--write-docs] [--figure]

For each dataset it loads the trace with ``placement_service.traces.real``, builds the tenants'
series with ``tenant_series`` (5-minute slots), fits ``UtilizationClustering`` with its defaults and
prints a markdown section: tenants per pattern, and each class's size, average and peak CPU. With
``--write-docs`` the section replaces the part of ``docs/clustering.md`` between the markers
``<!-- real-classes:begin -->`` and ``<!-- real-classes:end -->``.

Data (see ``../shared/data/README.md``): Azure Public Dataset V1 (CC-BY-4.0, "Resource Central",
Cortez et al., SOSP 2017) as repackaged by github.com/carlonlv/DataCenterSim; PlanetLab CoMon traces
from CloudSim (Apache-2.0). Not part of the tests: tests use the excerpt in tests/fixtures/clustering.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from placement_service.core.clustering import UtilizationClustering
from placement_service.core.patterns import filled_chunks
from placement_service.core.types import Pattern, TenantSeries
from placement_service.traces.real import load_azure_wide, load_planetlab
from placement_service.traces.series import tenant_series

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "clustering.md"
BEGIN, END = "<!-- real-classes:begin -->", "<!-- real-classes:end -->"

DATASETS: tuple[tuple[str, str, str, int], ...] = (
    ("Azure V1, 100 random VMs (average CPU)", "azure_v1_microsoft_avg_100.csv.gz", "azure", 0),
    (
        "Azure V1, 78 VMs labelled periodic by the repackager (average CPU)",
        "azure_v1_periodic_avg_78.csv.gz",
        "azure",
        0,
    ),
    (
        "Azure V1, the same 100 VMs, maximum CPU per 5 minutes",
        "azure_v1_microsoft_max_100.csv.gz",
        "azure",
        0,
    ),
    ("Azure V1, the same 78 VMs, maximum CPU per 5 minutes", "azure_v1_periodic_max_78.csv.gz", "azure", 0),
    (
        "PlanetLab (CoMon), VMs present on >= 7 of the 10 days (days laid end to end, absent days missing)",
        "planetlab_cloudsim_5min.csv.gz",
        "planetlab",
        7,
    ),
    (
        "PlanetLab (CoMon), every VM (most are present on 1-3 days only)",
        "planetlab_cloudsim_5min.csv.gz",
        "planetlab",
        1,
    ),
)


def load(path: Path, kind: str, min_days: int) -> TenantSeries:
    if kind == "azure":
        samples = load_azure_wide(path)
    else:
        samples = load_planetlab(path, timeline="compact", min_days=min_days)
    return tenant_series(samples, interval_s=300.0)


def repackager_periods(path: Path) -> dict[str, str]:
    """Tenant (``az-<vmid>``) -> the period label (hours) in the periodic excerpt's column names."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")[1:]
    out: dict[str, str] = {}
    for col in header:
        vm, _, period = col.partition(" ")
        out.setdefault(f"az-{vm}", f"{period} h" if period else "none")
    return out


RECALL: list[tuple[str, int, int, int]] = []  # (dataset, periodic by the ACF labelling, by ours, both)


def full_acf(block: np.ndarray) -> np.ndarray:
    """Autocorrelation of each row at every lag 0..T-1 (zero-padded FFT, unbiased by the overlap)."""
    y = block - block.mean(axis=1, keepdims=True)
    n = y.shape[1]
    f = np.fft.rfft(y, n=2 * n, axis=1)
    ac = np.fft.irfft(np.abs(f) ** 2, axis=1)[:, :n] / (n - np.arange(n))
    return ac / np.where(ac[:, :1] > 0, ac[:, :1], 1.0)


def acf_reference(series: TenantSeries) -> np.ndarray:
    """The second method the detector is checked against: autocorrelation only, whole lag range.

    Periodic when, for P = 1 d or 7 d (7 d only with 3 weeks of data), the autocorrelation at P is
    >= 0.5, within 0.05 of its maximum over P +- 10%, and >= 0.1 above its minimum over [P/2, 0.9 P]
    (a peak, not the slow fall of a drift). Missing slots count as the series mean.
    """
    out = np.zeros(len(series.tenants), dtype=bool)
    for lo, hi, block, _, _ in filled_chunks(series.cpu, 64):
        ac = full_acf(block.astype(np.float64))
        for period_s in (86400.0, 7 * 86400.0):
            p = round(period_s / series.interval_s)
            if 3 * p > series.n_slots:
                continue
            w = max(1, p // 10)
            at = ac[:, p]
            peak = at >= ac[:, p - w : p + w + 1].max(axis=1) - 0.05
            valley = ac[:, p // 2 : p - w].min(axis=1)
            out[lo:hi] |= (at >= 0.5) & peak & (at - valley >= 0.1)
    return out


def section(title: str, path: Path, kind: str, min_days: int) -> str:
    t0 = time.perf_counter()
    series = load(path, kind, min_days)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = UtilizationClustering(random_state=0).fit(series)
    t_fit = time.perf_counter() - t0
    counts = Counter(model.patterns_.values())
    profile = model.profile_
    nan_frac = float(np.isnan(series.cpu).mean())
    lines = [
        f"### {title}",
        "",
        f"`{path.name}`: {len(series.tenants)} VMs (tenants), {series.n_slots} slots of "
        f"{series.interval_s:g} s ({series.n_slots * series.interval_s / 86400:.1f} days), "
        f"{100 * nan_frac:.2f}% of slots missing after gap filling; loaded in {t_load:.1f} s, "
        f"clustered in {t_fit:.2f} s.",
        "",
        "| pattern | tenants | share | classes |",
        "|---|---:|---:|---:|",
    ]
    for p in Pattern:
        n_classes = sum(1 for c in model.classes_ if c.pattern is p)
        lines.append(
            f"| {p.value} | {counts[p]} | {100 * counts[p] / len(series.tenants):.0f}% | {n_classes} |"
        )
    lines += ["", "| class | tenants | avg CPU | peak CPU (p99) | current CPU |", "|---|---:|---:|---:|---:|"]
    for c in model.classes_:
        lines.append(
            f"| `{c.id}` | {len(c.tenants)} | {c.avg_cpu:.3f} | {c.peak_cpu:.3f} | {c.current_cpu:.3f} |"
        )
    periodic = np.array([model.patterns_[t] is Pattern.PERIODIC for t in series.tenants])
    if periodic.any():
        weekly = int(np.sum(profile.weekly_energy_frac[periodic] > profile.daily_energy_frac[periodic]))
        lines += [
            "",
            f"Of the {int(periodic.sum())} periodic tenants, {weekly} have more weekly than daily energy. "
            f"Median share of signal energy at the daily/weekly harmonics: periodic "
            f"{np.median(profile.periodic_energy_frac[periodic]):.2f}, others "
            f"{np.median(profile.periodic_energy_frac[~periodic]):.2f}.",
        ]
    ref = acf_reference(series)
    tp = int(np.sum(ref & periodic))
    precision = f"{tp / periodic.sum():.2f}" if periodic.any() else "n/a"
    recall = f"{tp / ref.sum():.2f}" if ref.any() else "n/a"
    lines += [
        "",
        f"Against the autocorrelation labelling (`acf_reference`): {int(ref.sum())} periodic by it, "
        f"{int(periodic.sum())} by the detector, {tp} by both: precision {precision}, recall {recall}.",
    ]
    RECALL.append((title, int(ref.sum()), int(periodic.sum()), tp))
    if "periodic" in path.name:
        labels = repackager_periods(path)
        cross = Counter((labels.get(t, "none"), model.patterns_[t].value) for t in series.tenants)
        periods = sorted({k[0] for k in cross}, key=lambda s: float(s.split()[0]) if s[0].isdigit() else 1e9)
        lines += [
            "",
            "The repackager's period label against our pattern (tenants):",
            "",
            "| label | " + " | ".join(p.value for p in Pattern) + " |",
            "|---|" + "---:|" * len(Pattern),
        ]
        for period in periods:
            lines.append(f"| {period} | " + " | ".join(str(cross[(period, p.value)]) for p in Pattern) + " |")
    return "\n".join(lines) + "\n"


def figure(data: Path) -> Path:
    """Time series (first 7 days) and power spectrum of three Azure VMs, one per pattern."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = load(data / "azure_v1_microsoft_avg_100.csv.gz", "azure", 0)
    model = UtilizationClustering(random_state=0).fit(series)
    picks = {"az-942980": None, "az-633346": None, "az-1663289": None}
    index = {t: i for i, t in enumerate(series.tenants)}
    fig, axes = plt.subplots(len(picks), 2, figsize=(11, 7), constrained_layout=True)
    days = series.n_slots * series.interval_s / 86400.0
    for row, tenant in enumerate(picks):
        x = np.nan_to_num(series.cpu[index[tenant]], nan=float(np.nanmean(series.cpu[index[tenant]])))
        t_days = np.arange(series.n_slots) * series.interval_s / 86400.0
        week = t_days <= 7.0
        axes[row, 0].plot(t_days[week], x[week], lw=0.6)
        axes[row, 0].set_ylabel("CPU fraction")
        axes[row, 0].set_title(f"{tenant}: {model.patterns_[tenant].value}", fontsize=10)
        power = np.abs(np.fft.rfft(x - x.mean())) ** 2
        k = np.arange(1, min(len(power), 200))
        axes[row, 1].plot(k, power[k], lw=0.7)
        axes[row, 1].axvline(days, color="tab:red", lw=0.8, ls="--")
        axes[row, 1].set_ylabel("power")
        axes[row, 1].set_title(
            f"spectrum (daily harmonic energy share {model.profile_.periodic_energy_frac[index[tenant]]:.2f})",
            fontsize=10,
        )
    axes[-1, 0].set_xlabel("days")
    axes[-1, 1].set_xlabel(f"cycles per {days:.1f}-day series (dashed: one per day)")
    out = REPO / "docs" / "figures" / "clustering" / "azure_patterns.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "cpu"))
    parser.add_argument("--write-docs", action="store_true", help=f"replace the report section in {DOC}")
    parser.add_argument(
        "--figure", action="store_true", help="also draw docs/figures/clustering/azure_patterns.png"
    )
    args = parser.parse_args(argv)
    data = Path(args.data_dir)
    if args.figure:
        print(f"wrote {figure(data)}", file=sys.stderr)
    parts = [
        "Produced by `.venv/bin/python benchmarks/report_real_classes.py --write-docs --figure` "
        "(default settings of `UtilizationClustering`, seed 0).",
        "",
    ]
    for title, name, kind, min_days in DATASETS:
        path = data / name
        if not path.exists():
            print(f"skipping {path}: not found", file=sys.stderr)
            continue
        parts.append(section(title, path, kind, min_days))
        print(parts[-1])
    parts += [
        "### Periodic detection against the autocorrelation labelling",
        "",
        "| dataset | periodic (ACF labelling) | periodic (detector) | both | precision | recall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for title, n_ref, n_det, both in RECALL:
        prec = f"{both / n_det:.2f}" if n_det else "n/a"
        rec = f"{both / n_ref:.2f}" if n_ref else "n/a"
        parts.append(f"| {title} | {n_ref} | {n_det} | {both} | {prec} | {rec} |")
    parts.append("")
    text = "\n".join(parts)
    if args.write_docs:
        doc = DOC.read_text(encoding="utf-8")
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{DOC}: markers {BEGIN} / {END} not found")
        new = re.sub(
            re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: f"{BEGIN}\n{text}\n{END}", doc, flags=re.S
        )
        tmp = DOC.with_suffix(".md.tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(DOC)
        print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
