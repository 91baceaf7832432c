"""Synthetic regions for capacity solving, their requests and failures (seeded; the same arguments
give the same region).

Layout: ``n_msbs`` MSBs split evenly over ``n_datacenters``; racks of ``servers_per_rack``. Hardware
is heterogeneous across MSBs the way installations happen over time: hardware generation ``g`` of
``n_hardware`` is installed in MSB ``k`` when ``|g - center_k| <= window`` with
``center_k = k * n_hardware / n_msbs``, so each type lives in a band of MSBs and the region-wide
buffer lower bound sits above the perfectly spread ``1 / n_msbs``.

Hardware drift (``drift`` > 0): real MSBs also keep a few servers of generations outside their
band (old machines left behind after a refresh, an early batch of a new one). Each (MSB, generation
outside the MSB's band) pair gets, with probability ``drift``, 1-3 servers of that generation (taken
from the MSB's own servers), so the region has rare equivalence classes (hardware x datacenter x MSB
of 1-3 servers). Drawn from a stream of its own: ``drift = 0`` gives the region it always gave.

Requests: sizes log-uniform from ``min_servers`` to ``max_servers`` (servers), scaled so that the
requests plus their estimated buffers fill at most ``fill`` of each hardware type; each may use 1-3 adjacent generations
(many are satisfiable by several types); half count servers (RRU 1 per server), half value newer
generations more (RRU = 1 + 0.15 * generation); ``affinity_share`` of them carry a datacenter affinity.

Failures (``generate_outages``): servers failing on their own and whole MSBs going down, as outages
for ``scenario.replay`` (the Online Mover and re-solves over a year).
"""

from __future__ import annotations

import math

import numpy as np

from placement_service.capacity.ras.domain import Region, Request
from placement_service.capacity.ras.scenario import Outage


def generate_region(
    *,
    n_servers: int = 1000,
    n_msbs: int = 6,
    n_hardware: int = 3,
    n_datacenters: int | None = None,
    servers_per_rack: int = 40,
    unavailable_frac: float = 0.005,
    drift: float = 0.0,
    seed: int = 0,
) -> Region:
    if not 0.0 <= drift <= 1.0:
        raise ValueError(f"drift must be within [0, 1], got {drift}")
    rng = np.random.default_rng(seed)
    n_dc = n_datacenters or max(1, min(3, n_msbs // 4))
    msb = np.sort(rng.integers(0, n_msbs, n_servers))
    window = max(1.0, n_hardware / 3)
    hw = np.empty(n_servers, dtype=np.int64)
    for k in range(n_msbs):
        center = (k + 0.5) * n_hardware / n_msbs - 0.5
        types = np.array([g for g in range(n_hardware) if abs(g - center) <= window])
        if len(types) == 0:
            types = np.array([min(n_hardware - 1, max(0, round(center)))])
        idx = np.flatnonzero(msb == k)
        hw[idx] = types[rng.integers(0, len(types), len(idx))]
    if drift > 0:
        _drift(hw, msb, n_msbs, n_hardware, window, drift, np.random.default_rng([seed, 41]))
    dc = (msb * n_dc) // n_msbs
    rack = np.empty(n_servers, dtype=np.int64)
    rack_names: list[str] = []
    for k in range(n_msbs):
        idx = np.flatnonzero(msb == k)
        n_racks = max(1, math.ceil(len(idx) / servers_per_rack))
        rack[idx] = len(rack_names) + (np.arange(len(idx)) % n_racks)
        rack_names.extend(f"msb{k:02d}-rack{j:03d}" for j in range(n_racks))
    width = len(str(n_servers - 1))
    return Region(
        server=tuple(f"srv{i:0{width}d}" for i in range(n_servers)),
        hardware=hw.astype(np.int32),
        datacenter=dc.astype(np.int32),
        msb=msb.astype(np.int32),
        rack=rack.astype(np.int32),
        available=rng.random(n_servers) >= unavailable_frac,
        in_use=np.zeros(n_servers, dtype=bool),
        hardware_names=tuple(f"hw{g:02d}" for g in range(n_hardware)),
        datacenter_names=tuple(f"dc{d}" for d in range(n_dc)),
        msb_names=tuple(f"msb{k:02d}" for k in range(n_msbs)),
        rack_names=tuple(rack_names),
        extra={
            "cores": tuple(float(16 * (1 + g // 3)) for g in hw),
            "memory_mb": tuple(float(65536 * (1 + g // 3)) for g in hw),
            "storage_gb": tuple(float(2000 + 500 * (g % 3)) for g in hw),
        },
    )


def _drift(hw: np.ndarray, msb: np.ndarray, n_msbs: int, n_hardware: int, window: float, drift: float,
           rng: np.random.Generator) -> None:
    """Hardware drift, in place: 1-3 servers of an out-of-band generation in an MSB, with probability
    ``drift`` per (MSB, out-of-band generation) pair (see the module docstring)."""
    for k in range(n_msbs):
        center = (k + 0.5) * n_hardware / n_msbs - 0.5
        idx = np.flatnonzero(msb == k)
        for g in range(n_hardware):
            if abs(g - center) <= window or rng.random() >= drift or len(idx) < 8:
                continue
            take = rng.choice(idx, int(rng.integers(1, 4)), replace=False)
            hw[take] = g


def generate_requests(
    region: Region,
    *,
    n_reservations: int = 20,
    fill: float = 0.7,
    min_servers: float = 2.0,
    max_servers: float | None = None,
    affinity_share: float = 0.1,
    seed: int = 0,
) -> tuple[Request, ...]:
    rng = np.random.default_rng(seed + 1)
    n_hw = len(region.hardware_names)
    avail = region.available.astype(bool)
    supply = np.bincount(region.hardware[avail], minlength=n_hw).astype(float)
    hi = max_servers or max(min_servers * 2, supply.sum() / max(4.0, n_reservations / 4))
    sizes = np.exp(rng.uniform(math.log(min_servers), math.log(hi), n_reservations))
    first = rng.integers(0, n_hw, n_reservations)
    width = rng.integers(1, 4, n_reservations)
    # scale: each type's share of the requests plus its embedded buffer (about 1 / (MSBs holding the
    # type - 1) of the request) stays within ``fill`` of the type's supply; the tightest type sets one scale
    msbs_of_hw = np.array([max(2, len(set(region.msb[region.hardware == g].tolist()))) for g in range(n_hw)])
    factor = 1.0 + 1.0 / (msbs_of_hw - 1) + 0.05

    def load(sz: np.ndarray) -> np.ndarray:
        demand = np.zeros(n_hw)
        for r in range(n_reservations):
            types = np.arange(first[r], min(n_hw, first[r] + width[r]))
            demand[types] += sz[r] * supply[types] / supply[types].sum()
        return demand * factor / np.maximum(supply, 1.0)

    # fit: every reservation grows or shrinks until the most loaded of its types sits at ``fill``
    for _ in range(30):
        per_type = load(sizes)
        worst = np.array([per_type[first[r] : min(n_hw, first[r] + width[r])].max() for r in range(n_reservations)])
        sizes = sizes * np.clip(fill / np.maximum(worst, 1e-9), 0.5, 2.0) ** 0.5
    sizes = sizes * min(1.0, fill / float(load(sizes).max()))
    sizes = np.maximum(min_servers, sizes)
    # datacenters a type's affinity may name: those holding an MSB with a real share of the type (more
    # than 3 servers, or an eighth of its mean per MSB); a few drifted machines are no capacity to ask an
    # affinity share of
    n_msb = len(region.msb_names)
    per_msb = np.bincount(region.hardware.astype(np.int64) * n_msb + region.msb, minlength=n_hw * n_msb)
    per_msb = per_msb.reshape(n_hw, n_msb)
    mean = per_msb.sum(axis=1) / np.maximum(1, (per_msb > 0).sum(axis=1))
    real = (per_msb > 3) | (per_msb >= mean[:, None] / 8)
    msb_dc = np.zeros(n_msb, dtype=np.int64)
    msb_dc[region.msb] = region.datacenter
    dc_of_hw = [sorted({int(msb_dc[m]) for m in np.flatnonzero(real[g] & (per_msb[g] > 0))}) for g in range(n_hw)]
    out = []
    for r in range(n_reservations):
        gens = list(range(first[r], min(n_hw, first[r] + width[r])))
        counted = rng.random() < 0.5
        rru = {region.hardware_names[g]: (1.0 if counted else round(1.0 + 0.15 * g, 2)) for g in gens}
        mean = float(np.mean(list(rru.values())))
        affinity = None
        dcs = sorted(set().union(*(dc_of_hw[g] for g in gens)))
        if len(dcs) >= 2 and rng.random() < affinity_share and sizes[r] > 20:
            a, b = rng.choice(dcs, 2, replace=False)
            affinity = {region.datacenter_names[int(a)]: 0.6, region.datacenter_names[int(b)]: 0.4}
        out.append(
            Request(
                id=f"res{r:04d}",
                capacity_rru=float(max(1.0, round(sizes[r] * mean))),
                rru=rru,
                datacenter_affinity=affinity,
            )
        )
    return tuple(out)


# Defaults of the failure process: about LANL system 18's rate (3,997 outages of 1,024 nodes over
# 2002-2005, ~1.3 per node-year; ``benchmarks/bench_ras_failures.py``) and a few MSB-wide outages
# (power or network of a whole MSB) a year.
FAILURES_PER_SERVER_YEAR = 1.0
REPAIR_MEDIAN_H = 6.0
MSB_OUTAGES_PER_YEAR = 3.0
MSB_OUTAGE_MEDIAN_H = 4.0


def generate_outages(
    region: Region,
    *,
    days: float = 365.0,
    failures_per_server_year: float = FAILURES_PER_SERVER_YEAR,
    repair_median_h: float = REPAIR_MEDIAN_H,
    msb_outages_per_year: float = MSB_OUTAGES_PER_YEAR,
    msb_outage_median_h: float = MSB_OUTAGE_MEDIAN_H,
    seed: int = 0,
) -> list[Outage]:
    """``days`` of server outages of ``region`` (seconds from 0), sorted by start.

    Two processes: every server fails on its own (Poisson, ``failures_per_server_year``; repair time
    log-normal with median ``repair_median_h`` hours, sigma 1), and whole MSBs go down together
    (Poisson over the region, ``msb_outages_per_year``; a uniformly chosen MSB, every available
    server of it down for a log-normal time of median ``msb_outage_median_h`` hours, sigma 0.5).
    Servers unavailable in the region (``available`` false) never fail again: they are down already.
    """
    if days <= 0 or failures_per_server_year < 0 or msb_outages_per_year < 0:
        raise ValueError("days must be > 0 and failure rates >= 0")
    rng = np.random.default_rng([seed, 15])
    span_s = days * 86400.0
    out: list[Outage] = []
    live = np.flatnonzero(region.available)
    counts = rng.poisson(failures_per_server_year * days / 365.0, len(live))
    for i, k in zip(live.tolist(), counts.tolist(), strict=True):
        for start in np.sort(rng.uniform(0.0, span_s, k)).tolist():
            dur = 3600.0 * repair_median_h * float(rng.lognormal(0.0, 1.0))
            out.append(Outage(region.server[i], start, start + max(60.0, dur)))
    for _ in range(int(rng.poisson(msb_outages_per_year * days / 365.0))):
        start = float(rng.uniform(0.0, span_s))
        msb = int(rng.integers(0, len(region.msb_names)))
        end = start + max(60.0, 3600.0 * msb_outage_median_h * float(rng.lognormal(0.0, 0.5)))
        out.extend(Outage(region.server[i], start, end) for i in live[region.msb[live] == msb].tolist())
    return sorted(out, key=lambda o: (o.start_s, o.server))
