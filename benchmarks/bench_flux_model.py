"""The service model on the TrainTicket day: residual per service (like the paper's Figure 11) and the
held-out check, for docs/flux.md.

Fits ``harvest flux model`` on ``../shared/data/flux/nezha_trainticket/2023-01-29`` and draws
``model_residuals.png``: per service, the aggregate residual sum |delta| / sum c over the training
windows under each demand metric, and the error on held-out windows of the kept metric next to a
constant predictor (the peak-window CPU). Prints the Markdown table.

    nice -n 10 .venv/bin/python benchmarks/bench_flux_model.py --out-dir docs/figures/flux
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=str(DATA))
    ap.add_argument("--out-dir", default="docs/figures/flux")
    ap.add_argument("--fault-minutes", type=int, default=1)
    args = ap.parse_args(argv)
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
