"""Moving replicas of blocks at risk (``core/mover.py``) and the vectorized joint estimate it uses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_service.core.cobusy import CobusyModel, fit_cobusy
from placement_service.core.mover import MoveConfig, blocks_one_idle, move_at_risk, move_busy_now
from placement_service.core.placement import ReplicaPlacer
from placement_service.core.types import GridCell, PolicyError
from tests.core.test_placement import make_inventory

BLOCK_MB = 256.0
TRIO = ("a0", "a4", "a8")  # one tenant in each row and column: a block can sit on them alone


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4))
def test_joint_many_matches_joint_row_by_row(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    cpu = rng.random((6, 300))
    model = fit_cobusy([f"t{i}" for i in range(6)], cpu, 0.0, 300.0, 0.6)
    groups = rng.integers(-1, 6, (40, k))  # -1: a missing replica; repeats allowed
    want = [model.joint([int(x) for x in row if x >= 0]) for row in groups]
    assert model.joint_many(groups) == pytest.approx(want, rel=1e-9)


def _grid_cluster() -> tuple[ReplicaPlacer, list[str], dict[str, GridCell]]:
    """Two tenants per cell of the 3x3 grid (``a<i>`` and ``b<i>`` in cell (i % 3, i // 3)), each
    in its own environment with two servers of 10 blocks' space."""
    tenants = [f"{p}{i}" for p in "ab" for i in range(9)]
    cells = {t: GridCell(int(t[1:]) % 3, int(t[1:]) // 3) for t in tenants}
    rows = [(f"{t}-s{k}", t, f"env-{t}", "r0", 10 * BLOCK_MB / 1024) for t in tenants for k in range(2)]
    inv = make_inventory(rows)
    model = CobusyModel(tuple(tenants), np.full(18, 0.01), np.full((18, 18), 1e-4))
    placer = ReplicaPlacer(inv, cells, seed=0, cobusy=model)
    return placer, tenants, cells


def _trio_busy_model(tenants: list[str]) -> CobusyModel:
    """Every tenant rarely busy and independent, except the trio: busy together half of the time."""
    m1 = np.full(len(tenants), 0.01)
    idx = [tenants.index(t) for t in TRIO]
    m1[idx] = 0.5
    m2 = np.outer(m1, m1)
    for i in idx:
        for j in idx:
            m2[i, j] = 0.5
    return CobusyModel(tuple(tenants), m1, m2)


def _blocks(placer: ReplicaPlacer, holders: list[tuple[str, ...]]) -> np.ndarray:
    rep = np.array([[placer.server_index(s) for s in h] for h in holders], dtype=np.int64)
    placer.allocate_blocks(rep.ravel())
    return rep


def _free(placer: ReplicaPlacer) -> np.ndarray:
    return np.array([placer.free_mb(s) for s in placer.inventory.server])


def test_blocks_on_tenants_now_busy_together_move_one_replica_under_the_grid_rules() -> None:
    placer, tenants, cells = _grid_cluster()
    on_trio = [("a0-s0", "a4-s0", "a8-s0"), ("a0-s1", "a4-s1", "a8-s1")]
    safe = [("b0-s0", "b4-s0", "b8-s0"), ("a0-s0", "b4-s1", "b8-s1")]  # at most one trio tenant
    rep = _blocks(placer, on_trio + safe)
    used_before = _free(placer).sum()
    placer.set_cobusy(_trio_busy_model(tenants))
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-3, max_moves_frac=1.0), np.random.default_rng(0))
    assert report.at_risk == 2 and report.moved == 2 and report.risk_after < report.risk_before / 100
    names = placer.inventory.server
    tenant_of = {s: s.split("-")[0] for s in names}
    for b, row in enumerate(rep):
        held = [names[s] for s in row]
        ts = [tenant_of[s] for s in held]
        if b < 2:
            assert sum(t in TRIO for t in ts) == 2  # one replica left the trio
        else:
            assert held == list((on_trio + safe)[b])  # not at risk: untouched
        # every grid rule still holds: distinct rows, columns, environments and servers
        assert len({cells[t].reimage_row for t in ts}) == 3
        assert len({cells[t].peak_column for t in ts}) == 3
        assert len(set(ts)) == 3 and len(set(held)) == 3
    # the moved replicas' old space came back: as much space in use as before
    assert _free(placer).sum() == pytest.approx(used_before)
    used = 20 * BLOCK_MB - _free(placer).reshape(18, 2).sum(axis=1)  # per tenant
    held_blocks = np.bincount(placer.tenant_of(rep).ravel(), minlength=18) * BLOCK_MB
    assert used == pytest.approx(held_blocks)


def test_the_riskiest_blocks_move_first_and_at_most_the_budget() -> None:
    placer, tenants, _ = _grid_cluster()
    risky = [("a0-s0", "a4-s0", "a8-s0")] * 1 + [("a0-s1", "a4-s1", "a8-s1")]
    less = [("a0-s0", "a4-s0", "b8-s0")] * 2  # two trio tenants: at risk, but less
    rep = _blocks(placer, risky + less)
    placer.set_cobusy(_trio_busy_model(tenants))
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-4, max_moves_frac=0.5), np.random.default_rng(0))
    assert report.at_risk == 4 and report.tried == 2 and report.moved == 2
    trio = {placer.tenant_names.index(t) for t in TRIO}
    counts = [sum(int(t) in trio for t in row) for row in placer.tenant_of(rep)]
    assert counts == [2, 2, 2, 2]  # the two full-trio blocks moved; the others waited


def test_no_move_without_a_gain_and_the_space_is_given_back() -> None:
    placer, tenants, _ = _grid_cluster()
    rep = _blocks(placer, [("a0-s0", "a4-s0", "a8-s0")])
    # The trio's partners in every cell are just as busy with the others: nowhere better to go.
    m1 = np.full(18, 0.5)
    m2 = np.full((18, 18), 0.5)
    placer.set_cobusy(CobusyModel(tuple(tenants), m1, m2))
    free = _free(placer)
    before = rep.copy()
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-3, max_moves_frac=1.0), np.random.default_rng(0))
    assert report.at_risk == 1 and report.tried == 1 and report.moved == 0
    assert (rep == before).all() and _free(placer) == pytest.approx(free)


def test_bad_inputs_are_refused() -> None:
    placer, _, _ = _grid_cluster()
    with pytest.raises(PolicyError):
        MoveConfig(gain=0.5)
    with pytest.raises(PolicyError):
        move_at_risk(placer, np.zeros(3, dtype=np.int64), MoveConfig(), np.random.default_rng(0))
    plain = ReplicaPlacer(placer.inventory, {}, seed=0)
    with pytest.raises(PolicyError, match="co-busy"):
        move_at_risk(plain, np.zeros((1, 3), dtype=np.int64), MoveConfig(), np.random.default_rng(0))
    with pytest.raises(PolicyError, match="without co-busy"):
        plain.set_cobusy(_trio_busy_model(list(placer.tenant_names)))


def test_the_report_names_every_moved_replica_and_blocks_short_of_replicas_wait_for_repair() -> None:
    placer, tenants, _ = _grid_cluster()
    holders = [("a0-s0", "a4-s0", "a8-s0"), ("a0-s1", "a4-s1", "a8-s1"), ("a0-s0", "a4-s0", "a8-s0")]
    rep = _blocks(placer, holders)
    rep[2, :2] = -1  # one replica left (re-replication's work): risky alone, but no move
    placer.set_cobusy(_trio_busy_model(tenants))
    before = rep.copy()
    # The block with one replica (estimate 0.5) is neither counted at risk nor tried.
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-4, max_moves_frac=0.34), np.random.default_rng(0))
    assert report.at_risk == 2 and report.tried == 2 and report.moved == 2
    changed = np.argwhere(rep != before)
    assert sorted(map(tuple, changed.tolist())) == sorted(zip(report.moved_blocks.tolist(),
                                                              report.moved_columns.tolist(), strict=True))
    assert (rep[2] == before[2]).all()


def _busy(placer: ReplicaPlacer, busy_tenants: set[str]) -> np.ndarray:
    return np.array([t in busy_tenants for t in placer.tenant_names])


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4))
def test_blocks_one_idle_matches_a_count_row_by_row(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    server_busy = rng.random(12) < 0.4
    rep = rng.integers(-1, 12, (60, k))
    want = [b for b, row in enumerate(rep.tolist())
            if k >= 2 and all(x >= 0 for x in row) and sum(not server_busy[x] for x in row) == 1]
    assert blocks_one_idle(rep, server_busy).tolist() == want


def test_watch_moves_a_busy_replica_of_blocks_left_with_one_idle_replica() -> None:
    placer, tenants, cells = _grid_cluster()
    holders = [
        ("a0-s0", "a4-s0", "a8-s0"),  # a0 and a4 busy now, a8 idle: one burst from unreadable
        ("b0-s0", "b4-s0", "b8-s0"),  # only b0 busy: two idle replicas, left alone
        ("a0-s1", "a4-s1", "b8-s1"),  # a0, a4 busy, b8 idle: at risk
        ("a0-s0", "a4-s1", "a2-s0"),  # all three busy: no idle replica to copy from, left alone
    ]
    rep = _blocks(placer, holders)
    rep[1, 2] = -1  # b8's replica lost: b0 busy, b4 idle, one idle of two live, but short: the repair's
    busy_now = {"a0", "a4", "a2", "b0"}
    placer.set_cobusy(_trio_busy_model(tenants))
    before, free = rep.copy(), _free(placer)
    report = move_busy_now(placer, rep, _busy(placer, busy_now), np.random.default_rng(0))
    assert report.at_risk == 2 and report.moved == 2
    names = placer.inventory.server
    assert (rep[1] == before[1]).all()
    for b in (0, 2):
        held = [names[s] for s in rep[b] if s >= 0]
        ts = [h.split("-")[0] for h in held]
        assert sum(t in busy_now for t in ts) == len(ts) - 2  # two idle replicas now
        assert len({cells[t].reimage_row for t in ts}) == len(ts) == len({cells[t].peak_column for t in ts})
        assert len(set(ts)) == len(ts)
        assert (rep[b] != before[b]).sum() == 1  # one replica moved, from a busy tenant
        col = int(np.flatnonzero(rep[b] != before[b])[0])
        assert names[before[b, col]].split("-")[0] in busy_now
    assert (rep[3] == before[3]).all()
    assert _free(placer).sum() == pytest.approx(free.sum())  # the old replicas' space came back
    assert sorted(zip(report.moved_blocks.tolist(), report.moved_columns.tolist(), strict=True)) == \
        sorted(map(tuple, np.argwhere(rep != before).tolist()))


def test_watch_drops_the_busy_replica_that_leaves_the_lowest_estimate() -> None:
    placer, tenants, _ = _grid_cluster()
    rep = _blocks(placer, [("a0-s0", "a4-s0", "b8-s0")])  # a0, a4 busy now; b8 idle
    model = _trio_busy_model(tenants)
    a4, b8 = tenants.index("a4"), tenants.index("b8")
    m2 = model.m2.copy()
    m2[a4, b8] = m2[b8, a4] = 0.2  # b8 is often busy with a4, rarely with a0
    placer.set_cobusy(CobusyModel(tuple(tenants), model.m1, m2))
    report = move_busy_now(placer, rep, _busy(placer, {"a0", "a4"}), np.random.default_rng(0))
    assert report.moved == 1
    names = placer.inventory.server
    assert names[rep[0, 0]] == "a0-s0" and names[rep[0, 2]] == "b8-s0"  # a4's replica went, not a0's
    assert names[rep[0, 1]].startswith("b4-")  # the only idle tenant of a4's cell


def test_watch_does_not_relax_the_grid_nor_move_onto_a_busy_tenant() -> None:
    placer, tenants, _ = _grid_cluster()
    rep = _blocks(placer, [("a0-s0", "a4-s0", "a8-s0")])
    placer.set_cobusy(_trio_busy_model(tenants))
    # a0, a4 busy. Dropping a0 leaves cell (0, 0): a0 and b0, b0 busy too; dropping a4 leaves
    # cell (1, 1): a4 and b4, b4 busy too. No idle tenant fits the grid: no move, nothing allocated.
    busy = _busy(placer, {"a0", "a4", "b0", "b4"})
    free, before = _free(placer), rep.copy()
    report = move_busy_now(placer, rep, busy, np.random.default_rng(0))
    assert report.at_risk == 1 and report.moved == 0
    assert (rep == before).all() and _free(placer) == pytest.approx(free)
    # The same block with b4 idle moves a4's replica to b4 (the only tenant the grid allows).
    report = move_busy_now(placer, rep, _busy(placer, {"a0", "a4", "b0"}), np.random.default_rng(0))
    assert report.moved == 1 and placer.inventory.server[rep[0, 1]].startswith("b4-")


def test_watch_refuses_busy_flags_of_the_wrong_length() -> None:
    placer, _, _ = _grid_cluster()
    with pytest.raises(PolicyError, match="one flag per tenant"):
        move_busy_now(placer, np.zeros((1, 3), dtype=np.int64), np.zeros(5, dtype=bool), np.random.default_rng(0))
    with pytest.raises(PolicyError, match="block, k"):
        move_busy_now(placer, np.zeros(3, dtype=np.int64), np.zeros(18, dtype=bool), np.random.default_rng(0))


def test_watch_spreads_its_moves_over_the_idle_tenants_under_the_target() -> None:
    """Issue 14: the watch's moves to the lowest estimate put a 4M-block year's blocks on the same
    quiet pairs. By default a moved replica goes to any idle tenant that keeps the block under the
    placer's re-replication target, like a repair; ``risk_target=0`` keeps the lowest estimate."""
    tenants = [f"{p}{i}" for p in "abcd" for i in range(9)]
    cells = {t: GridCell(int(t[1:]) % 3, int(t[1:]) // 3) for t in tenants}
    rows = [(f"{t}-s0", t, f"env-{t}", "r0", 100 * BLOCK_MB / 1024) for t in tenants]
    m1 = np.full(len(tenants), 0.005)
    m1[tenants.index("b0")] = 0.001  # the quietest of cell (0, 0): the lowest estimate
    model = CobusyModel(tuple(tenants), m1, np.outer(m1, m1))  # independent: every trio under 1e-6
    spread: dict[float | None, dict[str, int]] = {}
    for target in (None, 0.0):
        placer = ReplicaPlacer(make_inventory(rows), cells, seed=0, cobusy=model)
        rep = _blocks(placer, [("a0-s0", "a4-s0", "a8-s0")] * 60)
        report = move_busy_now(placer, rep, _busy(placer, {"a0", "a4"}), np.random.default_rng(1), target)
        assert report.moved == 60
        names = list(placer.inventory.server)
        assert {names[s] for s in rep[:, 1]} == {"a4-s0"} and {names[s] for s in rep[:, 2]} == {"a8-s0"}
        new = [str(names[s]).split("-")[0] for s in rep[:, 0]]
        spread[target] = {t: new.count(t) for t in sorted(set(new))}
    assert spread[0.0] == {"b0": 60}
    assert set(spread[None]) == {"b0", "c0", "d0"} and max(spread[None].values()) <= 35


def test_blocks_short_of_a_replica_neither_move_nor_take_the_budget() -> None:
    """Issue 14, 4M-block year: after a reimage wiped one replica of many blocks, their estimate
    (two tenants, the missing one left out) ranked them above every full block, and the daily pass
    spent its budget moving their survivors onto the quietest tenants, which the same rolling
    reimage took an hour later. A block short of a replica is the repair's; the riskiest full
    block gets the budget, and the watch leaves short blocks alone too."""
    placer, tenants, _ = _grid_cluster()
    rep = _blocks(placer, [("a0-s0", "a4-s0", "b8-s0"), ("a0-s1", "a4-s1", "b8-s1")])
    rep[0, 2] = -1  # b8's replica wiped: a0 + a4 alone estimate 0.5, the full block 5e-3
    placer.set_cobusy(_trio_busy_model(tenants))
    before = rep.copy()
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-4, max_moves_frac=0.5), np.random.default_rng(0))
    assert report.at_risk == 1 and report.tried == 1 and report.moved == 1  # budget ceil(0.5 * 2) = 1
    assert report.moved_blocks.tolist() == [1] and (rep[0] == before[0]).all()
    # The watch: a0 busy, a4 idle; the short block has one idle replica of two live, the full one
    # (a0, a4, a8 with a8 busy) one idle of three: only the full block is watched.
    rep2 = _blocks(placer, [("a0-s0", "a4-s0", "b8-s1"), ("a0-s1", "a4-s1", "a8-s0")])
    rep2[0, 2] = -1
    assert blocks_one_idle(rep2, _busy(placer, {"a0", "a8"})[placer.tenant_of(np.arange(len(placer.inventory.server)))]).tolist() == [1]


def test_moves_stop_at_each_tenants_daily_byte_budget() -> None:
    # Issue 41 item 3: moves per day bounded by a byte budget per primary tenant.
    from placement_service.core.mover import MoveBudget

    placer, tenants, _ = _grid_cluster()
    rep = _blocks(placer, [("a0-s0", "a4-s0", "a8-s0"), ("a0-s1", "a4-s1", "a8-s1")])
    placer.set_cobusy(_trio_busy_model(tenants))
    budget = MoveBudget(placer, mb_per_server_day=BLOCK_MB / 2)  # 2 servers a tenant: one block a day
    budget.at_day(0)
    config = MoveConfig(risk_max=1e-3, max_moves_frac=1.0)
    first = move_at_risk(placer, rep, config, np.random.default_rng(0), budget=budget)
    assert first.moved == 1 and first.refused_budget == 1  # both copies would read the same tenant
    assert budget.used_mb.max() <= budget.limit_mb.max()
    waiting = int(first.moved_blocks[0] == 0)  # the block the budget held back
    held_back = rep[waiting].copy()
    again = move_at_risk(placer, rep, config, np.random.default_rng(0), budget=budget)
    assert again.refused_budget >= 1 and (rep[waiting] == held_back).all()  # the same day: a0 still spent
    assert np.all(budget.used_mb <= budget.limit_mb + 1e-9)
    budget.at_day(1)
    nxt = move_at_risk(placer, rep, config, np.random.default_rng(0), budget=budget)
    assert waiting in nxt.moved_blocks.tolist()  # a new day: it moves
    with pytest.raises(PolicyError, match="budget"):
        MoveConfig(budget_mb_per_server_day=-1.0)


def test_a_move_that_raises_durability_exposure_is_refused_and_counted() -> None:
    # Issue 41 item 3: a move must never raise the exposure it was meant to leave alone; here every
    # place a trio replica could go (its cell partner) was reimaged more often than where it is.
    tenants = [f"{p}{i}" for p in "ab" for i in range(9)]
    cells = {t: GridCell(int(t[1:]) % 3, int(t[1:]) // 3) for t in tenants}
    inv = make_inventory([(f"{t}-s{k}", t, f"env-{t}", "r0", 10 * BLOCK_MB / 1024) for t in tenants for k in range(2)])
    seen = {f"b{i}-s{k}": 3.0 for i in range(9) for k in range(2)}
    placer = ReplicaPlacer(inv, cells, seed=0, cobusy=_trio_busy_model(tenants), server_reimages=seen)
    rep = _blocks(placer, [("a0-s0", "a4-s0", "a8-s0")])
    before, free = rep.copy(), _free(placer)
    report = move_at_risk(placer, rep, MoveConfig(risk_max=1e-3, max_moves_frac=1.0), np.random.default_rng(0))
    assert report.moved == 0 and report.refused_exposure == 1
    assert (rep == before).all() and _free(placer) == pytest.approx(free)
    # the watch keeps the same rule: the trio busy now, one idle replica left
    busy = np.array([t in ("a0", "a4") for t in placer.tenant_names])
    watched = move_busy_now(placer, rep, busy, np.random.default_rng(0))
    assert watched.moved == 0 and watched.refused_exposure >= 1 and (rep == before).all()
