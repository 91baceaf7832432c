from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placement_service.core.mover import MoveConfig, MoveReport
from placement_service.core.types import ReimageEvents
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
from placement_service.sim.run import run_durability
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


def test_reimages_find_moved_replicas_where_they_went_not_where_they_were() -> None:
    # A scripted mover (the contract of core.mover's report) moves, on day 1, every replica held by
    # server 0 to server 35 (another tenant). Server 0's reimage on day 1.5 must then hurt none of
    # the moved blocks, and server 35's on day 2.5 must wipe every one of them.
    dc = _dc()
    grid = placement_grid(dc, {t: 0.1 * i for i, t in enumerate(dc.series.tenants)},
                          {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})
    moves: list[np.ndarray] = []

    def mover(t_s: float, rep: np.ndarray) -> MoveReport:
        if moves:
            return MoveReport(0, 0, 0, 0.0, 0.0, np.zeros(0, np.int64), np.zeros(0, np.int64))
        b, k = np.nonzero(rep == 0)
        keep = ~(rep[b] == 35).any(axis=1)  # a block already on server 35 stays
        b, k = b[keep], k[keep]
        rep[b, k] = 35
        moves.append(b)
        return MoveReport(len(b), len(b), len(b), 0.0, 0.0, b.astype(np.int64), k.astype(np.int64))

    wipes: list[tuple[float, set[int]]] = []
    sched = ReimageSchedule(np.array([1.5 * DAY_S, 2.5 * DAY_S]), np.array([0, 35]))
    rng = np.random.default_rng
    res = simulate_durability(
        dc, lambda: make_placer(HdfsSystem.H, dc, grid, seed=1, block_size_mb=256.0), HdfsSystem.H, 3, sched,
        DurabilityConfig(days=3, blocks=3000), create_rng=rng(1), place_rng=rng(2), repair_rng=rng(3),
        on_wipe=lambda t, blocks, servers, lost: wipes.append((t, set(blocks.tolist()))),
        mover=mover, move_every_s=DAY_S,
    )
    moved = set(moves[0].tolist())
    assert len(moved) > 30 and res.moved_replicas == len(moved) and res.lost_blocks == 0
    (t0, first), (t1, second) = wipes
    assert 1.5 * DAY_S <= t0 < 1.6 * DAY_S and 2.5 * DAY_S <= t1 < 2.6 * DAY_S  # step ends
    assert not first & moved
    assert moved <= second


def test_the_mover_runs_in_the_durability_year_without_losing_replicas() -> None:
    # The trio t0, t4, t8 (one per grid row and column) is idle in the one-day history and busy
    # together from the second day on; the CPU series (3 days) repeats over the 6 simulated days.
    # HDFS-H-cobusy put blocks on the trio alone; the mover's daily passes move one replica of each
    # such block. No reimages: moves copy then delete, so no block ever has fewer replicas.
    n_t, day = 18, 288
    cpu = np.zeros((n_t, 3 * day))
    for i in range(n_t):
        cpu[i] = 0.1 + 0.1 * ((i % 9) // 3)
    cpu[np.ix_([0, 4, 8], np.arange(day, 3 * day))] = 0.95
    dc = make_dc(cpu, servers_per_tenant=3, storage_gb=4000.0)
    dc = dataclasses.replace(dc, reimages=ReimageEvents(np.zeros(0), ()))
    recs = {
        (r["system"], r["run"]): r
        for r in run_durability(dc, replicas=[3], runs=2, seed=0, config=DurabilityConfig(days=6, blocks=4000),
                                history_days=1.0, systems=[HdfsSystem.H_COBUSY, HdfsSystem.H_COBUSY_MOVER],
                                move_config=MoveConfig(max_moves_frac=1.0))
    }
    for run in range(2):
        plain, moved = recs[("HDFS-H-cobusy", run)], recs[("HDFS-H-cobusy-mover", run)]
        assert plain["moved_replicas"] == 0 and moved["moved_replicas"] > 0
        for r in (plain, moved):
            assert r["lost_blocks"] == r["repairs"] == r["relaxed_placements"] == r["failed_placements"] == 0


@pytest.mark.parametrize("system", [HdfsSystem.STOCK, HdfsSystem.H])
def test_one_left_counts_every_block_a_step_takes_to_one_replica_or_none(system: HdfsSystem) -> None:
    # A server of each tenant (and two more) reimaged in one step, nothing before: every block they
    # hold twice or three times drops to one replica or none in that step (lost when three). With no
    # repair token ever, the blocks left with one replica stay so for the 12 steps from the
    # reimage's to the last.
    wiped: list[np.ndarray] = []
    dc = _dc()
    grid = placement_grid(dc, {t: 0.1 * i for i, t in enumerate(dc.series.tenants)},
                          {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})
    rng = np.random.default_rng
    res = simulate_durability(
        dc, lambda: make_placer(system, dc, grid, seed=1, block_size_mb=256.0), system, 3,
        ReimageSchedule(np.full(11, 2.0 * DAY_S + 1.0), np.array([*range(0, 36, 4), 1, 5])),
        DurabilityConfig(days=2.5, blocks=3000, repair_blocks_per_hour=1e-9),
        create_rng=rng(1), place_rng=rng(2), repair_rng=rng(3),
        on_wipe=lambda t, blocks, servers, lost: wiped.append(blocks),
    )
    (blocks,) = wiped
    _, per_block = np.unique(blocks, return_counts=True)
    assert res.failed_placements == 0 and res.repairs == 0
    assert res.lost_blocks == int((per_block == 3).sum()) > 0
    assert res.one_left == int((per_block >= 2).sum()) > res.lost_blocks
    assert res.one_left_block_hours == pytest.approx(12.0 * int((per_block == 2).sum()))


def test_a_block_repaired_in_its_step_spends_no_hour_with_one_replica() -> None:
    # Six servers in one step: few enough that re-replication (30 copies per source an hour) redoes
    # every wiped replica within the step.
    sched = ReimageSchedule(np.full(6, 2.0 * DAY_S + 1.0), np.array([0, 1, 4, 5, 8, 12]))
    res = _run(HdfsSystem.STOCK, 3, sched, DurabilityConfig(days=2.5, blocks=3000))
    assert res.one_left > 0 and res.repairs > 0 and res.one_left_block_hours == 0.0


def test_a_repair_takes_a_survivor_with_capacity_left_as_hdfs_does() -> None:
    # HDFS's chooseSourceDatanodes skips replicas whose node reached its replication limit and
    # picks among the others: a block whose random pick is at its limit is not left waiting.
    from placement_service.sim.durability import _repair_sources

    rows = np.array([[0, 1, -1]] * 40 + [[2, -1, -1]] * 5, dtype=np.int32)
    capacity = np.array([0.0, 50.0, 3.0])
    for seed in range(5):
        src, ok = _repair_sources(rows, capacity, np.random.default_rng(seed))
        assert ok[:40].all() and (src[:40] == 1).all()  # server 0 has no capacity: all from 1
        assert ok[40:].sum() == 3 and (src[40:][ok[40:]] == 2).all()  # server 2 serves 3 of its 5
    # capacity for all: 30 blocks on {0, 1}, 25 and 5 copies: every block is served, whatever the
    # random picks were (about 15 picked server 1; those past its 5 take server 0)
    rows = np.array([[0, 1]] * 30, dtype=np.int32)
    for seed in range(5):
        src, ok = _repair_sources(rows, np.array([25.0, 5.0]), np.random.default_rng(seed))
        assert ok.all() and np.bincount(src, minlength=2).tolist() == [25, 5]
    # blocks with one replica left come first in the queue: each takes its source before any later
    # block does, even when later blocks picked that source at random
    rows = np.array([[0, -1]] * 8 + [[0, 1]] * 30, dtype=np.int32)
    for seed in range(5):
        src, ok = _repair_sources(rows, np.array([8.0, 5.0]), np.random.default_rng(seed))
        assert ok[:8].all() and (src[:8] == 0).all() and ok.sum() == 13


def test_with_capacity_everywhere_a_repair_source_is_a_uniform_random_survivor() -> None:
    from placement_service.sim.durability import _repair_sources

    rows = np.array([[0, 1, 2]] * 3000 + [[3, -1, 4]] * 3000, dtype=np.int32)
    src, ok = _repair_sources(rows, np.full(5, 1e6), np.random.default_rng(0))
    assert ok.all()
    counts = np.bincount(src, minlength=5)
    assert np.all(np.abs(counts[:3] - 1000) < 100) and np.all(np.abs(counts[3:] - 1500) < 120)


def test_fewer_reimages_seen_means_fewer_re_replications() -> None:
    # One server of each tenant is reimaged every 5 days, the first month included (what the
    # placer knows beforehand); the others never. HDFS-H-cobusy with one reimage choice puts about
    # a quarter of the replicas it chooses on those servers; with two, about 1 in 16, so the year's
    # re-replications (the replicas those reimages wipe) fall. The tenant choice is the same rule.
    dc = make_dc(daily_cpu(9, 1.0), servers_per_tenant=4, storage_gb=4000.0)
    hot = [s for i, s in enumerate(dc.inventory.server) if i % 4 == 0]
    # (one tenant's at a time, half a day apart, so that no block loses every replica at once)
    at = np.arange(0.0, 60 * DAY_S, 5 * DAY_S)[:, None] + 3600.0 + 0.5 * DAY_S * np.arange(len(hot))[None, :]
    order = np.argsort(at.reshape(-1), kind="stable")
    events = ReimageEvents(at.reshape(-1)[order], tuple(np.array(hot * at.shape[0], dtype=object)[order].tolist()))
    dc = dataclasses.replace(dc, reimages=events, reimage_window_s=60 * DAY_S)

    def repairs(choices: int) -> list[int]:
        recs = run_durability(dc, replicas=[3], runs=2, seed=3, config=DurabilityConfig(days=60, blocks=3000),
                              history_days=1.0, systems=[HdfsSystem.H_COBUSY], reimage_choices=choices)
        assert all(r["lost_blocks"] == 0 for r in recs)
        return [int(r["repairs"]) for r in sorted(recs, key=lambda r: r["run"])]

    one, two = repairs(1), repairs(2)
    assert all(b < 0.8 * a for a, b in zip(one, two, strict=True)), (one, two)


def test_blocks_placed_in_daily_batches_are_written_at_their_own_step() -> None:
    # ``place_every_s`` (harvest whatif): a day's blocks are placed in one call at the day's start,
    # but each is written at its creation step, so a reimage of every server at hour 30.5 takes only
    # the blocks written by the end of its step (hour 31), as with one call per step.
    sched = ReimageSchedule(np.full(36, 30.5 * 3600.0), np.arange(36))
    per_step = _run(HdfsSystem.H, 3, sched, DurabilityConfig(days=2.0, blocks=2000))
    daily = _run(HdfsSystem.H, 3, sched, DurabilityConfig(days=2.0, blocks=2000, place_every_s=DAY_S))
    before = int((np.sort(np.random.default_rng(1).uniform(0.0, 2 * DAY_S, 2000)) < 31 * 3600.0).sum())
    assert per_step.lost_blocks == daily.lost_blocks == before
    assert daily.failed_placements == 0 and daily.repairs == 0
    with pytest.raises(ValueError, match="place_every_s"):
        DurabilityConfig(place_every_s=60.0)
