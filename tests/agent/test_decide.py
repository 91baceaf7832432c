"""Table tests of the pure decide stage: kills, hysteresis, cool-down, kill limit, damping, staleness."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agent.attribute import ContainerView, NodeView, is_application_master
from agent.decide import DecideState, Policy, decide

NOW = 1_000.0


def container(cid: str, start: float, cores: float = 1.0, memory_mb: float = 0.0,
              alloc_cores: float | None = None, alloc_memory_mb: float | None = None) -> ContainerView:
    return ContainerView(cid, cores, memory_mb, start, ((int(start), start),), (int(start),),
                         alloc_cores, alloc_memory_mb)


def view(primary_cores: int, primary_mb: int, containers: list[ContainerView], *, t: float = NOW,
         raw: float | None = None) -> NodeView:
    return NodeView(t, 1.0, 0.0, 0.0, float(primary_cores) if raw is None else raw, primary_cores, primary_mb,
                    sum(c.cpu_cores for c in containers), sum(c.memory_mb for c in containers), 0.0, 0.0,
                    tuple(containers))


POLICY = Policy(capacity_cores=8, capacity_memory_mb=8000, reserve_cores=2, reserve_memory_mb=2000,
                max_kills_per_round=4, cooldown_s=60, advertise_threshold_cores=1,
                advertise_threshold_memory_mb=1000, advertise_hold_s=30, busy_cpu_cores=6,
                busy_clear_margin_cores=1, stale_after_s=3)

# (name, primary cores, primary MB, containers (id, start, cores, MB), expected kills in order)
KILL_CASES = [
    ("fits: no kill", 2, 1000, [("a", 1, 1, 500), ("b", 2, 1, 500)], []),
    ("exactly at budget: no kill", 4, 1000, [("a", 1, 1, 500), ("b", 2, 1, 500)], []),
    ("one core short: youngest only", 4, 1000, [("a", 1, 1, 500), ("b", 3, 1, 500), ("c", 2, 1, 500)], ["b"]),
    ("two cores short: two youngest", 5, 1000, [("a", 1, 1, 500), ("b", 3, 1, 500), ("c", 2, 1, 500)],
     ["b", "c"]),
    ("memory short: youngest that frees memory", 1, 5200,
     [("a", 1, 1, 600), ("b", 3, 1, 300), ("c", 2, 1, 400)], ["b", "c"]),
    ("skips a young container that frees nothing short", 1, 5400,
     [("a", 1, 1, 600), ("b", 3, 1, 0), ("c", 2, 1, 500)], ["c"]),
    ("big young container is enough alone", 5, 1000, [("a", 1, 1, 0), ("b", 3, 2, 0)], ["b"]),
    ("primary alone over budget: every container", 7, 1000, [("a", 1, 1, 0), ("b", 2, 1, 0)], ["b", "a"]),
    ("the ApplicationMaster (container 1) goes last, however young", 5, 1000,
     [("container_1_0001_01_000002", 1, 1, 500), ("container_1_0001_01_000001", 3, 1, 500)],
     ["container_1_0001_01_000002"]),
    # issue 36 D2: an AM is never killed while a task container can be killed instead; a round that
    # kills tasks leaves the AM alone, even when the tasks do not make the reserve whole
    ("tasks short of the need: the AM waits for the next round", 6, 1000,
     [("container_1_0001_01_000002", 1, 1, 500), ("container_1_0001_01_000001", 3, 1, 500)],
     ["container_1_0001_01_000002"]),
    ("a second attempt's AM (container 1 of attempt 2) is an AM too", 5, 1000,
     [("container_1_0001_02_000002", 1, 1, 500), ("container_1_0001_02_000001", 3, 1, 500)],
     ["container_1_0001_02_000002"]),
]


@pytest.mark.parametrize("name,primary_cores,primary_mb,specs,expected", KILL_CASES, ids=[c[0] for c in KILL_CASES])
def test_kills_youngest_first_never_more_than_needed(name, primary_cores, primary_mb, specs, expected):
    containers = [container(cid, start, cores, mb) for cid, start, cores, mb in specs]
    decision = decide(view(primary_cores, primary_mb, containers), NOW, POLICY, DecideState())
    assert [k.container_id for k in decision.kills] == expected
    freed_cores = sum(k.cores for k in decision.kills)
    freed_mb = sum(k.memory_mb for k in decision.kills)
    if expected:
        # the reserve is whole after the kills (unless nothing is left to kill, or an AM waits) ...
        am_waits = any(is_application_master(c.container_id) for c in containers) and not any(
            is_application_master(k.container_id) for k in decision.kills)
        if primary_cores <= POLICY.capacity_cores - POLICY.reserve_cores and not am_waits:
            assert decision.deficit_cores - freed_cores <= 1e-9 and decision.deficit_memory_mb - freed_mb <= 1e-9
        # ... and without the last kill it would not be (never more than needed)
        last = decision.kills[-1]
        assert (decision.deficit_cores - (freed_cores - last.cores) > 1e-9
                or decision.deficit_memory_mb - (freed_mb - last.memory_mb) > 1e-9)
        assert all("youngest" in k.reason for k in decision.kills)


def test_allocation_is_charged_not_cpu_burst_but_memory_takes_the_larger():
    burst = container("a", 1, cores=3.0, memory_mb=900, alloc_cores=1.0, alloc_memory_mb=500)
    assert burst.footprint_cores == 1.0 and burst.footprint_memory_mb == 900
    unknown = container("b", 1, cores=0.4, memory_mb=100)
    assert unknown.footprint_cores == 0.4 and unknown.footprint_memory_mb == 100


def test_at_most_n_kills_per_round_then_the_rest_next_tick():
    policy = Policy(**{**POLICY.__dict__, "max_kills_per_round": 2})
    containers = [container(f"c{i}", i, 1, 0) for i in range(5)]
    first = decide(view(6, 0, containers), NOW, policy, DecideState())
    assert [k.container_id for k in first.kills] == ["c4", "c3"]
    assert any("kill limit 2" in r for r in first.reasons)
    dying = {k.container_id for k in first.kills}
    second = decide(view(6, 0, containers), NOW + 1, policy, first.state, dying)
    assert [k.container_id for k in second.kills] == ["c2", "c1"]


def test_an_am_is_killed_only_once_no_task_container_is_left_live_or_dying():
    am, task = "container_1_0001_01_000001", "container_1_0001_01_000002"
    containers = [container(task, 1, 1, 0), container(am, 3, 1, 0)]
    first = decide(view(7, 0, containers), NOW, POLICY, DecideState())
    assert [k.container_id for k in first.kills] == [task]
    # the task is still exiting: the AM is not taken in its place
    second = decide(view(7, 0, containers, t=NOW + 1), NOW + 1, POLICY, first.state, dying={task})
    assert second.kills == ()
    # the task is gone and the primary still needs the room: now the AM goes
    third = decide(view(7, 0, [container(am, 3, 1, 0)], t=NOW + 2), NOW + 2, POLICY, second.state)
    assert [k.container_id for k in third.kills] == [am]


def test_dying_containers_count_as_freed_so_no_double_kill():
    containers = [container("a", 1, 1, 0), container("b", 2, 1, 0), container("c", 3, 1, 0)]
    first = decide(view(4, 0, containers), NOW, POLICY, DecideState())
    assert [k.container_id for k in first.kills] == ["c"]
    # next tick: c is still exiting (still in the sample); nothing more must die
    second = decide(view(4, 0, containers, t=NOW + 1), NOW + 1, POLICY, first.state, dying={"c"})
    assert second.kills == ()
    assert any("killed recently" in r for r in second.reasons)


def test_cooldown_after_kill_holds_advertised_amount_then_releases():
    state = DecideState(advertised_cores=3, advertised_memory_mb=5000, last_change_s=0.0)
    containers = [container("a", 1, 1, 0), container("b", 2, 1, 0)]
    spike = decide(view(6, 1000, containers), NOW, POLICY, state)
    assert spike.kills and spike.advertise_cores == 0  # shrunk at once
    assert spike.state.cooldown_until_s == NOW + POLICY.cooldown_s
    during = decide(view(1, 1000, [], t=NOW + 59), NOW + 59, POLICY, spike.state)
    assert during.target_cores == 5 and during.advertise_cores == 0
    assert any("cool-down" in r for r in during.reasons)
    # the primary keeps climbing during the cool-down: small shrinks apply at once, one way only
    spike_state = replace(spike.state, advertised_cores=5, advertised_memory_mb=5000)
    climbing = decide(view(1, 1100, [], t=NOW + 2), NOW + 2, POLICY, spike_state)
    assert climbing.advertise_memory_mb == 8000 - 1100 - 2000 and climbing.kills == ()
    after = decide(view(1, 1000, [], t=NOW + 61), NOW + 61, POLICY, during.state)
    assert after.advertise_cores == 5


ADVERTISE_CASES = [
    # (name, advertised cores/MB, last change, primary cores, primary MB, now, expected advertised)
    ("small growth held", (3, 5000), NOW - 5, 2, 900, NOW, (3, 5000)),
    ("growth past threshold applied", (3, 5000), NOW - 5, 1, 900, NOW, (5, 5000)),
    ("small change applied after hold", (3, 5000), NOW - 31, 2, 900, NOW, (4, 5100)),
    ("memory past threshold applied", (4, 5000), NOW - 5, 2, 3000, NOW, (4, 3000)),
    ("unchanged stays", (4, 5000), NOW - 100, 2, 1000, NOW, (4, 5000)),
]


@pytest.mark.parametrize("name,adv,last,pc,pm,now,expected", ADVERTISE_CASES, ids=[c[0] for c in ADVERTISE_CASES])
def test_advertised_changes_only_past_threshold_or_after_hold(name, adv, last, pc, pm, now, expected):
    state = DecideState(advertised_cores=adv[0], advertised_memory_mb=adv[1], last_change_s=last)
    decision = decide(view(pc, pm, []), now, POLICY, state)
    assert (decision.advertise_cores, decision.advertise_memory_mb) == expected
    assert (decision.target_cores, decision.target_memory_mb) == (8 - pc - 2, 8000 - pm - 2000)
    if expected != adv:
        assert decision.state.last_change_s == now


def test_flapping_primary_does_not_flap_the_advertised_amount():
    state = DecideState(advertised_cores=4, advertised_memory_mb=5000, last_change_s=NOW)
    seen = set()
    for i in range(1, 25):  # primary alternates 2 and 3 cores every second for 24 s (< hold time)
        decision = decide(view(2 + i % 2, 1000, [], t=NOW + i), NOW + i, POLICY, state)
        state = decision.state
        seen.add(decision.advertise_cores)
    assert seen == {4}


@pytest.mark.parametrize("age_s,expect_stale", [(0.5, False), (2.9, False), (3.5, True), (None, True)])
def test_stale_or_missing_sample_harvests_nothing_and_says_so(age_s, expect_stale):
    state = DecideState(advertised_cores=4, advertised_memory_mb=5000, last_change_s=0.0)
    containers = [container("a", 1, 1, 0)]
    v = None if age_s is None else view(7, 1000, containers, t=NOW - age_s)
    decision = decide(v, NOW, POLICY, state)
    assert decision.stale is expect_stale
    if expect_stale:
        assert (decision.advertise_cores, decision.advertise_memory_mb) == (0, 0)
        assert decision.kills == () and decision.busy is True
        assert any(r.startswith("stale") and "harvest nothing" in r for r in decision.reasons)
    else:
        assert decision.kills  # fresh data over budget still kills


BUSY_CASES = [
    # (was busy, primary cores measured, expected busy); threshold 6, clear margin 1
    (False, 5.9, False),
    (False, 6.1, True),
    (True, 5.5, True),
    (True, 5.0, False),
    (True, 4.9, False),
]


@pytest.mark.parametrize("was,raw,expected", BUSY_CASES)
def test_datanode_busy_flag_has_hysteresis(was, raw, expected):
    decision = decide(view(math.ceil(raw), 0, [], raw=raw), NOW, POLICY, DecideState(busy=was))
    assert decision.busy is expected


# (name, primary cores, running containers' cores, forecast growth, expected target cores);
# capacity 8, reserve 2: harvestable = 6 - primary
FORECAST_CASES = [
    ("no forecast growth: all of the harvestable", 1, 0, 0, 5),
    ("growth held back from the free cores", 1, 0, 3, 2),
    ("running containers keep their cores, the free ones lose the growth", 1, 2, 2, 3),
    ("growth beyond the free cores: what runs, no kill", 1, 4, 3, 4),
    ("growth of the whole harvestable", 0, 0, 9, 0),
]


@pytest.mark.parametrize(("name", "primary", "running", "growth", "target"), FORECAST_CASES,
                         ids=[c[0] for c in FORECAST_CASES])
def test_forecast_growth_lowers_the_target_never_below_what_runs(name: str, primary: int, running: int,
                                                                growth: int, target: int) -> None:
    containers = [container(f"c{i}", float(i), 1.0, 0.0, 1.0, 0.0) for i in range(running)]
    d = decide(view(primary, 1000, containers), NOW, POLICY, DecideState(), growth_cores=growth)
    assert d.target_cores == target
    assert d.kills == ()
    assert any(r.startswith("forecast:") for r in d.reasons) == (target < 6 - primary)
    # the memory side and the kills are the forecast-free decision's
    plain = decide(view(primary, 1000, containers), NOW, POLICY, DecideState())
    assert (d.target_memory_mb, d.deficit_cores, d.busy) == (plain.target_memory_mb, plain.deficit_cores, plain.busy)
