"""The service model on the TrainTicket day: residual per service (like the paper's Figure 11) and the
held-out check, for docs/flux.md.

Fits ``harvest flux model`` on ``../shared/data/flux/nezha_trainticket/2023-01-29`` and draws
``model_residuals.png``: per service, the aggregate residual sum |delta| / sum c over the training
windows under each demand metric, and the error on held-out windows of the kept metric next to a
constant predictor (the peak-window CPU). Prints the Markdown table.

    nice -n 10 .venv/bin/python benchmarks/bench_flux_model.py --out-dir docs/figures/flux
    nice -n 10 .venv/bin/python benchmarks/bench_flux_model.py --next-day DIR   # held-out next day

``--next-day DIR``: the next day's trace directory (Nezha ``rca_data/2023-01-30``, same layout; not
in the shared data). Fits on the shared day, then per hour of the next day predicts each service's
mean CPU from that hour's mean product traffic with ``flux predict`` (the predictor model.json names:
the model, or the service's baseline), and compares against "yesterday, same hour" (the fitted day's
mean CPU in that hour, the nearest fitted hour where the day has none) and "constant" (the fitted
day's mean CPU over its training windows). Error per service = sum_h |prediction - actual| / sum_h
actual over the next day's hours.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from placement_service.atomic import atomic_path  # noqa: E402
from placement_service.capacity.flux.traces_io import fit_from_directory  # noqa: E402

DATA = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "data"
    / "flux"
    / "nezha_trainticket"
    / "2023-01-29"
)


def next_day(fit_dir: str, day_dir: str, fault_minutes: int) -> None:
    from datetime import UTC, datetime

    from placement_service.capacity.flux.predict import load_predictor, predict
    from placement_service.capacity.flux.traces_io import read_observations

    res = fit_from_directory(fit_dir, fault_minutes=fault_minutes)
    model = load_predictor(res.model_doc())
    day, dropped = read_observations(day_dir, fault_minutes=fault_minutes)
    fa = res.obs

    def hour(ts: int) -> int:
        return datetime.fromtimestamp(ts, UTC).hour

    ha = np.array([hour(t) for t in fa.minutes])
    hb = np.array([hour(t) for t in day.minutes])
    hours = sorted(set(hb.tolist()))
    fitted_hours = sorted(set(ha.tolist()))
    rows = []
    for s, name in enumerate(fa.services):
        if name not in day.services:
            continue
        sd = day.services.index(name)
        act, pred, yday = [], [], []
        for h in hours:
            w = hb == h
            counts = {p: float(day.traces[i, w].mean()) for i, p in enumerate(day.products)}
            act.append(float(day.cpu[sd, w].mean()))
            pred.append(next(x.cpu_mcores for x in predict(model, counts).services if x.service == name))
            hy = min(fitted_hours, key=lambda x: (abs(x - h), x))
            yday.append(float(fa.cpu[s, ha == hy].mean()))
        a = np.array(act)
        const = np.full(len(hours), model.baseline_mcores[s])

        def err(x: list[float] | np.ndarray, a: np.ndarray = a) -> float:
            return float(np.abs(np.asarray(x) - a).sum() / max(a.sum(), 1e-9))

        rows.append((name, model.predictor[s], err(pred), err(yday), err(const), float(a.mean()), min(pred)))
    rows.sort(key=lambda r: -r[5])
    print(f"fitted on {fit_dir} ({len(fa.minutes)} windows), next day {day_dir}: {len(day.minutes)} windows in "
          f"hours {hours} (dropped {dropped}); fitted hours {fitted_hours}")  # fmt: skip
    print("\n| service | next-day CPU (m) | predictor | error: flux predict | yesterday, same hour | constant |")
    print("|---|---|---|---|---|---|")
    for name, pr, e, y, c, m, _ in rows:
        print(f"| {name} | {m:.1f} | {pr} | {e:.2f} | {y:.2f} | {c:.2f} |")
    e = np.array([r[2] for r in rows])
    y = np.array([r[3] for r in rows])
    c = np.array([r[4] for r in rows])
    mod = np.array([r[1] == "model" for r in rows])
    print(f"\n{len(rows)} services ({int(mod.sum())} by the model, {int((~mod).sum())} by their baseline); median "
          f"error: flux predict {np.median(e):.2f}, yesterday same hour {np.median(y):.2f}, constant "
          f"{np.median(c):.2f}; mean {e.mean():.2f} / {y.mean():.2f} / {c.mean():.2f}")  # fmt: skip
    print(f"model-predicted services: median {np.median(e[mod]):.2f} vs yesterday {np.median(y[mod]):.2f} vs "
          f"constant {np.median(c[mod]):.2f}; better than yesterday for {int((e < y)[mod].sum())} of {int(mod.sum())}, "
          f"than constant for {int((e < c)[mod].sum())}; services with CPU predicted 0 in some hour: {sum(1 for r in rows if r[6] <= 0 and r[5] > 0)}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=str(DATA))
    ap.add_argument("--out-dir", default="docs/figures/flux")
    ap.add_argument("--fault-minutes", type=int, default=1)
    ap.add_argument("--next-day", help="the next day's trace directory: validate `flux predict` on it")
    args = ap.parse_args(argv)
    if args.next_day:
        next_day(args.traces, args.next_day, args.fault_minutes)
        return 0
    res = fit_from_directory(args.traces, fault_minutes=args.fault_minutes)
    rep = res.report_doc()
    rows = [r for r in rep["services"] if r["residual_train"]["calls"] is not None]
    rows.sort(key=lambda r: -r["capacity_mcores"])
    names = [r["service"].removeprefix("ts-").removesuffix("-service") for r in rows]
    fig, ax = plt.subplots(figsize=(11, 3.8))
    xs = np.arange(len(rows))
    w = 0.2
    ax.bar(xs - 1.5 * w, [100 * r["residual_train"]["calls"] for r in rows], w, label="residual, call counts")
    ax.bar(
        xs - 0.5 * w, [100 * r["residual_train"]["span_time"] for r in rows], w, label="residual, span time"
    )
    ax.bar(
        xs + 0.5 * w,
        [100 * (r["error_heldout"][r["metric"]] or 0) for r in rows],
        w,
        label="held-out error, kept metric",
    )
    ax.bar(
        xs + 1.5 * w,
        [100 * (r["error_heldout_constant"] or 0) for r in rows],
        w,
        label="held-out error, constant",
    )
    ax.set_xticks(xs, names, rotation=60, ha="right")
    ax.set_ylabel("sum |delta| / sum c (%)")
    ax.set_title(
        "TrainTicket service model: aggregate residual per service (services by peak CPU, largest first)"
    )
    ax.legend(fontsize=8)
    os.makedirs(args.out_dir, exist_ok=True)
    with atomic_path(os.path.join(args.out_dir, "model_residuals.png"), suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    print(f"windows: {rep['minutes']} ({rep['train_minutes']} train / {rep['heldout_minutes']} held out, "
          f"peak window {rep['peak_minutes']}), dropped {rep['dropped']}; products {len(res.obs.products)}")  # fmt: skip
    print(
        "\n| service | peak CPU (m) | kept metric | residual calls | residual span time | held-out error | constant |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['service']} | {r['capacity_mcores']:.1f} | {r['metric']} | {r['residual_train']['calls']:.2f} | "
              f"{r['residual_train']['span_time']:.2f} | {r['error_heldout'][r['metric']]:.2f} | "
              f"{r['error_heldout_constant']:.2f} |")  # fmt: skip
    kept = [r["metric"] for r in rows]
    model_err = np.array([r["error_heldout"][r["metric"]] for r in rows])
    const_err = np.array([r["error_heldout_constant"] for r in rows])
    print(f"\nkept: calls {kept.count('calls')}, span_time {kept.count('span_time')}; held-out error median "
          f"{np.median(model_err):.2f} (constant {np.median(const_err):.2f}); model better for "
          f"{int((model_err < const_err).sum())} of {len(rows)} services")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
