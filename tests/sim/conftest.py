"""Tiny hand-made datacenters for the simulator's tests (no /work/shared needed)."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.types import Edge, Inventory, Job, ReimageEvents, TenantSeries
from placement_service.sim.datacenter import SimDatacenter, build_datacenter

DAY_S = 86400.0


def make_inventory(
    tenants: list[str], servers_per_tenant: int, *, cores: float = 12.0, storage_gb: float = 1000.0, rack_size: int = 4
) -> Inventory:
    n = len(tenants) * servers_per_tenant
    tenant = tuple(t for t in tenants for _ in range(servers_per_tenant))
    return Inventory(
        server=tuple(f"s{i:03d}" for i in range(n)),
        tenant=tenant,
        environment=tuple(f"env-{t}" for t in tenant),
        rack=tuple(f"r{i // rack_size}" for i in range(n)),
        cores=np.full(n, cores),
        memory_mb=np.full(n, 32768.0),
        storage_gb=np.full(n, storage_gb),
    )


def make_dc(
    cpu: np.ndarray,
    servers_per_tenant: int = 4,
    *,
    interval_s: float = 300.0,
    reimages: ReimageEvents | None = None,
    cores: float = 12.0,
    storage_gb: float = 1000.0,
) -> SimDatacenter:
    tenants = [f"t{i}" for i in range(cpu.shape[0])]
    series = TenantSeries(tuple(tenants), 0.0, interval_s, np.asarray(cpu, dtype=np.float64))
    inv = make_inventory(tenants, servers_per_tenant, cores=cores, storage_gb=storage_gb)
    return build_datacenter("tiny", inv, series, reimages)


def daily_cpu(n_tenants: int, days: float, interval_s: float = 300.0, seed: int = 0) -> np.ndarray:
    """Mixed tenants: flat ones and ones with a strong daily cycle, values in [0.05, 0.6]."""
    rng = np.random.default_rng(seed)
    n = int(days * DAY_S / interval_s)
    t = np.arange(n) * interval_s
    rows = []
    for i in range(n_tenants):
        if i % 2 == 0:
            rows.append(np.full(n, 0.2 + 0.02 * i) + rng.normal(0, 0.003, n))
        else:
            rows.append(0.3 + 0.28 * np.sin(2 * np.pi * (t / DAY_S + i / n_tenants)) + rng.normal(0, 0.01, n))
    return np.clip(np.array(rows), 0.0, 1.0)


def chain_job(name: str, tasks: list[int]) -> Job:
    vertices = {f"v{i}": k for i, k in enumerate(tasks)}
    edges = tuple(Edge(f"v{i}", f"v{i + 1}") for i in range(len(tasks) - 1))
    return Job(name, None, vertices, edges)


@pytest.fixture
def tiny_dc() -> SimDatacenter:
    return make_dc(daily_cpu(6, 4.0), servers_per_tenant=5)
