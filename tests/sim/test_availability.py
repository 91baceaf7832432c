from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.mover import MoveConfig
from placement_service.sim.availability import AvailabilityConfig, _all_busy_slots, simulate_availability
from placement_service.sim.policy import (
    CobusyMover,
    HdfsSystem,
    busy_hour_masks,
    cobusy_model,
    make_placer,
    placement_grid,
)
from tests.sim.conftest import make_dc


def _run(cpu: np.ndarray, system: HdfsSystem, replicas: int = 3, margin: float = 0.0, **kw: float):  # type: ignore[no-untyped-def]
    dc = make_dc(cpu, servers_per_tenant=3)
    peaks = {t: float(np.percentile(cpu[i], 99)) for i, t in enumerate(dc.series.tenants)}
    grid = placement_grid(dc, peaks, {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})
    cfg = AvailabilityConfig(days=1.0, history_days=1.0, blocks=2000, accesses=20000, **kw)  # type: ignore[arg-type]
    hours = busy_hour_masks(dc, cpu, 288, cfg.busy_threshold, margin_cpu=margin)
    cobusy = cobusy_model(dc, cpu, 288, cfg.busy_threshold)
    placer = make_placer(system, dc, grid, seed=0, block_size_mb=256.0, busy_hours=hours, cobusy=cobusy)
    rng = np.random.default_rng
    return simulate_availability(dc, dc.cpu, placer, system, replicas, cfg,
                                 create_rng=rng(0), place_rng=rng(1), access_rng=rng(2))


@pytest.mark.parametrize("system", list(HdfsSystem))
def test_idle_never_fails_and_all_busy_always_fails(system: HdfsSystem) -> None:
    idle = _run(np.full((9, 576), 0.2), system)
    assert idle.failed_accesses == 0 and idle.utilization == pytest.approx(0.2, abs=1e-6)
    busy = np.full((9, 576), 0.2)
    busy[:, 288:] = 0.9  # every tenant busy during the whole access window
    res = _run(busy, system)
    assert res.failed_access_pct == pytest.approx(100.0)
    assert idle.expected_failed_per_million == 0.0 and res.expected_failed_per_million == pytest.approx(1e6)


def test_threshold_is_one_minus_reserve() -> None:
    cpu = np.full((9, 576), 0.6)
    assert _run(cpu, HdfsSystem.H).failed_accesses == 0  # 60% < 66.7%
    assert _run(cpu, HdfsSystem.H, busy_cpu=0.5).failed_access_pct == pytest.approx(100.0)


def test_diverse_columns_survive_peaking_tenants() -> None:
    # three high-peak tenants (one grid column) are busy in the access window; the others never
    cpu = np.full((9, 576), 0.2)
    hot = [1, 4, 7]
    cpu[hot, :] = 0.5
    cpu[np.ix_(hot, np.arange(288, 576))] = 0.95
    h = _run(cpu, HdfsSystem.H)
    stock = _run(cpu, HdfsSystem.STOCK)
    assert h.failed_accesses == 0  # never two replicas in one peak column
    assert stock.failed_accesses >= h.failed_accesses


def test_busy_hour_profiles_keep_replicas_off_tenants_busy_together() -> None:
    # Tenants 0-5 are loaded every night (00-06), 6-8 every afternoon (12-18): near the busy
    # threshold in the history (0.6 < 0.667, so blocks are placed freely), above it in the access
    # window. Every grid row holds two night tenants and one afternoon tenant, so HDFS-H (peak
    # columns only) puts some blocks on night tenants alone; HDFS-H-hours learns the profiles from
    # the history (with a margin of 0.1 below the threshold) and never does.
    t = np.arange(576) * 300.0
    hour = (t % 86400) // 3600
    cpu = np.full((9, 576), 0.2)
    for i in range(9):
        row = i % 3  # tenant i sits in row i % 3 (its reimage rate)
        # peak rank within the row: the afternoon tenant of row r gets column r, so every row and
        # every column holds one (a block can always have one replica on an afternoon tenant)
        rank = row if i >= 6 else [c for c in range(3) if c != row][i // 3]
        loaded = (hour < 6) if i < 6 else ((hour >= 12) & (hour < 18))
        cpu[i, loaded] = np.where(t[loaded] < 86400, 0.6, 0.85 + 0.03 * rank)
    paper = _run(cpu, HdfsSystem.H)
    hours = _run(cpu, HdfsSystem.H_HOURS, margin=0.1)
    assert paper.relaxed_placements == hours.relaxed_placements == 0
    assert paper.failed_accesses > 100
    assert hours.failed_accesses == 0
    # HDFS-H-cobusy needs no margin: samples below the threshold count in proportion to their CPU,
    # so the night tenants' shared load makes them likely busy together.
    cobusy = _run(cpu, HdfsSystem.H_COBUSY)
    assert cobusy.relaxed_placements == 0 and cobusy.failed_accesses == 0


def test_on_failed_gets_every_failed_access_with_busy_holders() -> None:
    # Tenants 0-2 busy in the second half of the access window: stock placement puts some blocks
    # only on them; the hook must see exactly those accesses, each with all holders busy then.
    cpu = np.full((9, 576), 0.2)
    cpu[np.ix_([0, 1, 2], np.arange(432, 576))] = 0.95
    dc = make_dc(cpu, servers_per_tenant=3)
    grid = placement_grid(dc, {t: 0.2 for t in dc.series.tenants}, {t: 0.0 for t in dc.series.tenants})
    cfg = AvailabilityConfig(days=1.0, history_days=1.0, blocks=3000, accesses=30000)
    placer = make_placer(HdfsSystem.STOCK, dc, grid, seed=0, block_size_mb=256.0)
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    rng = np.random.default_rng
    res = simulate_availability(dc, dc.cpu, placer, HdfsSystem.STOCK, 2, cfg, create_rng=rng(0), place_rng=rng(1),
                                access_rng=rng(2), on_failed=lambda h, s: seen.append((h, s)))
    assert len(seen) == 1
    holders, slots = seen[0]
    assert res.failed_accesses > 0 and len(holders) == len(slots) == res.failed_accesses
    assert holders.shape[1] == 2 and (holders >= 0).all()
    assert set(dc.server_tenant[holders].ravel().tolist()) <= {0, 1, 2} and (slots >= 432).all()
    # The exact expectation: blocks on tenants 0-2 alone fail in the 144 busy slots of the 288 of
    # the window, so it is a whole number of such blocks times 0.5 / blocks; the sampled rate
    # estimates it (binomial, within 4 standard deviations).
    per_block = 1e6 * 144 / (288 * cfg.blocks)
    n_alone = res.expected_failed_per_million / per_block
    assert n_alone > 0 and n_alone == pytest.approx(round(n_alone), abs=1e-6)
    p = res.expected_failed_per_million / 1e6
    assert abs(res.failed_accesses - p * cfg.accesses) < 4 * np.sqrt(cfg.accesses * p * (1 - p))


def test_all_busy_slots_matches_a_brute_force_count() -> None:
    # Random replicas (some missing: -1 counts as busy, as for an access), tenants and busy slots.
    # Few slots are gathered per block, many counted per tenant group (an int64 key per group, or
    # rows of the group when the key would not fit: 6 replicas of 2,000 tenants).
    gen = np.random.default_rng(11)
    for case in range(60):
        n_t, n_s, k = int(gen.integers(1, 6)), int(gen.integers(1, 80)), int(gen.integers(1, 4))
        if case % 10 == 0:
            n_t, n_s, k = 2000, 64, 6
        server_tenant = gen.integers(0, n_t, 12)
        busy = gen.random((n_t, n_s)) < gen.random()
        rep = gen.integers(-1, 12, (int(gen.integers(0, 30)), k))
        slots = gen.permutation(n_s)[: n_s if case % 10 == 0 else int(gen.integers(0, n_s + 1))]
        want = sum(
            all(r < 0 or busy[server_tenant[r], s] for r in row) for row in rep for s in slots
        )
        assert _all_busy_slots(rep, server_tenant, busy, slots) == want


def test_mover_catches_tenants_that_turn_busy_together_after_the_history() -> None:
    # 18 tenants, two per grid cell (t<i> and t<i+9> in row i % 3, column (i // 3) % 3, by their
    # reimage rate and history peak). Idle in the one-day history; from 4 h into the two-day access
    # window on, the trio t0, t4, t8 (one per row and column) runs at 95%. HDFS-H-cobusy cannot
    # know; blocks that sit on the trio alone fail whenever they are read. The mover refits at the
    # start of each window day: the pass at day 2 sees the trio busy together and moves one replica
    # of each such block, so no access fails after it.
    n_t, day = 18, 288
    cpu = np.zeros((n_t, 3 * day))
    for i in range(n_t):
        cpu[i] = 0.1 + 0.1 * ((i % 9) // 3)
    trio = [0, 4, 8]
    cpu[np.ix_(trio, np.arange(day + 48, 3 * day))] = 0.95
    dc = make_dc(cpu, servers_per_tenant=3)
    tenants = dc.series.tenants
    peaks = {t: float(cpu[i, :day].max()) for i, t in enumerate(tenants)}
    grid = placement_grid(dc, peaks, {t: float(i % 3) for i, t in enumerate(tenants)})
    assert all((grid[tenants[i]].reimage_row, grid[tenants[i]].peak_column) == (i % 3, (i % 9) // 3) for i in range(n_t))
    cfg = AvailabilityConfig(days=2.0, history_days=1.0, blocks=3000, accesses=30000)
    cobusy = cobusy_model(dc, cpu, day, cfg.busy_threshold)
    rng = np.random.default_rng

    def run(with_mover: bool) -> tuple[object, list[np.ndarray]]:
        system = HdfsSystem.H_COBUSY_MOVER if with_mover else HdfsSystem.H_COBUSY
        placer = make_placer(system, dc, grid, seed=0, block_size_mb=256.0, cobusy=cobusy)
        mover = CobusyMover(dc, cpu, placer, day, cfg.busy_threshold, rng(3),
                             MoveConfig(max_moves_frac=1.0, budget_mb_per_server_day=None)) \
            if with_mover else None
        slots: list[np.ndarray] = []
        res = simulate_availability(dc, cpu, placer, system, 3, cfg, create_rng=rng(0), place_rng=rng(1),
                                    access_rng=rng(2), on_failed=lambda h, s: slots.append(s),
                                    mover=mover, move_every_slots=day)
        return res, slots

    plain, plain_slots = run(False)
    moved, moved_slots = run(True)
    assert plain.relaxed_placements == moved.relaxed_placements == 0
    assert (plain_slots[0] >= 2 * day).sum() > 100  # the trio's blocks fail on day 2 without moves
    assert moved.failed_accesses > 0 and (moved_slots[0] < 2 * day).all()  # day 1 only: before the refit
    assert moved.failed_accesses < plain.failed_accesses
    # Exactly: the trio's blocks fail in its 528 busy slots of the window without moves, in the 240
    # before the day-2 pass with them (the same placements: same placer, same streams).
    assert moved.expected_failed_per_million > 0
    assert moved.expected_failed_per_million / plain.expected_failed_per_million == pytest.approx(240 / 528)
    # one replica per block at most, per pass: blocks with two or three replicas on the trio
    assert 0 < moved.moved_replicas <= cfg.blocks


def test_watch_moves_blocks_left_with_one_idle_replica_before_the_third_turns_busy() -> None:
    # The set-up of the test above, with the trio turning busy one by one: t0 and t4 from 4 h into
    # the access window on, t8 from 8 h on. The daily pass saw them idle and cannot know; blocks
    # on the trio fail from 8 h on until the next day's pass. The hourly watch sees two of their
    # three tenants busy at 4-5 h and moves one of those replicas, before t8 turns busy.
    n_t, day = 18, 288
    cpu = np.zeros((n_t, 3 * day))
    for i in range(n_t):
        cpu[i] = 0.1 + 0.1 * ((i % 9) // 3)
    cpu[np.ix_([0, 4], np.arange(day + 48, 3 * day))] = 0.95
    cpu[8, day + 96:] = 0.95
    dc = make_dc(cpu, servers_per_tenant=3)
    tenants = dc.series.tenants
    peaks = {t: float(cpu[i, :day].max()) for i, t in enumerate(tenants)}
    grid = placement_grid(dc, peaks, {t: float(i % 3) for i, t in enumerate(tenants)})
    cfg = AvailabilityConfig(days=2.0, history_days=1.0, blocks=3000, accesses=30000)
    cobusy = cobusy_model(dc, cpu, day, cfg.busy_threshold)
    rng = np.random.default_rng

    def run(watch: bool) -> tuple[object, list[np.ndarray], CobusyMover]:
        placer = make_placer(HdfsSystem.H_COBUSY_MOVER, dc, grid, seed=0, block_size_mb=256.0, cobusy=cobusy)
        mover = CobusyMover(dc, cpu, placer, day, cfg.busy_threshold, rng(3),
                            MoveConfig(max_moves_frac=1.0, budget_mb_per_server_day=None),
                            pass_every_slots=day if watch else 0, watch_rng=rng(4) if watch else None)
        slots: list[np.ndarray] = []
        res = simulate_availability(dc, cpu, placer, HdfsSystem.H_COBUSY_MOVER, 3, cfg, create_rng=rng(0),
                                    place_rng=rng(1), access_rng=rng(2), on_failed=lambda h, s: slots.append(s),
                                    mover=mover, move_every_slots=12 if watch else day)
        return res, slots, mover

    daily, daily_slots, _ = run(False)
    watched, _, mover = run(True)
    assert daily.failed_accesses > 100 and (daily_slots[0] >= day + 96).all()
    assert watched.failed_accesses == 0 and watched.expected_failed_per_million == 0.0
    assert daily.expected_failed_per_million > 0
    assert len(mover.reports) == 2  # the daily passes still ran once a day, at days 1 and 2
    assert 0 < mover.watch_moved <= cfg.blocks and watched.moved_replicas >= mover.watch_moved


def test_every_availability_record_has_moves_per_day_and_the_movers_budget(tiny_dc) -> None:
    # Issue 41 item 3: the figure moves/day in every availability record.
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.policy import HdfsSystem
    from placement_service.sim.run import run_availability

    cfg = AvailabilityConfig(days=1.0, history_days=2.0, blocks=300, accesses=2000)
    recs = run_availability(tiny_dc, levels=[0.4], replicas=[3], scaling=Scaling.LINEAR, runs=1, seed=0, config=cfg,
                            systems=(HdfsSystem.H, HdfsSystem.H_COBUSY_MOVER))
    for r in recs:
        assert r["moves_per_day"] == pytest.approx(r["moved_replicas"] / cfg.days)
    mover = next(r for r in recs if r["system"] == "HDFS-H-cobusy-mover")
    assert mover["move_budget_gb_per_server_day"] == 2.0
    assert mover["moves_refused_budget"] >= 0 and mover["moves_refused_exposure"] >= 0


@pytest.mark.parametrize("system", [HdfsSystem.STOCK, HdfsSystem.H])
def test_blocks_that_found_no_space_are_not_failed_reads(system: HdfsSystem) -> None:
    # Issue 39 finding 5: on a cluster too small for the blocks, every read of a block that found no
    # space counted as a read that found every replica busy; here no tenant is ever busy.
    cpu = np.full((9, 576), 0.2)
    dc = make_dc(cpu, servers_per_tenant=3, storage_gb=0.5)  # 27 servers x 2 blocks: 18 blocks of 3 replicas
    grid = placement_grid(dc, {t: 0.2 for t in dc.series.tenants}, {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})
    placer = make_placer(system, dc, grid, seed=0, block_size_mb=256.0)
    cfg = AvailabilityConfig(days=1.0, history_days=1.0, blocks=100, accesses=5000)
    rng = np.random.default_rng
    res = simulate_availability(dc, dc.cpu, placer, system, 3, cfg, create_rng=rng(0), place_rng=rng(1),
                                access_rng=rng(2))
    assert res.failed_accesses == 0 and res.expected_failed_per_million == 0.0
    assert 100 - 18 <= res.unplaced_blocks < 100 and res.accesses + res.unplaced_accesses == 5000
    assert res.unplaced_accesses > 0.7 * 5000
