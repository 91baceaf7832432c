"""Real regional demand: the Huawei tenants as products, weekly planning cycles over 122 days.

Data: ``../shared/data/flux/huawei_regionless/tenantN.csv.gz`` (every 10 minutes: day HH:MM:SS,
region, VM type, cores in use). Mapping, step by step:
1. products = the 13 tenants; a tenant's weekly level = the peak over the week of its total cores
   (all regions and VM types at one timestamp); its baseline region shares = its cores per region
   averaged over week 0;
2. hardware = the 3 VM types with the most core-hours plus ``other``; every service runs on any of
   them at ratio 1 (a core is a core); a service's baseline capacity in a region is split over the
   hardware by that region's week-0 VM-type mix;
3. services = a ``flux generate`` call graph (40 services, depth > 2) over the 13 products, its
   alpha scaled per product so that sum_s alpha[s, p] = tenant p's week-0 level (cores);
4. region supply (the data has none): per region and hardware, 1.1 x the 122-day peak of the cores
   all tenants used there on that hardware (what the region demonstrably held, plus 10%), constant;
5. each weekly cycle w plans t0 = week w and 2 weeks ahead with the demand known at w (persistence:
   the future at week w's level; growth of a product is its level at w over its level at week 0),
   starting from the previous cycle's executed step (``--previous``); the never-revised plan is the
   week-0 plan whose first step is kept for all 17 weeks.
Per week: unmet demand (cores the week's actual demand needs beyond the capacity in place, summed
over services and regions), plan deficits, capacity moved, largest region share.

    nice -n 10 .venv/bin/python benchmarks/bench_flux_huawei.py --out-dir docs/figures/flux
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from placement_service.atomic import atomic_path  # noqa: E402
from placement_service.capacity.flux.checker import check  # noqa: E402
from placement_service.capacity.flux.domain import Instance, ServiceFlags  # noqa: E402
from placement_service.capacity.flux.generate import generate  # noqa: E402
from placement_service.capacity.flux.planner import plan  # noqa: E402
from placement_service.capacity.flux.previous import rebase  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "flux" / "huawei_regionless"
SAMPLES_PER_WEEK = 7 * 24 * 6


def load_tenants(data: Path) -> tuple[list[str], list[str], list[str], np.ndarray]:
    """(tenants, regions, vm types, cores[tenant, sample, region, vm type])."""
    rows = []
    for f in sorted(data.glob("tenant*.csv.gz"), key=lambda p: int(p.stem.split(".")[0][6:])):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                day_time, region, vm, cores = line.rstrip("\n").split(",")
                day, hms = day_time.split(" ")
                h, m, _s = hms.split(":")
                rows.append(
                    (
                        f.stem.split(".")[0],
                        (int(day) - 1) * 144 + int(h) * 6 + int(m) // 10,
                        region,
                        vm,
                        float(cores),
                    )
                )
    tenants = sorted({r[0] for r in rows}, key=lambda t: int(t[6:]))
    regions = sorted({r[2] for r in rows}, key=lambda r: int(r[1:]))
    vms = sorted({r[3] for r in rows}, key=lambda v: int(v[1:]))
    n = max(r[1] for r in rows) + 1
    ti, ri, vi = ({x: i for i, x in enumerate(v)} for v in (tenants, regions, vms))
    cores = np.zeros((len(tenants), n, len(regions), len(vms)), dtype=np.float32)
    for t, k, r, v, c in rows:
        cores[ti[t], k, ri[r], vi[v]] += c
    return tenants, regions, vms, cores


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out-dir", default="docs/figures/flux")
    ap.add_argument("--services", type=int, default=40)
    args = ap.parse_args(argv)
    tenants, regions, vms, cores = load_tenants(Path(args.data))
    P, N, R, V = cores.shape
    weeks = N // SAMPLES_PER_WEEK
    # 2. hardware classes
    top = list(np.argsort(-cores.sum(axis=(0, 1, 2)))[:3])
    hw_names = [vms[v] for v in top] + ["other"]
    H = len(hw_names)
    cls = np.full(V, H - 1)
    for k, v in enumerate(top):
        cls[v] = k
    by_hw = np.zeros((P, N, R, H), dtype=np.float32)
    for v in range(V):
        by_hw[..., cls[v]] += cores[..., v]
    # 1. weekly levels and baseline shares
    level = np.array([[by_hw[p, w * SAMPLES_PER_WEEK : (w + 1) * SAMPLES_PER_WEEK].sum(axis=(1, 2)).max()
                       for w in range(weeks)] for p in range(P)])  # fmt: skip
    wk0 = by_hw[:, :SAMPLES_PER_WEEK].mean(axis=1)  # (P, R, H)
    xi = wk0.sum(axis=2)
    xi = xi / xi.sum(axis=1, keepdims=True)
    mix = wk0.sum(axis=0)  # (R, H)
    mix = np.where(
        mix.sum(axis=1, keepdims=True) > 0, mix / np.maximum(mix.sum(axis=1, keepdims=True), 1e-9), 1.0 / H
    )
    # 4. supply from the data
    supply_rh = 1.1 * by_hw.sum(axis=0).max(axis=0)  # (R, H)
    # 3. services from the generator, alpha scaled to the tenants' week-0 levels
    gen, _ = generate(
        n_regions=R, n_services=args.services, n_products=P, n_hardware=H, n_timesteps=2, seed=5
    )
    alpha0 = gen.alpha / np.maximum(gen.alpha.sum(axis=0, keepdims=True), 1e-9) * level[:, 0][None, :]
    S = args.services
    ratio = np.ones((S, H))
    units = alpha0 @ xi  # (S, R)
    kappa = units[:, :, None] * mix[None, :, :]

    def instance(w: int, T: int, kappa_: np.ndarray, xi_: np.ndarray) -> Instance:
        grow = level[:, w] / level[:, 0]
        alpha = alpha0 * grow[None, :]
        return Instance(
            regions=tuple(regions), services=gen.services, hardware=tuple(hw_names), products=tuple(tenants),
            timesteps=tuple(f"w{w + k}" for k in range(T)), alpha=alpha, ratio=ratio, kappa=kappa_, xi=xi_,
            tau=np.zeros((P, T)), gamma=np.zeros((S, T)), supply=np.repeat(supply_rh[:, :, None], T, axis=2),
            flags=tuple(ServiceFlags() for _ in range(S)), rru_per_server=np.ones(H),
        )  # fmt: skip

    def state(doc: dict, t: str) -> tuple[np.ndarray, np.ndarray]:
        c = np.zeros((S, R))
        x = np.zeros((P, R))
        for row in doc["capacity"]:
            if row["t"] == t:
                c[gen.services.index(row["service"]), regions.index(row["region"])] += row["amount"]
        for row in doc["traffic"]:
            if row["t"] == t:
                x[tenants.index(row["product"]), regions.index(row["region"])] = row["share"]
        return c, x

    def unmet(w: int, c: np.ndarray, x: np.ndarray) -> float:
        need = (alpha0 * (level[:, w] / level[:, 0])[None, :]) @ x
        return float(np.maximum(need - c, 0).sum())

    rows = []
    # never revised: the week-0 plan's first step, kept
    base = plan(instance(0, 3, kappa, xi))
    fixed_c, fixed_x = state(base, "w1")
    prev = base
    prev_c, _ = state(base, "w0")
    for w in range(1, weeks):
        inst = rebase(instance(w, 3, kappa, xi), prev, "previous cycle")
        doc = plan(inst)
        bad = check(doc)
        c_now, x_now = state(doc, f"w{w}")  # the state this cycle starts from (previous step executed)
        moved = float(np.abs(c_now - prev_c).sum()) / 2
        largest = float(np.mean(x_now.max(axis=1)))
        rows.append({
            "week": w, "level_vs_week0": float(level[:, w].sum() / level[:, 0].sum()),
            "revised_unmet": unmet(w, c_now, x_now), "fixed_unmet": unmet(w, fixed_c, fixed_x),
            "revised_deficits": float(sum(d["amount"] for d in doc["deficits"])), "revised_moved": moved,
            "revised_largest": largest, "fixed_largest": float(np.mean(fixed_x.max(axis=1))),
            "check": "ok" if not bad else str(bad[0]),
        })  # fmt: skip
        prev, prev_c = doc, c_now
    total = float(level[:, 0].sum())
    print(f"tenants {P}, regions {R}, VM types {V} -> hardware {hw_names}, weeks {weeks}; week-0 demand "
          f"{total:.0f} cores, supply {supply_rh.sum():.0f} cores (1.1 x the per-region, per-hardware 122-day peak)")  # fmt: skip
    print("\n| week | demand vs week 0 | unmet, revised weekly (cores) | unmet, never revised | deficits (revised) "
          "| capacity moved | largest region share revised / never |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['week']} | {r['level_vs_week0']:.2f} | {r['revised_unmet']:.0f} | {r['fixed_unmet']:.0f} | "
              f"{r['revised_deficits']:.0f} | {r['revised_moved']:.0f} | {r['revised_largest']:.3f} / "
              f"{r['fixed_largest']:.3f} |")  # fmt: skip
    os.makedirs(args.out_dir, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
    wk = [r["week"] for r in rows]
    ax[0].plot(wk, [r["revised_unmet"] for r in rows], "o-", label="revised weekly (--previous)")
    ax[0].plot(wk, [r["fixed_unmet"] for r in rows], "s--", label="never revised")
    ax[0].set_xlabel("week")
    ax[0].set_ylabel("unmet demand (cores)")
    ax[0].legend()
    ax[1].plot(wk, [r["revised_largest"] for r in rows], "o-", label="revised weekly")
    ax[1].plot(wk, [r["fixed_largest"] for r in rows], "s--", label="never revised")
    ax[1].set_xlabel("week")
    ax[1].set_ylabel("largest region share (mean over tenants)")
    ax[1].legend()
    fig.suptitle("Huawei tenants as products: weekly Flux cycles vs a plan never revised")
    with atomic_path(os.path.join(args.out_dir, "huawei_cycles.png"), suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
