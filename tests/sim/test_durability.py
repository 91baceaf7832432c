from __future__ import annotations

import numpy as np
import pytest

from placement_service.sim.durability import DurabilityConfig, _ReplicaIndex, simulate_durability
from placement_service.sim.policy import (
    HdfsSystem,
    Placer,
    busy_hour_masks,
    cobusy_model,
    make_placer,
    placement_grid,
)
from placement_service.sim.reimages import ReimageSchedule
from tests.sim.conftest import daily_cpu, make_dc

DAY_S = 86400.0


def _dc():  # type: ignore[no-untyped-def]
    return make_dc(daily_cpu(9, 1.0), servers_per_tenant=4, storage_gb=2000.0)


def _run(system: HdfsSystem, replicas: int, schedule: ReimageSchedule, cfg: DurabilityConfig):  # type: ignore[no-untyped-def]
    dc = _dc()
    grid = placement_grid(dc, {t: 0.1 * i for i, t in enumerate(dc.series.tenants)},
                          {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})

    hours = busy_hour_masks(dc, dc.cpu, dc.cpu.shape[1], 2.0 / 3.0)
    cobusy = cobusy_model(dc, dc.cpu, dc.cpu.shape[1], 2.0 / 3.0)

    def factory() -> Placer:
        return make_placer(system, dc, grid, seed=1, block_size_mb=256.0, busy_hours=hours, cobusy=cobusy)

    rng = np.random.default_rng
    return simulate_durability(dc, factory, system, replicas, schedule, cfg,
                               create_rng=rng(1), place_rng=rng(2), repair_rng=rng(3))


def test_index_finds_every_replica() -> None:
    rng = np.random.default_rng(0)
    rep = np.full((500, 3), -1, dtype=np.int32)
    idx = _ReplicaIndex(rep, 20, rebuild_every=300)
    for _ in range(10):
        pos = rng.choice(1500, 100, replace=False)
        srv = rng.integers(0, 20, 100).astype(np.int32)
        idx.flat[pos] = srv
        idx.log(pos.astype(np.int64), srv)
        hit = np.array([3, 7])
        assert set(idx.on_servers(hit).tolist()) == set(np.flatnonzero(np.isin(idx.flat, hit)).tolist())
        idx.flat[idx.on_servers(hit)] = -1  # a reimage


@pytest.mark.parametrize("system", list(HdfsSystem))
def test_no_reimages_no_loss(system: HdfsSystem) -> None:
    res = _run(system, 3, ReimageSchedule(np.zeros(0), np.zeros(0, np.int64)), DurabilityConfig(days=10, blocks=2000))
    assert res.lost_blocks == 0 and res.repairs == 0 and res.failed_placements == 0


@pytest.mark.parametrize("system", list(HdfsSystem))
def test_single_reimage_is_repaired(system: HdfsSystem) -> None:
    sched = ReimageSchedule(np.array([9.5 * DAY_S]), np.array([5]))
    res = _run(system, 3, sched, DurabilityConfig(days=10, blocks=3000))
    assert res.lost_blocks == 0
    # every replica the reimage wiped (all queued at once) was re-created
    assert res.repairs == res.max_queue > 0
    if system not in (HdfsSystem.H_COBUSY, HdfsSystem.H_COBUSY_MOVER):
        # spread evenly, the server held about 3 * 3000 / 36 replicas (blocks created before day
        # 9.5); HDFS-H-cobusy (and the mover, which places like it) concentrates blocks on the
        # tenants least likely busy, so not they
        assert 100 < res.repairs < 400


def test_everything_reimaged_at_once_loses_every_block() -> None:
    sched = ReimageSchedule(np.full(36, 5.0 * DAY_S), np.arange(36))
    res = _run(HdfsSystem.H, 3, sched, DurabilityConfig(days=5.5, blocks=1000))
    created = res.blocks  # all blocks created over 5.5 days; those before day 5 die
    assert 0.85 * created < res.lost_blocks < created


def test_repairs_limited_per_source_per_hour() -> None:
    # reimage 4 servers (one tenant) then nothing: repairs per hour are capped by 30 per source
    sched = ReimageSchedule(np.full(4, 2.0 * DAY_S), np.arange(4))
    slow = _run(HdfsSystem.STOCK, 3, sched, DurabilityConfig(days=2.05, blocks=4000, repair_blocks_per_hour=1.0))
    fast = _run(HdfsSystem.STOCK, 3, sched, DurabilityConfig(days=2.05, blocks=4000, repair_blocks_per_hour=1000.0))
    assert slow.repairs < fast.repairs
    # two repair steps (hours 48 and 49) of at most one copy per source; 36 servers can be sources
    assert slow.repairs <= 36 * 2
