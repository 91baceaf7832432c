"""A synthetic datacenter calibrated to the harvesting paper's characterization (its Section 3).

``generate_datacenter(n_servers, seed=...)`` returns the three trace files' content plus each tenant's
true pattern. Every distribution and its parameters are fields of :class:`GeneratorConfig`, explained
(with units and the paper's numbers they aim at) in ``docs/generator.md``. Steps:

1. tenant sizes (servers): heavy-tailed (Pareto), until the servers are used up;
2. patterns: big tenants are more likely periodic (user-facing) until ~40% of the servers are
   periodic, then ~25% of the servers go to unpredictable tenants, the rest (most tenants) constant;
3. environments group tenants (a tenant is an <environment, machine function> pair): kinds
   production / development / testing follow the pattern, groups of ~3 tenants;
4. hardware (a few server types: cores, memory, disk), free storage per server, racks, MSBs, a
   datacenter;
5. reimages: independent per-server Poisson events (heavy-tailed per-tenant rates, per-server
   spread) plus correlated events that reimage many servers of one environment within hours;
6. utilization: one series per tenant from :mod:`placement_service.traces.synth`, written for at most
   ``sampled_servers_per_tenant`` of its servers (each = tenant series x imbalance + noise).

Deterministic: each step draws from its own named stream ``default_rng([seed, step])`` (per tenant
``[seed, step, i]``), so the same arguments give byte-identical files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement_service.core.types import Inventory, Pattern, ReimageEvents
from placement_service.traces import io
from placement_service.traces.config import DEFAULT_HARDWARE, ConfigError, GeneratorConfig, HardwareType
from placement_service.traces.fleet import build_inventory, build_reimages, correlated_reimage_events
from placement_service.traces.io import UtilizationSamples, categorical
from placement_service.traces.synth import DAY_S, synth_tenant_cpu

__all__ = [
    "DEFAULT_HARDWARE",
    "ConfigError",
    "GeneratedDatacenter",
    "GeneratorConfig",
    "HardwareType",
    "generate_datacenter",
    "summarize",
    "write_datacenter",
]

logger = logging.getLogger(__name__)

MONTH_S = 30 * DAY_S
DEFAULT_CONFIG = GeneratorConfig()

# Named random streams (step numbers of the module docstring; 4, 5 and 7 are in ``fleet``).
_SIZES, _PATTERNS, _ENVS, _SERIES = 1, 2, 3, 6

_KINDS = ("prod", "dev", "test")
_PATTERN_ORDER = (Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE)
_FUNCTIONS = {
    Pattern.PERIODIC: ("frontend", "search", "web", "api", "ads", "mail", "portal", "edge"),
    Pattern.CONSTANT: ("crawler", "scrubber", "index", "storage", "cache", "logs", "queue", "db"),
    Pattern.UNPREDICTABLE: ("test", "build", "analytics", "staging", "perf", "canary", "adhoc", "ml"),
}


@dataclass(frozen=True)
class GeneratedDatacenter:
    """The three trace files' content and each tenant's true pattern (empty for real traces)."""

    utilization: UtilizationSamples
    reimages: ReimageEvents
    inventory: Inventory
    tenant_pattern: dict[str, Pattern]
    days: float = 30.0
    interval_s: float = 300.0
    reimage_days: float | None = None
    """Length of the reimage trace when it differs from ``days``."""


# ----------------------------------------------------------------------------------------------
# 1-3: tenants, patterns, environments
# ----------------------------------------------------------------------------------------------


def tenant_sizes(n_servers: int, cfg: GeneratorConfig, rng: np.random.Generator) -> np.ndarray:
    """Servers per tenant: ``ceil(min * (1 + Lomax(alpha)))`` capped, drawn until ``n_servers`` are used."""
    cap = max(cfg.tenant_size_min, int(cfg.tenant_size_max_frac * n_servers))
    sizes: list[int] = []
    left = n_servers
    while left > 0:
        batch = np.ceil(cfg.tenant_size_min * (1.0 + rng.pareto(cfg.tenant_size_alpha, size=64)))
        for s in np.minimum(batch, cap).astype(np.int64):
            take = int(min(s, left))
            sizes.append(take)
            left -= take
            if left == 0:
                break
    return np.asarray(sizes, dtype=np.int64)


def _fill_share(order: np.ndarray, sizes: np.ndarray, target: float, eligible: np.ndarray) -> np.ndarray:
    """Walk tenants in ``order``; take one when it brings the taken servers closer to ``target``."""
    taken = np.zeros(len(sizes), dtype=bool)
    total = 0.0
    for i in order:
        if eligible[i] and abs(total + sizes[i] - target) < abs(total - target):
            taken[i] = True
            total += sizes[i]
    return taken


def assign_patterns(sizes: np.ndarray, cfg: GeneratorConfig, rng: np.random.Generator) -> list[Pattern]:
    """Periodic tenants by a draw weighted by ``size ** periodic_size_exponent`` up to
    ``periodic_server_share`` of the servers; unpredictable ones among the rest, weighted by
    ``size ** unpredictable_size_exponent``, up to ``unpredictable_server_share``; others constant."""
    n_servers = float(sizes.sum())
    # Weighted random order (Efraimidis-Spirakis keys u ** (1 / w)).
    w = sizes.astype(np.float64) ** cfg.periodic_size_exponent
    keys = rng.random(len(sizes)) ** (1.0 / w)
    periodic = _fill_share(np.argsort(-keys, kind="stable"), sizes, cfg.periodic_server_share * n_servers,
                           np.ones(len(sizes), dtype=bool))
    w = sizes.astype(np.float64) ** cfg.unpredictable_size_exponent
    keys = rng.random(len(sizes)) ** (1.0 / w)
    unpredictable = _fill_share(np.argsort(-keys, kind="stable"), sizes,
                                cfg.unpredictable_server_share * n_servers, ~periodic)
    return [
        Pattern.PERIODIC if p else Pattern.UNPREDICTABLE if u else Pattern.CONSTANT
        for p, u in zip(periodic, unpredictable, strict=True)
    ]


def name_tenants(patterns: list[Pattern], cfg: GeneratorConfig, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Environment and tenant name of each tenant (``<kind>-<k>`` and ``<environment>.<function>``)."""
    n = len(patterns)
    kind = np.empty(n, dtype=np.int64)
    for i, p in enumerate(patterns):
        probs = np.asarray(cfg.environment_kind_probs[_PATTERN_ORDER.index(p)], dtype=np.float64)
        kind[i] = int(rng.choice(3, p=probs / probs.sum()))
    env_of = [""] * n
    tenant_of = [""] * n
    p_geo = 1.0 / max(cfg.tenants_per_environment_mean, 1.0)
    for k, kname in enumerate(_KINDS):
        members = rng.permutation(np.flatnonzero(kind == k))
        env_id = 0
        pos = 0
        while pos < len(members):
            size = int(rng.geometric(p_geo))
            env = f"{kname}-{env_id:03d}"
            used: dict[str, int] = {}
            for i in members[pos : pos + size]:
                base = str(rng.choice(_FUNCTIONS[patterns[i]]))
                used[base] = used.get(base, 0) + 1
                func = base if used[base] == 1 else f"{base}-{used[base]}"
                env_of[i] = env
                tenant_of[i] = f"{env}.{func}"
            pos += size
            env_id += 1
    return env_of, tenant_of


# ----------------------------------------------------------------------------------------------
# 6: utilization samples
# ----------------------------------------------------------------------------------------------


def _peak_phase_s(cfg: GeneratorConfig, rng: np.random.Generator) -> float:
    """Phase of a periodic tenant: its daily peak at ``peak_hour_utc`` +- ``peak_hour_std_h``
    (or uniform for ``peak_hour_uniform_frac`` of them), its weekend on Saturday and Sunday.

    ``synth`` puts the peak at ``t = phase (mod 1 day)`` and the weekend on the UTC days ``d``
    (since the epoch, a Thursday) with ``(d - floor(phase / 1 day)) mod 7 in {5, 6}``: a phase of
    4 days + the peak hour makes them Saturday and Sunday.
    """
    if rng.random() < cfg.peak_hour_uniform_frac:
        hour = float(rng.uniform(0.0, 24.0))
    else:
        hour = float(rng.normal(cfg.peak_hour_utc, cfg.peak_hour_std_h)) % 24.0
    return 4 * DAY_S + hour * 3600.0


def _samples(
    patterns: list[Pattern],
    tenant_names: list[str],
    env_names: list[str],
    sampled: list[np.ndarray],
    server_names: np.ndarray,
    reimage_ts: np.ndarray,
    reimage_server: np.ndarray,
    seed: int,
    days: float,
    interval_s: float,
    cfg: GeneratorConfig,
) -> UtilizationSamples:
    n_slots = int(round(days * DAY_S / interval_s))
    slot_t = cfg.start_s + np.arange(n_slots, dtype=np.float64) * interval_s
    # Slots each server is down after a reimage (no samples).
    down: dict[int, list[tuple[int, int]]] = {}
    down_slots = int(np.ceil(cfg.reimage_downtime_s / interval_s))
    for t, s in zip(reimage_ts, reimage_server, strict=True):
        if down_slots:
            first = int(np.ceil(t / interval_s))
            down.setdefault(int(s), []).append((first, first + down_slots))
    # Preallocate for every sampled server and slot; rows are filled tenant by tenant and the
    # arrays trimmed at the end (one copy of the samples in memory, not two).
    capacity = sum(len(v) for v in sampled) * n_slots
    ts_out = np.empty(capacity, dtype=np.float64)
    server_out = np.empty(capacity, dtype=np.int32)
    tenant_out = np.empty(capacity, dtype=np.int32)
    cpu_out = np.empty(capacity, dtype=np.float64)
    mem_out = np.empty(capacity, dtype=np.float64)
    pos = 0
    for i, pattern in enumerate(patterns):
        rng = np.random.default_rng([seed, _SERIES, i])
        weekly = pattern is Pattern.PERIODIC and rng.random() < cfg.weekly_frac
        base = synth_tenant_cpu(
            pattern,
            n_slots,
            interval_s,
            rng,
            noise=cfg.series_noise,
            weekly=weekly,
            start_s=cfg.start_s,
            phase_s=_peak_phase_s(cfg, rng) if pattern is Pattern.PERIODIC else None,
        )
        mem_level = rng.uniform(*cfg.memory_level)
        servers = sampled[i]
        k = len(servers)
        imbalance = rng.normal(0.0, cfg.server_imbalance, size=k)
        imbalance -= imbalance.mean()
        cpu = base[None, :] * (1.0 + imbalance[:, None]) + rng.normal(0.0, cfg.server_noise, size=(k, n_slots))
        cpu = np.asarray(np.round(np.clip(cpu, 0.0, 1.0), cfg.cpu_decimals), dtype=np.float64)
        mem = mem_level + 0.3 * (cpu - base.mean()) + rng.normal(0.0, 0.01, size=(k, n_slots))
        mem = np.asarray(np.round(np.clip(mem, 0.0, 1.0), cfg.cpu_decimals), dtype=np.float64)
        present = rng.random((k, n_slots)) >= cfg.missing_sample_frac
        for row, s in enumerate(servers):
            for lo, hi in down.get(int(s), ()):
                present[row, max(lo, 0) : max(min(hi, n_slots), 0)] = False
        rows, cols = np.nonzero(present)
        end = pos + len(rows)
        ts_out[pos:end] = slot_t[cols]
        server_out[pos:end] = servers[rows]
        tenant_out[pos:end] = i
        cpu_out[pos:end] = cpu[present]
        mem_out[pos:end] = mem[present]
        pos = end
    server_idx, tenant_idx = server_out[:pos], tenant_out[:pos]
    # Environment of each tenant, as codes.
    env_u, env_code = np.unique(np.asarray(env_names, dtype=object).astype(str), return_inverse=True)
    env_idx = env_code.astype(np.int32)[tenant_idx]
    t_names = np.asarray(tenant_names, dtype=object)
    samples = UtilizationSamples(
        timestamp_s=ts_out[:pos],
        server=categorical(server_names, server_idx),
        tenant=categorical(t_names, tenant_idx),
        cpu=cpu_out[:pos],
        memory=mem_out[:pos],
        environment=categorical(env_u.astype(object), env_idx),
    )
    samples.with_factorized("server", np.asarray(server_names, dtype=object), server_idx)
    samples.with_factorized("tenant", t_names, tenant_idx)
    return samples.with_factorized("environment", env_u.astype(object), env_idx)


# ----------------------------------------------------------------------------------------------
# Putting it together
# ----------------------------------------------------------------------------------------------


def generate_datacenter(
    n_servers: int,
    *,
    seed: int,
    days: float = 30,
    interval_s: float = 300,
    config: GeneratorConfig = DEFAULT_CONFIG,
    reimage_days: float | None = None,
) -> GeneratedDatacenter:
    """A synthetic datacenter of ``n_servers`` servers over ``days`` days of ``interval_s`` slots.

    ``reimage_days``: length of the reimage trace (default ``days``), e.g. a year of reimages for a
    durability study next to a month of utilization.
    """
    cfg = config
    if n_servers < 1:
        raise ValueError(f"n_servers must be >= 1, got {n_servers}")
    if days <= 0 or interval_s <= 0:
        raise ValueError("days and interval_s must be positive")
    # 1-3. tenants, patterns, environments
    sizes = tenant_sizes(n_servers, cfg, np.random.default_rng([seed, _SIZES]))
    patterns = assign_patterns(sizes, cfg, np.random.default_rng([seed, _PATTERNS]))
    env_of, tenant_of = name_tenants(patterns, cfg, np.random.default_rng([seed, _ENVS]))
    n_tenants = len(sizes)
    # 4-5. hardware, storage, racks; reimages
    inventory, rack_tenant = build_inventory(sizes, tenant_of, env_of, cfg, seed)
    if reimage_days is not None and reimage_days <= 0:
        raise ValueError("reimage_days must be positive")
    re_ts, re_server = build_reimages(rack_tenant, env_of, reimage_days or days, cfg, seed)
    server_names = np.asarray(inventory.server, dtype=object)
    reimages = ReimageEvents(timestamp_s=cfg.start_s + re_ts, server=tuple(server_names[re_server].tolist()))
    # 6. utilization of up to K servers per tenant (the first K of the tenant in datacenter order)
    k = cfg.sampled_servers_per_tenant
    sampled = []
    for t in range(n_tenants):
        members = np.flatnonzero(rack_tenant == t)
        sampled.append(members if k <= 0 else members[:k])
    utilization = _samples(
        patterns, tenant_of, env_of, sampled, server_names, re_ts, re_server, seed, days, interval_s, cfg
    )
    logger.info(
        "generated %d servers, %d tenants, %d samples, %d reimages",
        n_servers, n_tenants, len(utilization), len(reimages.server),
    )
    return GeneratedDatacenter(
        utilization=utilization,
        reimages=reimages,
        inventory=inventory,
        tenant_pattern={tenant_of[i]: patterns[i] for i in range(n_tenants)},
        days=float(days),
        interval_s=float(interval_s),
        reimage_days=float(reimage_days) if reimage_days is not None else None,
    )


# ----------------------------------------------------------------------------------------------
# Output and summary
# ----------------------------------------------------------------------------------------------

TRACE_FILES = ("utilization", "reimages", "inventory")


def write_datacenter(dc: GeneratedDatacenter, out_dir: str | Path, *, fmt: str = "parquet") -> dict[str, Path]:
    """Write ``utilization``, ``reimages`` and ``inventory`` (``.parquet`` or ``.csv.gz``) into ``out_dir``.

    The three files are staged first and renamed into place together (:func:`io.write_tables`).
    """
    suffix = {"parquet": ".parquet", "csv": ".csv.gz"}[fmt]
    out = Path(out_dir)
    paths = {name: out / f"{name}{suffix}" for name in TRACE_FILES}
    io.write_tables(
        [
            (io.utilization_table(dc.utilization), paths["utilization"]),
            (io.reimages_table(dc.reimages), paths["reimages"]),
            (io.inventory_table(dc.inventory), paths["inventory"]),
        ]
    )
    return paths


def summarize(dc: GeneratedDatacenter) -> dict[str, object]:
    """Numbers worth printing about a (generated or converted) datacenter."""
    from placement_service.traces.series import server_reimage_rates

    inv = dc.inventory
    tenants, sizes = np.unique(np.asarray(inv.tenant, dtype=str), return_counts=True)
    by_pattern: dict[str, dict[str, float]] = {}
    for t, n in zip(tenants, sizes, strict=True):
        p = dc.tenant_pattern[str(t)].value if str(t) in dc.tenant_pattern else "unknown"
        d = by_pattern.setdefault(p, {"tenants": 0, "servers": 0})
        d["tenants"] += 1
        d["servers"] += int(n)
    reimage_days = dc.reimage_days or dc.days
    rates = server_reimage_rates(dc.reimages, inv, span_s=reimage_days * DAY_S)
    bursts = correlated_reimage_events(dc.reimages, inv)
    return {
        "servers": len(inv),
        "tenants": len(tenants),
        "environments": len(set(inv.environment)),
        "racks": len(set(inv.rack)),
        "tenant_size": {
            "median": float(np.median(sizes)),
            "p90": float(np.percentile(sizes, 90)),
            "max": int(sizes.max()),
            "top10_server_share": float(np.sort(sizes)[::-1][: max(1, len(sizes) // 10)].sum() / sizes.sum()),
        },
        "patterns": by_pattern,
        "samples": len(dc.utilization),
        "sampled_servers": int(len(np.unique(dc.utilization.factorize("server")[1]))),
        "days": dc.days,
        "interval_s": dc.interval_s,
        "reimages": {
            "days": reimage_days,
            "events": len(dc.reimages.server),
            "servers_at_most_1_per_month": float(np.mean(rates <= 1.0)),
            "max_per_server_month": float(rates.max()) if len(rates) else 0.0,
            "correlated_bursts": len(bursts),
            "largest_burst_servers": max((b[2] for b in bursts), default=0),
        },
        "storage_tb": {
            "total": float(inv.storage_gb.sum() / 1000.0),
            "per_server_median": float(np.median(inv.storage_gb) / 1000.0),
            "servers_without_space": int((inv.storage_gb <= 0).sum()),
        },
        "cores": float(inv.cores.sum()),
    }
