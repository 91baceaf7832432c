"""The physical side of a (synthetic or converted) datacenter: hardware, free storage, racks,
MSBs, and reimage events (steps 4 and 5 of :mod:`placement_service.traces.generate`).

Distributions and parameters are fields of ``GeneratorConfig``; ``docs/generator.md`` explains each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from placement_service.core.types import Inventory, ReimageEvents

if TYPE_CHECKING:
    from placement_service.traces.config import GeneratorConfig

DAY_S = 86400.0
MONTH_S = 30 * DAY_S
KINDS = ("prod", "dev", "test")
"""Environment kinds; an environment's name starts with its kind (``prod-003``)."""

# Named random streams (same numbering as generate.py).
_HARDWARE, _REIMAGES, _RACKS = 4, 5, 7


def environment_kind(env: str) -> int:
    """Index in ``KINDS`` of an environment named ``<kind>-...`` (unknown kinds count as prod)."""
    head = env.split("-", 1)[0]
    return KINDS.index(head) if head in KINDS else 0


def build_inventory(
    sizes: np.ndarray, tenant_of: list[str], env_of: list[str], cfg: GeneratorConfig, seed: int
) -> tuple[Inventory, np.ndarray]:
    """Servers ``srv-00000``... in datacenter (rack) order and the tenant index of each server.

    Tenant ``t`` has ``sizes[t]`` servers; ``tenant_of`` / ``env_of`` name tenants and environments.
    Hardware per tenant (a second type on big tenants), free storage = disk x tenant fraction x
    per-server jitter, racks of ``rack_size`` servers, ``racks_per_msb`` racks per MSB.
    """
    n_servers = int(sizes.sum())
    n_tenants = len(sizes)
    rng_hw = np.random.default_rng([seed, _HARDWARE])
    hw = _hardware(sizes, cfg, rng_hw)
    a, b = cfg.free_storage_beta
    free_frac = rng_hw.beta(a, b, size=n_tenants)
    free_frac[rng_hw.random(n_tenants) < cfg.no_storage_tenant_frac] = 0.0
    rack_tenant, rack_idx = _rack_order(sizes, cfg, np.random.default_rng([seed, _RACKS]))
    hw_all = np.concatenate(hw)[np.concatenate([[0], np.cumsum(sizes)[:-1]])[rack_tenant] + rack_idx]
    disk = np.asarray([h.disk_gb for h in cfg.hardware], dtype=np.float64)[hw_all]
    jitter = rng_hw.uniform(1.0 - cfg.free_storage_jitter, 1.0 + cfg.free_storage_jitter, size=n_servers)
    storage = np.round(np.minimum(disk, disk * free_frac[rack_tenant] * jitter))
    rack = np.arange(n_servers) // cfg.rack_size
    inventory = Inventory(
        server=tuple(f"srv-{i:05d}" for i in range(n_servers)),
        tenant=tuple(tenant_of[t] for t in rack_tenant),
        environment=tuple(env_of[t] for t in rack_tenant),
        rack=tuple(f"rack-{r:04d}" for r in rack),
        cores=np.asarray([cfg.hardware[h].cores for h in hw_all], dtype=np.float64),
        memory_mb=np.asarray([cfg.hardware[h].memory_mb for h in hw_all], dtype=np.float64),
        storage_gb=storage,
        hardware=tuple(cfg.hardware[h].name for h in hw_all),
        datacenter=(cfg.datacenter,) * n_servers,
        msb=tuple(f"msb-{r // cfg.racks_per_msb:02d}" for r in rack),
    )
    return inventory, rack_tenant


def generate_reimages(inventory: Inventory, *, days: float, seed: int, config: GeneratorConfig | None = None,
                      start_s: float | None = None) -> ReimageEvents:
    """Reimages of any inventory (generated or converted) over ``days`` days with the generator's model.

    Tenants and environments come from the inventory; an environment's kind (prod / dev / test)
    from its name prefix (others count as prod). Times start at ``start_s`` (default: the config's).
    """
    from placement_service.traces.config import GeneratorConfig

    cfg = config or GeneratorConfig()
    tenants, server_tenant = np.unique(np.asarray(inventory.tenant, dtype=str), return_inverse=True)
    env_by_tenant: dict[str, str] = {}
    for t, e in zip(inventory.tenant, inventory.environment, strict=True):
        env_by_tenant.setdefault(t, e)
    env_of = [env_by_tenant[str(t)] for t in tenants]
    ts, server = build_reimages(server_tenant, env_of, days, cfg, seed)
    start = cfg.start_s if start_s is None else start_s
    return ReimageEvents(timestamp_s=start + ts, server=tuple(np.asarray(inventory.server, dtype=object)[server].tolist()))


def build_reimages(
    server_tenant: np.ndarray, env_of: list[str], days: float, cfg: GeneratorConfig, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since the start, server index) of every reimage in ``days`` days, sorted by time."""
    tenant_kind = np.asarray([environment_kind(e) for e in env_of], dtype=np.int64)
    return _reimages(
        server_tenant, tenant_kind, np.asarray(env_of), days, cfg, np.random.default_rng([seed, _REIMAGES])
    )


def _hardware(sizes: np.ndarray, cfg: GeneratorConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Per tenant, the hardware type index of each of its servers."""
    shares = np.asarray([h.share for h in cfg.hardware], dtype=np.float64)
    shares /= shares.sum()
    out = []
    for size in sizes:
        first = int(rng.choice(len(shares), p=shares))
        hw = np.full(int(size), first, dtype=np.int64)
        if size >= cfg.second_hardware_min_servers and len(shares) > 1:
            second = int(rng.choice(len(shares), p=shares))
            hw[: int(round(cfg.second_hardware_frac * size))] = second
        out.append(hw)
    return out


def _rack_order(sizes: np.ndarray, cfg: GeneratorConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Datacenter order of servers as (tenant, index within tenant): tenants installed in shuffled chunks."""
    chunks_t: list[int] = []
    chunks_lo: list[int] = []
    chunks_n: list[int] = []
    for t, size in enumerate(sizes):
        for lo in range(0, int(size), cfg.rack_chunk):
            chunks_t.append(t)
            chunks_lo.append(lo)
            chunks_n.append(min(cfg.rack_chunk, int(size) - lo))
    perm = rng.permutation(len(chunks_t))
    n = np.asarray(chunks_n, dtype=np.int64)[perm]
    t_arr = np.repeat(np.asarray(chunks_t, dtype=np.int64)[perm], n)
    offsets = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    idx = np.repeat(np.asarray(chunks_lo, dtype=np.int64)[perm], n) + offsets
    return t_arr, idx


def _reimages(
    server_tenant: np.ndarray,
    tenant_kind: np.ndarray,
    tenant_env: np.ndarray,
    days: float,
    cfg: GeneratorConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(times, server indices) of all reimages in ``days`` days, sorted by time then server."""
    n_servers = len(server_tenant)
    months = days * DAY_S / MONTH_S
    n_tenants = len(tenant_kind)
    kind_factor = np.asarray(cfg.reimage_kind_factor, dtype=np.float64)[tenant_kind]
    tenant_rate = rng.lognormal(np.log(cfg.reimage_tenant_median), cfg.reimage_tenant_sigma, size=n_tenants)
    tenant_rate = np.minimum(tenant_rate * kind_factor, cfg.reimage_rate_max)
    server_mult = rng.gamma(cfg.reimage_server_shape, 1.0 / cfg.reimage_server_shape, size=n_servers)
    # Independent reimages, month by month: Poisson(rate x month factor x server factor x length)
    # per server, uniform times. The month factor LogNormal(-s^2/2, s) (mean 1) lets a tenant's
    # rate drift from month to month while its rank among tenants mostly holds.
    servers: list[np.ndarray] = []
    times: list[np.ndarray] = []
    end_s = days * DAY_S
    sigma = cfg.reimage_month_sigma
    for lo in np.arange(0.0, end_s, MONTH_S):
        hi = min(lo + MONTH_S, end_s)
        month = (
            rng.lognormal(-sigma * sigma / 2, sigma, size=n_tenants) if sigma > 0 else np.ones(n_tenants)
        )
        counts = rng.poisson(tenant_rate[server_tenant] * month[server_tenant] * server_mult * (hi - lo) / MONTH_S)
        servers.append(np.repeat(np.arange(n_servers), counts))
        times.append(rng.uniform(lo, hi, size=int(counts.sum())))
    # Correlated reimages: per environment, Poisson events that hit many of its servers at once.
    env_names, env_code = np.unique(tenant_env, return_inverse=True)
    env_kind = np.zeros(len(env_names), dtype=np.int64)
    env_kind[env_code] = tenant_kind
    rates = np.asarray(cfg.correlated_events_per_month, dtype=np.float64)[env_kind] * months
    n_events = rng.poisson(rates)
    servers_of_tenant = [np.flatnonzero(server_tenant == t) for t in range(n_tenants)]
    tenants_of_env = [np.flatnonzero(env_code == e) for e in range(len(env_names))]
    for e in np.flatnonzero(n_events):
        for _ in range(int(n_events[e])):
            members = tenants_of_env[e]
            if rng.random() >= cfg.correlated_whole_env_prob:
                members = members[[int(rng.integers(len(members)))]]
            pool = np.concatenate([servers_of_tenant[t] for t in members])
            frac = rng.uniform(*cfg.correlated_server_frac)
            hit = rng.choice(pool, size=max(1, int(round(frac * len(pool)))), replace=False)
            start = rng.uniform(0.0, max(days * DAY_S - cfg.correlated_window_s, 0.0))
            servers.append(np.sort(hit))
            times.append(start + rng.uniform(0.0, cfg.correlated_window_s, size=len(hit)))
    s = np.concatenate(servers)
    ts = np.round(np.concatenate(times))
    order = np.lexsort((s, ts))
    s, ts = s[order], ts[order]
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = (s[1:] != s[:-1]) | (ts[1:] != ts[:-1])  # one event per (server, second)
    return ts[keep], s[keep]


def correlated_reimage_events(
    events: ReimageEvents, inventory: Inventory, *, window_s: float = 4 * 3600.0, min_servers: int = 10
) -> list[tuple[str, float, int]]:
    """Bursts of reimages in one environment: (environment, first time, servers) with at least
    ``min_servers`` distinct servers reimaged within ``window_s`` of the burst's first event.

    Greedy scan per environment in time order; a burst ends at the first event after its window.
    """
    env_of = dict(zip(inventory.server, inventory.environment, strict=True))
    by_env: dict[str, list[tuple[float, str]]] = {}
    for t, s in zip(events.timestamp_s, events.server, strict=True):
        if s in env_of:
            by_env.setdefault(env_of[s], []).append((float(t), s))
    bursts = []
    for env, rows in sorted(by_env.items()):
        rows.sort()
        i = 0
        while i < len(rows):
            t0 = rows[i][0]
            j = i
            while j < len(rows) and rows[j][0] - t0 <= window_s:
                j += 1
            servers = {s for _, s in rows[i:j]}
            if len(servers) >= min_servers:
                bursts.append((env, t0, len(servers)))
                i = j
            else:
                i += 1
    return bursts
