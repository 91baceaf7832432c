"""Independent check of a Flux plan document: every phase of every step is feasible.

This module reads only the plan document (it does not import the planner or the model builder), and
recomputes every state the three-phase execution passes through. For step t (from t-1 to t):
1. upsize: capacity max(c[t-1], c[t]) per (service, region, hardware), traffic still x[t-1];
2. shift: same capacity, traffic x[t];
3. downsize: capacity c[t], traffic x[t].
The baseline state (c[t0], x[t0]) is checked too. In each state:
- provisioning: for every managed (not opted-out) service s and region r,
  sum_h ratio[s,h] cap[s,r,h] >= sum_p phi[s,p,tt] x[p,r] + residual_floor[s,r] + fixed_growth[s,r,tt]
  (tt = the timestep whose traffic is placed);
- supply: for every (region, hardware), sum_s cap[s,r,h] <= the supply present in that phase:
  max(supply[t-1], supply[t]) during upsize and shift (leaving hardware goes after the downsizes,
  new hardware arrives before the upsizes), supply[t] after the downsize;
- placement: for every product and timestep, sum_r x[p,r,t] = 1 + growth[p][t].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

REL_TOL = 1e-6
PHASES = ("upsize", "shift", "downsize")


@dataclass(frozen=True)
class Violation:
    step: str  # "t1" (the step into timestep t1) or "baseline"
    phase: str
    what: str

    def __str__(self) -> str:
        return f"step {self.step}, phase {self.phase}: {self.what}"


class PlanShapeError(ValueError):
    """The document is not a plan (missing or malformed fields)."""


def _need(doc: Mapping[str, Any], key: str) -> Any:
    if key not in doc:
        raise PlanShapeError(f"missing field '{key}'")
    return doc[key]


def _table(doc: Mapping[str, Any], key: str, axes: tuple[str, ...], value: str,
           tables: Mapping[str, Mapping[str, int]]) -> np.ndarray:  # fmt: skip
    """The rows of ``doc[key]`` as a dense array over ``axes`` (each named by its lookup table)."""
    out = np.zeros(tuple(len(tables[a]) for a in axes))
    for i, row in enumerate(_need(doc, key)):
        try:
            out[tuple(tables[a][row[a]] for a in axes)] = float(row[value])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanShapeError(f"{key}[{i}]: bad or unknown field ({exc})") from None
    return out


def check(doc: Mapping[str, Any], *, max_violations: int = 50) -> list[Violation]:
    """Violations of the plan, in step order (empty = every phase of every step is feasible)."""
    regions = list(_need(doc, "regions"))
    hardware = list(_need(doc, "hardware"))
    times = list(_need(doc, "timesteps"))
    services = list(_need(doc, "services"))
    R, H, T, S = len(regions), len(hardware), len(times), len(services)
    r_of = {n: i for i, n in enumerate(regions)}
    h_of = {n: i for i, n in enumerate(hardware)}
    t_of = {n: i for i, n in enumerate(times)}
    s_of = {sv["name"]: i for i, sv in enumerate(services)}
    products = list(doc.get("products") or sorted({row["product"] for row in _need(doc, "traffic")}))
    p_of = {n: i for i, n in enumerate(products)}
    P = len(products)
    tables = {"service": s_of, "product": p_of, "region": r_of, "hardware": h_of, "t": t_of}
    c = _table(doc, "capacity", ("service", "region", "hardware", "t"), "amount", tables)
    x = _table(doc, "traffic", ("product", "region", "t"), "share", tables)
    sup = _table(doc, "supply", ("region", "hardware", "t"), "available", tables)
    ratio = np.zeros((S, H))
    phi = np.zeros((S, P, T))
    floor = np.zeros((S, R))
    fixed = np.zeros((S, R, T))
    managed = np.ones(S, dtype=bool)
    for s, sv in enumerate(services):
        for h, v in (sv.get("ratio") or {}).items():
            ratio[s, h_of[h]] = float(v)
        for t, per_p in (sv.get("phi") or {}).items():
            for p, v in per_p.items():
                phi[s, p_of[p], t_of[t]] = float(v)
        for r, v in (sv.get("residual_floor") or {}).items():
            floor[s, r_of[r]] = float(v)
        for t, per_r in (sv.get("fixed_growth") or {}).items():
            for r, v in per_r.items():
                fixed[s, r_of[r], t_of[t]] = float(v)
        managed[s] = not bool(sv.get("opt_out", False))
    growth = doc.get("growth") or {}
    scale = max(1.0, float(np.abs(sup).max(initial=0.0)), float(np.abs(c).max(initial=0.0)))
    tol = REL_TOL * scale

    out: list[Violation] = []

    def provision(step: str, phase: str, cap: np.ndarray, xt: np.ndarray, tt: int) -> None:
        have = np.einsum("srh,sh->sr", cap, ratio)
        need = phi[:, :, tt] @ xt + floor + fixed[:, :, tt]
        short = (have < need - tol) & managed[:, None]
        for s, r in zip(*np.nonzero(short), strict=True):
            out.append(Violation(step, phase, (
                f"service {services[s]['name']!r} in region {regions[r]!r} is under-provisioned: "
                f"{have[s, r]:.4f} units < {need[s, r]:.4f} needed for the traffic of {times[tt]}")))  # fmt: skip

    def fits(step: str, phase: str, cap: np.ndarray, avail: np.ndarray) -> None:
        used = cap.sum(axis=0)  # (R, H)
        over = used > avail + tol
        for r, h in zip(*np.nonzero(over), strict=True):
            out.append(Violation(step, phase, (
                f"region {regions[r]!r} exceeds its {hardware[h]!r} supply: {used[r, h]:.4f} RRU used > "
                f"{avail[r, h]:.4f} RRU available")))  # fmt: skip

    for t in range(T):
        for p in range(P):
            g = growth.get(products[p])
            target = 1.0 + (float(g[t]) if g is not None and t > 0 else 0.0)
            if abs(x[p, :, t].sum() - target) > 1e-5:
                out.append(Violation(times[t], "placement", (
                    f"product {products[p]!r} shares sum to {x[p, :, t].sum():.6f}, expected {target:.6f}")))  # fmt: skip
    provision("baseline", "baseline", c[..., 0], x[:, :, 0], 0)
    fits("baseline", "baseline", c[..., 0], sup[:, :, 0])
    for t in range(1, T):
        step = times[t]
        up = np.maximum(c[..., t - 1], c[..., t])
        transit = np.maximum(sup[:, :, t - 1], sup[:, :, t])
        provision(step, "upsize", up, x[:, :, t - 1], t - 1)
        fits(step, "upsize", up, transit)
        provision(step, "shift", up, x[:, :, t], t)
        fits(step, "shift", up, transit)
        provision(step, "downsize", c[..., t], x[:, :, t], t)
        fits(step, "downsize", c[..., t], sup[:, :, t])
        if len(out) >= max_violations:
            break
    return out[:max_violations]
