"""Synthetic Flux instances (seeded: the same arguments give the same instance).

Shape of what is generated, step by step:
1. Regions: sizes log-normal (sigma 0.5); each region's hardware mix a Dirichlet draw, so regions
   hold different mixes.
2. Call graph: services in ``depth >= 3`` layers; layer 0 are front ends (gateways of products);
   every service calls 1-3 services of deeper layers, so products share back ends through paths of
   depth > 2. ``calls[p, s]`` = calls service ``s`` receives per request of product ``p`` (summed
   over paths); per-call cost is Pareto (heavy-tailed service sizes).
3. ``alpha[s, p] = volume[p] * calls[p, s] * cost[s]`` (units); each service has a primary hardware
   type and 30% of them may also run on a second type at a ratio in 0.7..1.3 (fungibility).
4. Baseline traffic ``xi[p, r]``: region size times a log-normal skew, normalised per product.
   Baseline capacity = equation 1 with a residual of +-6% (imbalance), placed on the primary type.
5. Supply per (region, hardware): baseline use times a headroom of 1.15..1.6 per region, plus room
   where the region's mix holds the type. Demand grows (organic ``tau`` 0..4% per step per product,
   inorganic growth for 10% of services); supply at t >= 1 is raised where needed so that every
   hardware type's total supply is >= 1.1 x its total demand at every timestep.
6. ``refresh``: the K regions with the largest baseline use (mature regions: headroom only 1.1..1.2)
   lose 30% of every pool from t1 on, so their services must partly move out; the supply of the
   other regions is raised afterwards if step 5's totals would fail.
"""

from __future__ import annotations

import numpy as np

from placement_service.capacity.flux.domain import Instance, ServiceFlags


def call_graph(n_services: int, n_products: int, rng: np.random.Generator, depth: int = 4) -> np.ndarray:
    """calls[p, s]: calls of service s per request of product p, through a layered DAG."""
    depth = max(3, depth)
    n_front = max(1, min(n_products, n_services // 6))
    rest = n_services - n_front
    layer = np.concatenate(
        [np.zeros(n_front, dtype=int), 1 + (np.arange(rest) * (depth - 1)) // max(1, rest)]
    )
    edges = np.zeros((n_services, n_services))
    for s in range(n_services):
        deeper = np.flatnonzero(layer > layer[s])
        if len(deeper) == 0:
            continue
        nxt = deeper[layer[deeper] == layer[s] + 1]
        pool = nxt if len(nxt) else deeper
        k = int(rng.integers(1, 4))
        targets = rng.choice(pool, size=min(k, len(pool)), replace=False)
        edges[s, targets] = rng.uniform(0.5, 2.0, len(targets))
        if rng.random() < 0.3 and len(deeper) > len(pool):  # a skip edge to a deeper layer
            edges[s, rng.choice(deeper)] += rng.uniform(0.2, 1.0)
    calls = np.zeros((n_products, n_services))
    for p in range(n_products):
        entry = np.zeros(n_services)
        fronts = rng.choice(n_front, size=min(n_front, int(rng.integers(1, 3))), replace=False)
        entry[fronts] = 1.0
        v = entry.copy()
        total = entry.copy()
        for _ in range(depth + 2):  # DAG: depth + 1 hops reach every layer
            v = v @ edges
            total += v
        calls[p] = total
    return calls


def generate(
    *,
    n_regions: int,
    n_services: int,
    n_products: int,
    n_hardware: int,
    n_timesteps: int,
    seed: int = 0,
    refresh: int = 0,
    refresh_cut: float = 0.3,
) -> tuple[Instance, np.ndarray]:
    """(instance, calls[p, s]) for the given sizes."""
    R, S, P, H, T = n_regions, n_services, n_products, n_hardware, max(2, n_timesteps)
    rng = np.random.default_rng(seed)
    # 1. regions
    size = rng.lognormal(0.0, 0.5, R)
    mix = rng.dirichlet(np.full(H, 1.5), R)  # (R, H)
    # 2. call graph and costs
    calls = call_graph(S, P, rng)
    cost = (rng.pareto(1.5, S) + 1.0) * 0.05
    volume = rng.lognormal(3.0, 1.0, P)
    # 3. service model and fungibility
    alpha = (volume[:, None] * calls * cost[None, :]).T  # (S, P)
    primary = rng.integers(0, H, S)
    ratio = np.zeros((S, H))
    ratio[np.arange(S), primary] = 1.0
    if H > 1:
        fung = np.flatnonzero(rng.random(S) < 0.3)
        second = (primary[fung] + rng.integers(1, H, len(fung))) % H
        ratio[fung, second] = rng.uniform(0.7, 1.3, len(fung))
    # 4. baseline traffic and capacity
    skew = rng.lognormal(0.0, 0.35, (P, R))
    xi = size[None, :] * skew
    xi /= xi.sum(axis=1, keepdims=True)
    units = alpha @ xi  # (S, R)
    units *= 1.0 + rng.uniform(-0.06, 0.06, units.shape)
    kappa = np.zeros((S, R, H))
    kappa[np.arange(S), :, primary] = units / ratio[np.arange(S), primary][:, None]
    # 5. supply with headroom, growth
    tau = np.zeros((P, T))
    tau[:, 1:] = rng.uniform(0.0, 0.04, P)[:, None] * np.arange(1, T)[None, :]
    gamma = np.zeros((S, T))
    grow = rng.random(S) < 0.1
    gamma[grow, 1:] = (
        (units.sum(axis=1)[grow] * rng.uniform(0.02, 0.08, grow.sum()))[:, None]
        * np.arange(1, T)[None, :]
        / T
    )
    use = kappa.sum(axis=0)  # (R, H)
    headroom = rng.uniform(1.15, 1.6, R)
    refreshed = np.argsort(-use.sum(axis=1), kind="stable")[: max(0, min(refresh, R))]
    headroom[refreshed] = rng.uniform(1.1, 1.2, len(refreshed))  # mature regions: little power headroom
    extra = 0.05 * mix * use.sum() / R
    extra[refreshed] = 0.0
    supply0 = use * headroom[:, None] + extra
    supply = np.repeat(supply0[:, :, None], T, axis=2)
    supply[refreshed, :, 1:] *= 1.0 - refresh_cut
    demand = (alpha @ (1.0 + tau)) + gamma  # (S, T) units
    need_h = np.zeros((H, T))
    np.add.at(need_h, primary, demand / ratio[np.arange(S), primary][:, None])
    others = np.setdiff1d(np.arange(R), refreshed)
    for t in range(T):
        for h in range(H):
            have = supply[:, h, t].sum()
            want = 1.1 * need_h[h, t]
            if have < want:
                grow_in = others if len(others) else np.arange(R)
                base = supply0[grow_in, h] + 1e-9
                supply[grow_in, h, t] += (want - have) * base / base.sum()
    for t in range(1, T):  # supply does not shrink later except in refreshed regions (new racks stay)
        keep = np.setdiff1d(np.arange(R), refreshed)
        supply[keep, :, t] = np.maximum(supply[keep, :, t], supply[keep, :, t - 1])
    # flags: 3% opt out, 8% review
    flags = tuple(
        ServiceFlags(opt_out=bool(o), review=bool(v), keep_residual=False)
        for o, v in zip(rng.random(S) < 0.03, rng.random(S) < 0.08, strict=True)
    )
    w_r, w_s, w_p, w_h = len(str(R - 1)), len(str(S - 1)), len(str(P - 1)), len(str(H - 1))
    inst = Instance(
        regions=tuple(f"region{r:0{w_r}d}" for r in range(R)),
        services=tuple(f"svc{s:0{w_s}d}" for s in range(S)),
        hardware=tuple(f"hw{h:0{w_h}d}" for h in range(H)),
        products=tuple(f"product{p:0{w_p}d}" for p in range(P)),
        timesteps=tuple(f"t{t}" for t in range(T)),
        alpha=alpha, ratio=ratio, kappa=kappa, xi=xi, tau=tau, gamma=gamma, supply=supply, flags=flags,
        rru_per_server=np.round(rng.uniform(1.0, 4.0, H), 2), metric=tuple("given" for _ in range(S)),
    )  # fmt: skip
    return inst, calls
