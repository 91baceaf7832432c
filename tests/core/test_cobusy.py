"""Co-busy estimates (``core/cobusy.py``) and the placer's use of them (``ReplicaPlacer(cobusy=...)``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_service.core.busy_hours import busy_hour_masks
from placement_service.core.cobusy import (
    CobusyConfig,
    CobusyModel,
    aligned,
    fit_cobusy,
    quiet_turnover,
    reimage_penalty,
)
from placement_service.core.placement import ReplicaPlacer, _ascending
from placement_service.core.types import GridCell, Inventory, PlacementError, PolicyError
from tests.core.test_placement import Cluster, _check_round_diversity, clusters, make_inventory
from tests.core.test_placement_joint import _check_relaxed_iff_no_assignment

SLOT_S = 300.0
DAY_SLOTS = 288
BUSY = 2.0 / 3.0


def _history() -> tuple[list[str], np.ndarray]:
    """Two days of 5-min samples for writer ``A`` and candidates ``B`` and ``C``.

    - ``A``: busy in the first half of hour 6 every day, and in one slot of every other hour.
    - ``B``: busy in exactly those single slots with ``A`` (1 of 24 samples per hour: under the
      masks' 5% share, so ``B``'s mask is empty and never overlaps ``A``'s).
    - ``C``: busy in the second half of hour 6 every day, never in the same slot as ``A``; its
      mask (hour 6) overlaps ``A``'s.
    """
    n = 2 * DAY_SLOTS
    cpu = np.full((3, n), 0.1)
    hour = (np.arange(n) * SLOT_S % 86400) // 3600
    minute = (np.arange(n) * SLOT_S % 3600) // 60
    first_day = np.arange(n) < DAY_SLOTS
    cpu[0, (hour == 6) & (minute < 30)] = 0.9
    cpu[2, (hour == 6) & (minute >= 30)] = 0.9
    lone = (hour != 6) & (minute == 10) & first_day  # one slot per other hour, on day one
    cpu[0, lone] = 0.9
    cpu[1, lone] = 0.9
    return ["A", "B", "C"], cpu


def test_mask_and_cobusy_rules_disagree_and_cobusy_picks_the_rarer_joint() -> None:
    tenants, cpu = _history()
    masks = busy_hour_masks(cpu, 0.0, SLOT_S, BUSY)
    assert masks[0] == 1 << 6 and masks[1] == 0 and masks[2] == 1 << 6  # mask rule: B (no overlap)
    model = fit_cobusy(tenants, cpu, 0.0, SLOT_S, BUSY)
    s = model.scores([0], np.array([1, 2]))
    assert s[1] < s[0]  # co-busy rule: C
    busy = cpu > BUSY
    joint_ab = float((busy[0] & busy[1]).mean())
    joint_ac = float((busy[0] & busy[2]).mean())
    assert joint_ab == pytest.approx(23 / 576) and joint_ac == 0.0  # C is never busy with A, B is


def test_placer_follows_the_estimates_where_masks_choose_the_other_tenant() -> None:
    # Writer A in cell (0, 0); B and C are the only tenants of cell (1, 1): the second replica's
    # only choice is between them.
    tenants, cpu = _history()
    cells = {"A": GridCell(0, 0), "B": GridCell(1, 1), "C": GridCell(1, 1)}
    rows = [(f"{t}-s{k}", t, f"env-{t}", "r0", 100.0) for t in tenants for k in range(3)]
    inv = make_inventory(rows)
    masks = busy_hour_masks(cpu, 0.0, SLOT_S, BUSY)
    by_mask = ReplicaPlacer(inv, cells, seed=1, busy_hours=dict(zip(tenants, masks.tolist(), strict=True)))
    by_cobusy = ReplicaPlacer(inv, cells, seed=1, cobusy=fit_cobusy(tenants, cpu, 0.0, SLOT_S, BUSY))
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(30):
        a = by_mask.place("A-s0", 2, rng=rng_a)
        b = by_cobusy.place("A-s0", 2, rng=rng_b)
        assert not a.relaxed and not b.relaxed
        assert a.targets[1].startswith("B-") and b.targets[1].startswith("C-")


def test_superposition_is_exact_for_independent_tenants() -> None:
    m1 = np.array([0.5, 0.2, 0.1])
    m2 = np.outer(m1, m1)
    model = CobusyModel(("a", "b", "c"), m1, m2)
    assert model.joint([0, 1, 2]) == pytest.approx(0.5 * 0.2 * 0.1)
    assert model.scores([0, 1], np.array([2, 0])) == pytest.approx([0.01, 0.1])  # a repeat adds nothing
    assert model.scores([], np.array([1])) == pytest.approx([0.2])


def test_an_hour_never_seen_busy_is_not_zero_and_recent_samples_weigh_more() -> None:
    n = 4 * DAY_SLOTS
    cpu = np.full((2, n), 0.1)
    cpu[0, :DAY_SLOTS] = 0.9  # tenant 0: busy all of the first day only
    cpu[1, -DAY_SLOTS:] = 0.9  # tenant 1: busy all of the last day only
    flat = fit_cobusy(["x", "y"], cpu, 0.0, SLOT_S, BUSY, CobusyConfig(half_life_days=0.0, near_weight=0.0))
    recent = fit_cobusy(["x", "y"], cpu, 0.0, SLOT_S, BUSY, CobusyConfig(half_life_days=1.0, near_weight=0.0))
    assert flat.m1[0] == pytest.approx(flat.m1[1]) and flat.m1.min() > 0
    assert recent.m1[1] > 4 * recent.m1[0] > 0


def test_a_tenant_running_closer_to_the_threshold_scores_higher() -> None:
    cpu = np.vstack([np.full(DAY_SLOTS, 0.1), np.full(DAY_SLOTS, 0.6)])
    model = fit_cobusy(["idle", "warm"], cpu, 0.0, SLOT_S, BUSY)
    assert 0 < model.m1[0] < model.m1[1]
    with pytest.raises(ValueError, match="rows"):
        fit_cobusy(["one"], cpu, 0.0, SLOT_S, BUSY)
    with pytest.raises(ValueError, match="near_weight"):
        CobusyConfig(near_weight=2.0)


def test_aligned_reindexes_and_gives_unknown_tenants_the_mean() -> None:
    model = CobusyModel(("a", "b"), np.array([0.1, 0.3]), np.array([[0.1, 0.02], [0.02, 0.3]]))
    m = aligned(model, ["b", "new", "a"])
    assert m.m1.tolist() == pytest.approx([0.3, 0.2, 0.1]) and m.pair(0, 2) == pytest.approx(0.02)
    assert m.pair(1, 0) == pytest.approx(model.m2.mean())  # unknown tenant: no preference
    assert m.m2 is model.m2  # seen through an index of its rows: the pair matrix is not copied
    back = aligned(m, ["a", "b"])  # re-aligned from the estimates, not from the fill of "new"
    assert back.m1.tolist() == pytest.approx([0.1, 0.3]) and np.allclose(back.dense(), model.m2)


def test_aligned_returns_a_model_already_in_order_as_is() -> None:
    model = CobusyModel(("a", "b"), np.array([0.1, 0.3]), np.array([[0.1, 0.02], [0.02, 0.3]]))
    m = aligned(model, ["b", "a"])
    assert aligned(m, ("b", "a")) is m  # aligned once up front: building placers copies nothing
    zero = CobusyModel(("a", "b"), np.array([0.0, 0.3]), np.array([[0.0, 0.0], [0.0, 0.3]]))
    assert aligned(zero, ["a", "b"]).m1[0] > 0  # not positive: still clamped (the placer divides by m1)
    assert aligned(zero, ["b", "a"]).pair(1, 1) > 0
    single = CobusyModel(("a", "b"), model.m1.astype(np.float32), model.m2.astype(np.float32))
    assert aligned(single, ["a", "b"]).m2.dtype == np.float64


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 7), extra=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_an_aligned_model_answers_as_its_dense_copy(n: int, extra: int, seed: int) -> None:
    # The index view must give exactly what a re-indexed copy of the matrices gives (the first
    # version copied them): singles, pairs, scores, joint and joint_many, unknown tenants included.
    rng = np.random.default_rng(seed)
    names = [f"t{i}" for i in range(n)]
    x = rng.uniform(0.0, 1.0, (n, 5))
    m2 = x @ x.T / 5
    model = CobusyModel(tuple(names), np.diag(m2).copy(), m2)
    order = [*rng.permutation(names).tolist(), *(f"new{i}" for i in range(extra))]
    m = aligned(model, order)
    dense = CobusyModel(tuple(order), m.m1, m.dense())
    k = len(order)
    for _ in range(10):
        g = rng.choice(k, size=min(k, int(rng.integers(1, 4))), replace=False).tolist()
        cands = np.arange(k)
        assert np.array_equal(m.scores(g, cands), dense.scores(g, cands))
        assert m.joint(g) == dense.joint(g)
    groups = rng.integers(-1, k, size=(20, 3))
    assert np.array_equal(m.joint_many(groups), dense.joint_many(groups))
    for t in order:
        i = order.index(t)
        assert m.m1[i] == (model.m1[names.index(t)] if t in names else pytest.approx(model.m1.mean()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=clusters(max_tenants=10),
    replicas=st.integers(2, 3),
    seed=st.integers(0, 2**16),
    rates=st.lists(st.floats(0.001, 1.0), min_size=10, max_size=10),
    target=st.sampled_from([0.0, 1e-3, 0.05]),
)
def test_cobusy_preference_keeps_every_grid_rule(
    c: Cluster, replicas: int, seed: int, rates: list[float], target: float
) -> None:
    # Random estimates and risk targets (none, some or most tenants good enough): the block still
    # relaxes exactly when no assignment exists under all rules (brute force), and every unrelaxed
    # block has distinct rows, columns and environments.
    rng = np.random.default_rng(seed)
    m1 = np.array(rates)
    m2 = np.outer(m1, m1) * rng.uniform(0.1, 3.0, (10, 10))
    model = CobusyModel(tuple(f"t{i}" for i in range(10)), m1, (m2 + m2.T) / 2)
    placer = ReplicaPlacer(c.inventory, c.grid, seed=seed, cobusy=model, cobusy_risk_target=target)
    _check_relaxed_iff_no_assignment(c, placer, replicas, seed)
    for writer in c.writers:
        try:
            res = placer.place(writer, replicas, excluded=c.excluded, rng=rng)
        except PlacementError:  # too few usable servers: covered by the check above
            continue
        if not res.relaxed:
            _check_round_diversity(c, res.targets)
            assert len({c.env_of(s) for s in res.targets}) == len(res.targets)


def test_reimage_penalty_is_relative_to_the_row_and_breaks_near_ties() -> None:
    grid = {"a": GridCell(2, 0), "b": GridCell(2, 1), "c": GridCell(0, 0)}
    pen = reimage_penalty({"a": 3.0, "b": 1.0, "c": 0.0}, grid, {"a": 1, "b": 3, "c": 2})
    assert pen == pytest.approx({"a": 0.1 * 3.0 / 1.5, "b": 0.1 * 1.0 / 1.5, "c": 0.0})
    with pytest.raises(ValueError, match="weight"):
        reimage_penalty({}, grid, {}, weight=-1.0)
    # Writer w in cell (0, 0); x and y in cell (1, 1) look the same to the estimates, but x is
    # reimaged 9x as often as y: with the penalty every block picks y.
    cells = {"w": GridCell(0, 0), "x": GridCell(1, 1), "y": GridCell(1, 1)}
    inv = make_inventory([(f"{t}-s{k}", t, f"env-{t}", "r0", 100.0) for t in cells for k in range(2)])
    m1 = np.array([0.1, 0.1, 0.1])
    model = CobusyModel(("w", "x", "y"), m1, np.outer(m1, m1))
    plain = ReplicaPlacer(inv, cells, seed=2, cobusy=model)
    penalized = ReplicaPlacer(
        inv, cells, seed=2, cobusy=model, cobusy_penalty=reimage_penalty({"x": 9.0, "y": 1.0}, cells, {"x": 2, "y": 2})
    )
    rng_a, rng_b = np.random.default_rng(2), np.random.default_rng(2)
    got_plain = {plain.place("w-s0", 2, rng=rng_a).targets[1][0] for _ in range(40)}
    got_penalized = {penalized.place("w-s0", 2, rng=rng_b).targets[1][0] for _ in range(40)}
    assert got_plain == {"x", "y"} and got_penalized == {"y"}


def _quiet_cell() -> tuple[dict[str, GridCell], CobusyModel, Inventory]:
    """Writer ``w`` alone in cell (0, 0); cell (1, 1) holds five quiet tenants ``q0..q4`` (busy
    1e-3..5e-3 of the time, each ``rel_tol`` apart) and a busy one ``b`` (half the time); all
    independent of ``w`` (busy 1e-3 of the time), two servers each, one environment per tenant."""
    names = ["w", "q0", "q1", "q2", "q3", "q4", "b"]
    m1 = np.array([1e-3, 1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 0.5])
    cells = {t: GridCell(0, 0) if t == "w" else GridCell(1, 1) for t in names}
    inv = make_inventory([(f"{t}-s{k}", t, f"env-{t}", "r0", 1000.0) for t in names for k in range(2)])
    return cells, CobusyModel(tuple(names), m1, np.outer(m1, m1)), inv


def test_risk_target_spreads_re_replications_over_the_good_enough_tenants_only() -> None:
    # A re-replication next to a surviving replica on w: with the lowest estimate the new replica
    # always went to q0 (the others are more than rel_tol above it). With a risk target every
    # tenant at or under it is as good: q0..q4 (pair estimates 1e-6..5e-6) share the repairs; b
    # (5e-4) never gets one while they have room. A new block still takes the lowest (q0).
    cells, model, inv = _quiet_cell()
    # (no spread bound: the blocks kept below would fill q0 past it)
    lowest = ReplicaPlacer(inv, cells, seed=3, cobusy=model, cobusy_risk_target=0.0, cobusy_spread=0.0)
    spread = ReplicaPlacer(inv, cells, seed=3, cobusy=model, cobusy_risk_target=1e-5, cobusy_spread=0.0)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)

    def repair(placer: ReplicaPlacer, rng: np.random.Generator) -> str:
        res = placer.place(None, 1, existing=["w-s0"], rng=rng)
        placer.release(res.targets[0], placer.config.block_size_mb)
        return res.targets[0].split("-")[0]

    got_lowest = [repair(lowest, rng_a) for _ in range(300)]
    got_spread = [repair(spread, rng_b) for _ in range(300)]
    assert set(got_lowest) == {"q0"}
    counts = {t: got_spread.count(t) for t in ("q0", "q1", "q2", "q3", "q4", "b")}
    assert counts["b"] == 0
    assert all(30 <= counts[t] <= 90 for t in ("q0", "q1", "q2", "q3", "q4")), counts  # about 60 each
    assert {spread.place("w-s0", 2, rng=rng_b).targets[1].split("-")[0] for _ in range(30)} == {"q0"}
    # and a caller may ask for either in one call (the mover asks for the lowest)
    assert spread.place(None, 1, existing=["w-s1"], rng=rng_b, risk_target=0.0).targets[0].startswith("q0-")


def test_repairs_by_the_lowest_estimate_converge_onto_the_quiet_tenants_and_a_target_stops_it() -> None:
    # The mechanism behind the 4M-block losses, on a 3x3 grid with one quiet tenant per cell (busy
    # 1e-3 of the time) and two busier ones (5% and 20%). New blocks take the lowest estimate: a
    # random writer, then two quiet tenants. Every round, one replica of each block is lost and
    # re-created next to the other two. With the lowest estimate the new replica is quiet too, so
    # blocks end with all three replicas on the nine quiet tenants (their reimages then leave
    # re-replication backlogs only the other quiet tenants can drain); with the target (here every
    # tenant keeps the block under it) the re-created replica goes to any tenant of the open cell.
    names, m1, cells = [], [], {}
    for c in range(9):
        for k, rate in enumerate((1e-3, 0.05, 0.2)):
            t = f"c{c}k{k}"
            names.append(t)
            m1.append(rate)
            cells[t] = GridCell(c // 3, c % 3)
    model = CobusyModel(tuple(names), np.array(m1), np.outer(m1, m1))
    inv = make_inventory([(f"{t}-s{j}", t, f"env-{t}", "r0", 10000.0) for t in names for j in range(2)])
    quiet = {t for t in names if t.endswith("k0")}

    def all_quiet_share(target: float, spread: float = 0.0) -> float:
        placer = ReplicaPlacer(inv, cells, seed=5, cobusy=model, cobusy_risk_target=target, cobusy_spread=spread)
        rng = np.random.default_rng(5)
        blocks = [list(placer.place(inv.server[int(rng.integers(len(names) * 2))], 3, rng=rng).targets)
                  for _ in range(200)]
        for _ in range(6):
            for b in blocks:
                lost = b.pop(int(rng.integers(3)))
                placer.release(lost, placer.config.block_size_mb)
                b.append(placer.place(None, 1, existing=b, rng=rng).targets[0])
        return float(np.mean([all(s.split("-")[0] in quiet for s in b) for b in blocks]))

    assert all_quiet_share(0.0) > 0.9
    assert all_quiet_share(1e-2) < 0.5


def test_new_target_spreads_new_blocks_as_the_risk_target_spreads_repairs() -> None:
    # New blocks written on w take the lowest estimate (q0) with no new-block target; with one
    # every tenant keeping the block under it (q0..q4) is as good, b never; repairs are unchanged.
    # The history predicted itself (3% of the quiet tenants turned busy): the target applies.
    cells, model, inv = _quiet_cell()
    model = replace(model, quiet_turnover=0.03)
    plain = ReplicaPlacer(inv, cells, seed=6, cobusy=model, cobusy_new_target=0.0)
    spread = ReplicaPlacer(inv, cells, seed=6, cobusy=model, cobusy_new_target=1e-5)
    assert spread.new_block_target == 1e-5 and plain.new_block_target == 0.0
    rng_a, rng_b = np.random.default_rng(6), np.random.default_rng(6)

    def second(placer: ReplicaPlacer, rng: np.random.Generator) -> str:
        res = placer.place("w-s0", 2, rng=rng)
        for s in res.targets:
            placer.release(s, placer.config.block_size_mb)
        return res.targets[1].split("-")[0]

    assert {second(plain, rng_a) for _ in range(200)} == {"q0"}
    got = [second(spread, rng_b) for _ in range(300)]
    counts = {t: got.count(t) for t in ("q0", "q1", "q2", "q3", "q4", "b")}
    assert counts["b"] == 0 and all(30 <= counts[t] <= 90 for t in ("q0", "q1", "q2", "q3", "q4")), counts
    assert spread.place("w-s0", 2, rng=rng_b, risk_target=0.0).targets[1].startswith("q0-")  # a call may still ask
    for bad in (-1e-9, 1.0, float("nan")):
        with pytest.raises(PolicyError, match="cobusy_new_target"):
            ReplicaPlacer(inv, cells, cobusy=model, cobusy_new_target=bad)


def test_new_blocks_keep_the_lowest_estimate_where_quiet_tenants_turn_busy() -> None:
    # The same placer, estimates whose history did not predict itself (30% of the tenants quiet in
    # its first half busy in its second, or not measured): new blocks take the lowest estimate (q0)
    # whatever the target, draw for draw as with no target; refitted estimates that predict again
    # (set_cobusy) spread them again. Repairs keep their own target either way.
    cells, model, inv = _quiet_cell()
    assert model.quiet_turnover == 1.0  # built without a history: not measured
    for turnover in (1.0, 0.3, 0.0701):
        m = replace(model, quiet_turnover=turnover)
        plain = ReplicaPlacer(inv, cells, seed=6, cobusy=m, cobusy_new_target=0.0)
        gated = ReplicaPlacer(inv, cells, seed=6, cobusy=m, cobusy_new_target=1e-5)
        assert gated.new_block_target == 0.0
        rng_a, rng_b = np.random.default_rng(6), np.random.default_rng(6)
        for _ in range(50):
            a, b = plain.place("w-s0", 2, rng=rng_a).targets, gated.place("w-s0", 2, rng=rng_b).targets
            assert a == b and b[1].startswith("q0-")
            for p, t in ((plain, a), (gated, b)):
                for x in t:
                    p.release(x, 256.0)
    gated.set_cobusy(replace(model, quiet_turnover=0.07))
    assert gated.new_block_target == 1e-5
    rng = np.random.default_rng(1)
    assert len({gated.place("w-s0", 2, rng=rng).targets[1].split("-")[0] for _ in range(60)}) > 1
    lax = ReplicaPlacer(inv, cells, cobusy=model, cobusy_new_target=1e-5, cobusy_new_max_turnover=1.0)
    assert lax.new_block_target == 1e-5  # 1.0: spread whatever the history
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(PolicyError, match="cobusy_new_max_turnover"):
            ReplicaPlacer(inv, cells, cobusy=model, cobusy_new_max_turnover=bad)


def test_quiet_turnover_is_the_share_of_first_half_quiet_tenants_busy_later() -> None:
    busy = np.zeros((5, 10), dtype=bool)
    busy[0, 2] = True  # busy in the first half: not counted
    busy[1, 7] = True  # quiet, then busy: turned
    busy[2, 9] = True  # turned
    # tenants 3 and 4 quiet throughout
    assert quiet_turnover(busy) == pytest.approx(2 / 4)
    assert quiet_turnover(np.ones((3, 10), dtype=bool)) == 0.0  # none quiet: nothing to be wrong about
    assert quiet_turnover(np.zeros((3, 1), dtype=bool)) == 0.0
    # fit_cobusy measures it on the hard busy samples of the history it fits
    cpu = np.where(busy, 0.9, 0.5)
    fitted = fit_cobusy([f"t{i}" for i in range(5)], cpu, 0.0, 300.0, 2 / 3)
    assert fitted.quiet_turnover == pytest.approx(0.5)
    assert aligned(fitted, ["t4", "t0", "x"]).quiet_turnover == pytest.approx(0.5)  # carried over


def test_risk_target_under_every_estimate_changes_nothing() -> None:
    # No tenant good enough: the same repairs, draw for draw, as with no target (the lowest).
    cells, model, inv = _quiet_cell()
    plain = ReplicaPlacer(inv, cells, seed=4, cobusy=model, cobusy_risk_target=0.0)
    strict = ReplicaPlacer(inv, cells, seed=4, cobusy=model, cobusy_risk_target=1e-7)
    rng_a, rng_b = np.random.default_rng(4), np.random.default_rng(4)
    for _ in range(100):
        a = plain.place(None, 1, existing=["w-s1"], rng=rng_a).targets
        b = strict.place(None, 1, existing=["w-s1"], rng=rng_b).targets
        assert a == b
        plain.release(a[0], 256.0)
        strict.release(b[0], 256.0)


def test_risk_target_is_checked() -> None:
    cells, model, inv = _quiet_cell()
    for bad in (-1e-9, 1.0, float("nan")):
        with pytest.raises(PolicyError, match="cobusy_risk_target"):
            ReplicaPlacer(inv, cells, cobusy=model, cobusy_risk_target=bad)
        with pytest.raises(PolicyError, match="risk_target"):
            ReplicaPlacer(inv, cells, cobusy=model).place("w-s0", 2, risk_target=bad)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=300), st.integers(1, 40), st.integers(0, 300))
def test_the_partial_walk_order_is_the_full_stable_sort(values: list[int], head: int, read: int) -> None:
    # The co-busy walk reads candidates lowest score first, ties by index, sorting all of them only
    # when it reads past the lowest ones; with many ties (at the cut too) the order must be exactly
    # the full stable sort's, so placement does not depend on how far the walk went.
    scores = np.array(values, dtype=np.float64) / 7.0
    full = np.argsort(scores, kind="stable").tolist()
    walk = _ascending(scores, head)
    got = [j for _, j in zip(range(read), walk, strict=False)]
    assert got == full[:read]
    assert got + list(walk) == full


def _spread_cell(quiet_servers: int = 2, other: float = 5e-4) -> tuple[dict[str, GridCell], CobusyModel, Inventory]:
    """Writer ``w`` alone in cell (0, 0); cell (1, 1) holds a quiet tenant ``q`` (busy 1e-4 of the
    time, ``quiet_servers`` servers) and four busier ones ``o0..o3`` (``other``: by default each
    keeps a block with ``w`` under the risk target, 5e-7), two servers each, every server 1,000 GB,
    one environment per tenant, all independent."""
    names = ["w", "q", "o0", "o1", "o2", "o3"]
    m1 = np.array([1e-3, 1e-4, other, other, other, other])
    cells = {t: GridCell(0, 0) if t == "w" else GridCell(1, 1) for t in names}
    rows = [(f"{t}-s{k}", t, f"env-{t}", "r0", 1000.0) for t in names for k in range(quiet_servers if t == "q" else 2)]
    return cells, CobusyModel(tuple(names), m1, np.outer(m1, m1)), make_inventory(rows)


def test_spread_bound_passes_over_a_tenant_past_twice_its_share_of_the_choices() -> None:
    # 600 blocks, each with its second replica in cell (1, 1), where q has 2 of the 10 servers. The
    # estimates rank q lowest for every block: without a bound q takes all 600; with the bound (2,
    # HDFS's considerLoad factor) q stops at twice its servers' share, 40% of the cell's choices, and the others
    # take the rest.
    cells, model, inv = _spread_cell()

    def split(spread: float) -> tuple[dict[str, int], ReplicaPlacer]:
        placer = ReplicaPlacer(inv, cells, seed=7, cobusy=model, cobusy_spread=spread)
        rng = np.random.default_rng(7)
        got = [placer.place("w-s0", 2, rng=rng).targets[1].split("-")[0] for _ in range(600)]
        return {t: got.count(t) for t in ("q", "o0", "o1", "o2", "o3")}, placer

    unbounded, _ = split(0.0)
    assert unbounded["q"] == 600
    counts, placer = split(2.0)
    assert 235 <= counts["q"] <= 241, counts
    assert sum(counts.values()) == 600 and min(counts[o] for o in ("o0", "o1", "o2", "o3")) > 50
    over = dict(zip(placer.tenant_names, placer.tenants_over_spread().tolist(), strict=True))
    assert over["q"] == (counts["q"] > 240)  # bound: 2 x 600 choices x 2 / 10 servers
    assert not any(over[o] for o in ("o0", "o1", "o2", "o3"))


def test_spread_bound_never_trades_the_risk_target_for_spread() -> None:
    # The others are busy 1e-2 of the time: a block on w and one of them is estimated at 1e-5, over
    # the risk target (1e-6). q stays the choice past the bound: availability first.
    cells, model, inv = _spread_cell(other=1e-2)
    placer = ReplicaPlacer(inv, cells, seed=7, cobusy=model, cobusy_spread=2.0)
    rng = np.random.default_rng(7)
    assert all(placer.place("w-s0", 2, rng=rng).targets[1].startswith("q-") for _ in range(300))
    assert placer.tenants_over_spread()[list(placer.tenant_names).index("q")]


def test_spread_bound_counts_choices_so_a_reimaged_tenant_does_not_draw_more() -> None:
    # The bound counts the choices a tenant took, not what its servers hold now: wiping q's servers
    # (a reimage) does not make q look empty and take the next blocks back. (A bound on the servers'
    # fill did: it sent replicas to the tenants reimaged most often, and the 4M-block year's
    # exposure rose, docs/bench/cobusy.md.)
    cells, model, inv = _spread_cell()
    a = ReplicaPlacer(inv, cells, seed=8, cobusy=model, cobusy_spread=2.0)
    b = ReplicaPlacer(inv, cells, seed=8, cobusy=model, cobusy_spread=2.0)
    ra, rb = np.random.default_rng(8), np.random.default_rng(8)
    first = [a.place("w-s0", 2, rng=ra).targets for _ in range(300)]
    assert first == [b.place("w-s0", 2, rng=rb).targets for _ in range(300)]
    for k in range(2):
        b.reset_server(f"q-s{k}")
    assert [a.place("w-s0", 2, rng=ra).targets for _ in range(300)] == [
        b.place("w-s0", 2, rng=rb).targets for _ in range(300)
    ]


def test_spread_bound_never_fails_a_placement_and_changes_nothing_until_passed() -> None:
    # Only q in the cell: past the bound it is still the only choice, so it takes every block.
    names = ["w", "q"]
    cells = {"w": GridCell(0, 0), "q": GridCell(1, 1)}
    inv = make_inventory([(f"{t}-s{k}", t, f"env-{t}", "r0", 1000.0) for t in names for k in range(2)])
    model = CobusyModel(tuple(names), np.array([1e-3, 1e-4]), np.outer([1e-3, 1e-4], [1e-3, 1e-4]))
    placer = ReplicaPlacer(inv, cells, seed=9, cobusy=model, cobusy_spread=2.0)
    assert all(placer.place("w-s0", 2).targets[1].startswith("q-") for _ in range(200))
    # A bound nobody reaches: the same choices, draw for draw, as no bound (the default).
    cells5, model5, inv5 = _spread_cell()
    assert ReplicaPlacer(inv5, cells5, cobusy=model5).cobusy_spread == 0.0
    a = ReplicaPlacer(inv5, cells5, seed=9, cobusy=model5, cobusy_spread=0.0)
    b = ReplicaPlacer(inv5, cells5, seed=9, cobusy=model5, cobusy_spread=1e9)
    ra, rb = np.random.default_rng(9), np.random.default_rng(9)
    assert [a.place("w-s1", 2, rng=ra).targets for _ in range(100)] == [
        b.place("w-s1", 2, rng=rb).targets for _ in range(100)
    ]


@pytest.mark.parametrize("bad", [0.5, -1.0, float("nan"), float("inf")])
def test_spread_bound_refuses_what_is_not_a_factor(bad: float) -> None:
    cells, model, inv = _spread_cell()
    with pytest.raises(PolicyError, match="cobusy_spread must be 0 \\(no bound\\) or >= 1"):
        ReplicaPlacer(inv, cells, cobusy=model, cobusy_spread=bad)


def _one_tenant_cell(servers: int = 10) -> tuple[dict[str, GridCell], CobusyModel, Inventory]:
    """Writer ``w`` alone in cell (0, 0); cell (1, 1) holds the quiet tenant ``q`` (``servers``
    servers) and the busy ``b`` (two servers); independent, one environment per tenant."""
    names = ["w", "q", "b"]
    m1 = np.array([1e-3, 1e-3, 0.5])
    cells = {"w": GridCell(0, 0), "q": GridCell(1, 1), "b": GridCell(1, 1)}
    rows = [(f"{t}-s{k}", t, f"env-{t}", "r0", 10000.0) for t in names for k in range(servers if t == "q" else 2)]
    return cells, CobusyModel(tuple(names), m1, np.outer(m1, m1)), make_inventory(rows)


def test_replicas_go_to_the_chosen_tenants_less_reimaged_servers() -> None:
    # q's first five servers were reimaged three times each in the history, the other five never.
    # The tenant is chosen as before (q, the lowest estimate, every time); within it, two random
    # servers and the one with fewer reimages seen: a reimaged server takes a replica only when both
    # draws are reimaged ones (about 1 in 4), against 1 in 2 for a uniform server (one choice).
    cells, model, inv = _one_tenant_cell()
    seen = {f"q-s{k}": 3.0 for k in range(5)}

    def on_reimaged(choices: int, seed: int) -> float:
        placer = ReplicaPlacer(inv, cells, seed=seed, cobusy=model, server_reimages=seen, reimage_choices=choices)
        rng = np.random.default_rng(seed)
        got = [placer.place("w-s0", 2, rng=rng).targets[1] for _ in range(400)]
        assert all(s.startswith("q-") for s in got)  # the tenant choice is unchanged
        return float(np.mean([s in seen for s in got]))

    for seed in (1, 2, 3):
        uniform, two = on_reimaged(1, seed), on_reimaged(2, seed)
        assert 0.42 < uniform < 0.58 and 0.17 < two < 0.33, (seed, uniform, two)
        assert on_reimaged(5, seed) < 0.05  # five draws: almost always one of the never reimaged


def test_reimages_seen_count_the_history_and_every_reset_server() -> None:
    # reset_server is what the durability year (and a cluster) calls on a reimage: the wiped server
    # then counts one more, so a server reimaged over and over stops taking replicas it would lose.
    cells, model, inv = _one_tenant_cell(servers=2)
    placer = ReplicaPlacer(inv, cells, seed=4, cobusy=model, server_reimages={"q-s0": 1.0, "gone": 9.0},
                           reimage_choices=2)
    assert placer.reimages_seen("q-s0") == 1.0 and placer.reimages_seen("q-s1") == 0.0
    for _ in range(3):
        placer.reset_server("q-s1")
    assert placer.reimages_seen("q-s1") == 3.0
    rng = np.random.default_rng(4)
    got = [placer.place("w-s0", 2, rng=rng).targets[1] for _ in range(200)]
    assert 0.65 < got.count("q-s0") / len(got) < 0.85  # q-s1 only when both draws are q-s1 (1 in 4)


def test_one_reimage_choice_ignores_the_history_draw_for_draw() -> None:
    # reimage_choices=1 is HDFS-H's uniform server: a skewed history changes no target.
    cells, model, inv = _spread_cell()
    a = ReplicaPlacer(inv, cells, seed=6, cobusy=model, reimage_choices=1)
    b = ReplicaPlacer(inv, cells, seed=6, cobusy=model, reimage_choices=1, server_reimages={"q-s0": 5.0})
    ra, rb = np.random.default_rng(6), np.random.default_rng(6)
    assert [a.place("w-s0", 2, rng=ra).targets for _ in range(100)] == [
        b.place("w-s0", 2, rng=rb).targets for _ in range(100)
    ]


@pytest.mark.parametrize("choices", [0, -1, 1.5])
@pytest.mark.parametrize("name", ["reimage_choices", "repair_choices"])
def test_reimage_and_repair_choices_must_be_positive_integers(name: str, choices: float) -> None:
    cells, model, inv = _one_tenant_cell()
    with pytest.raises(PolicyError, match=f"{name} must be an integer >= 1"):
        ReplicaPlacer(inv, cells, cobusy=model, **{name: choices})  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1.0, float("nan"), float("inf")])
def test_server_reimages_must_be_counts(count: float) -> None:
    cells, model, inv = _one_tenant_cell()
    with pytest.raises(PolicyError, match=r"server_reimages\['q-s0'\]: a count >= 0"):
        ReplicaPlacer(inv, cells, cobusy=model, server_reimages={"q-s0": count})


def test_re_replications_take_the_less_reimaged_of_the_good_enough_tenants() -> None:
    # q0..q4 all keep a repaired block under the risk target, so for availability they are equal;
    # q0's and q1's servers were reimaged five times each. With two repair choices a repair goes to q0 or
    # q1 only when both draws are among them (about 4 in 25, against 2 in 5 uniformly), and a
    # reimage seen later (reset_server) counts the same way. New blocks still take the lowest
    # estimate, q0, however often it is reimaged: availability first.
    cells, model, inv = _quiet_cell()
    hot = {f"{t}-s{k}": 5.0 for t in ("q0", "q1") for k in range(2)}

    def repaired(choices: int, seed: int, wipe: str | None = None) -> tuple[float, float]:
        placer = ReplicaPlacer(inv, cells, seed=seed, cobusy=model, cobusy_risk_target=1e-5, server_reimages=hot,
                               reimage_choices=1, repair_choices=choices)
        for _ in range(12 if wipe else 0):
            placer.reset_server(wipe)
        rng = np.random.default_rng(seed)
        got = []
        for _ in range(500):
            res = placer.place(None, 1, existing=["w-s0"], rng=rng)
            placer.release(res.targets[0], placer.config.block_size_mb)
            got.append(res.targets[0].split("-")[0])
        assert all(placer.place("w-s0", 2, rng=rng).targets[1].startswith("q0-") for _ in range(20))
        assert "b" not in got
        return float(np.mean([t in ("q0", "q1") for t in got])), float(np.mean([t == "q2" for t in got]))

    for seed in (1, 2):
        uniform, _ = repaired(1, seed)
        two, q2 = repaired(2, seed)
        assert 0.33 < uniform < 0.47 and 0.1 < two < 0.23, (seed, uniform, two)
        _, q2_wiped = repaired(2, seed, wipe="q2-s0")  # q2 now 6 a server: passed over like q0 and q1
        assert q2_wiped < 0.5 * q2, (seed, q2, q2_wiped)
