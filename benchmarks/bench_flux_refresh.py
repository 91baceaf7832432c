"""The out-of-region refresh case: 3 regions lose 30% of their supply from t1 on (figures for docs/flux.md).

Generates a seeded instance (8 regions, 60 services, 8 products, 3 hardware types, t0 + 3 steps,
``--refresh 3``), plans it, checks every phase of every step with the independent checker, and draws:
  refresh_traffic.png      traffic change per region, t0 -> last step (like the paper's Figure 14)
  refresh_ratio.png        capacity of the largest front end / the largest back end per region,
                           before and after (Figure 15)
  refresh_utilization.png  region utilization (capacity placed / supply) before and after (Figure 16)
and prints a Markdown table (per region: supply, capacity and traffic change) and the largest
region share per timestep.

    nice -n 10 .venv/bin/python benchmarks/bench_flux_refresh.py --out-dir docs/figures/flux
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from placement_service.atomic import atomic_path  # noqa: E402
from placement_service.capacity.flux.checker import check  # noqa: E402
from placement_service.capacity.flux.generate import generate  # noqa: E402
from placement_service.capacity.flux.planner import plan  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="docs/figures/flux")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    R, S, P, H, T = 8, 60, 8, 3, 4
    inst, _ = generate(
        n_regions=R, n_services=S, n_products=P, n_hardware=H, n_timesteps=T, seed=args.seed, refresh=3
    )
    t0 = time.perf_counter()
    doc = plan(inst)
    wall = time.perf_counter() - t0
    violations = check(doc)
    regions, times = doc["regions"], doc["timesteps"]
    ri = {r: i for i, r in enumerate(regions)}
    ti = {t: i for i, t in enumerate(times)}
    cap = np.zeros((S, R, T))
    for row in doc["capacity"]:
        cap[inst.services.index(row["service"]), ri[row["region"]], ti[row["t"]]] += row["amount"]
    x = np.zeros((P, R, T))
    for row in doc["traffic"]:
        x[inst.products.index(row["product"]), ri[row["region"]], ti[row["t"]]] = row["share"]
    size = inst.alpha.sum(axis=0)
    traffic = np.einsum("p,prt->rt", size, x)
    supply = inst.supply.sum(axis=1)
    used = cap.sum(axis=0)
    refreshed = [r for r in range(R) if supply[r, 1] < supply[r, 0] - 1e-9]
    last = T - 1
    change = traffic[:, last] / traffic[:, 0] - 1
    n_front = max(1, min(P, S // 6))
    total_cap = cap[:, :, 0].sum(axis=1)
    front = int(np.argmax(total_cap[:n_front]))
    back = n_front + int(np.argmax(total_cap[n_front:]))
    ratio = np.where(cap[back] > 0, cap[front] / np.where(cap[back] > 0, cap[back], 1), np.nan)
    util = used / supply
    os.makedirs(args.out_dir, exist_ok=True)
    colors = ["tab:red" if r in refreshed else "tab:blue" for r in range(R)]
    names = [f"{regions[r]}{' *' if r in refreshed else ''}" for r in range(R)]

    def save(fig: plt.Figure, name: str) -> None:
        with atomic_path(os.path.join(args.out_dir, name), suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(names, 100 * change, color=colors)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel(f"traffic change {times[0]} -> {times[last]} (%)")
    ax.set_title("Traffic change per region (* = lost 30% of supply at t1)")
    ax.tick_params(axis="x", rotation=45)
    save(fig, "refresh_traffic.png")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    w = 0.38
    ax.bar(np.arange(R) - w / 2, ratio[:, 0], w, label=f"before ({times[0]})", color="tab:gray")
    ax.bar(np.arange(R) + w / 2, ratio[:, last], w, label=f"after ({times[last]})", color="tab:green")
    ax.set_xticks(np.arange(R), names, rotation=45)
    ax.set_ylabel(f"{inst.services[front]} / {inst.services[back]}")
    ax.set_title("Capacity ratio of a front end to a back end per region")
    ax.legend()
    save(fig, "refresh_ratio.png")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(np.arange(R) - w / 2, 100 * util[:, 0], w, label=f"before ({times[0]})", color="tab:gray")
    ax.bar(np.arange(R) + w / 2, 100 * util[:, last], w, label=f"after ({times[last]})", color="tab:orange")
    ax.set_xticks(np.arange(R), names, rotation=45)
    ax.set_ylabel("capacity placed / supply (%)")
    ax.set_title("Utilization per region before and after")
    ax.legend()
    save(fig, "refresh_utilization.png")

    print(f"plan: {doc['solver']['variables']} variables, {doc['solver']['constraints']} constraints, "
          f"{wall:.2f} s (load {' '.join(f'{v:.2f}' for v in os.getloadavg())}); deficits {len(doc['deficits'])}; "
          f"checker: {'all phases feasible' if not violations else violations[0]}")  # fmt: skip
    print(
        "\n| region | supply t0 -> t1 | capacity t0 -> "
        + times[last]
        + " | traffic change | utilization before -> after |"
    )
    print("|---|---|---|---|---|")
    for r in range(R):
        print(f"| {names[r]} | {supply[r, 0]:.0f} -> {supply[r, 1]:.0f} | {used[r, 0]:.0f} -> {used[r, last]:.0f} | "
              f"{100 * change[r]:+.1f}% | {100 * util[r, 0]:.0f}% -> {100 * util[r, last]:.0f}% |")  # fmt: skip
    print("\nlargest region share per timestep:", doc["metrics"]["largest_region_share"])
    print("capacity moved per step (RRU):", [round(v, 1) for v in doc["metrics"]["capacity_moved_rru"]])
    return 0 if not violations else 1


if __name__ == "__main__":
    sys.exit(main())
