"""The simulator's servers run the agent's own decision (placement_service/sim/agent_nodes.py)."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.sim.agent_nodes import AgentSettings, SimAgents


def _tick(
    agents: SimAgents,
    now: float,
    primary: list[int],
    server: list[int],
    start: list[float],
    step_s: float = 60.0,
) -> set[int]:
    p = np.array(primary, dtype=np.int64)
    got = agents.tick(
        now,
        step_s,
        p,
        p.astype(float),
        np.array(server, dtype=np.int64),
        np.array(start),
        np.arange(len(server)),
    )
    return set(got.tolist())


@pytest.mark.parametrize(
    ("server", "start", "primary", "expected"),
    [
        ([0, 0, 0], [10.0, 30.0, 20.0], [4], {1}),  # 8 cores, reserve 2: budget 6, 4 + 3 = 7: one goes
        ([0, 0, 0], [10.0, 30.0, 20.0], [5], {1, 2}),  # the latest starts die
        ([0, 1, 0, 1], [5.0, 5.0, 6.0, 1.0], [0, 5], {1}),  # only the over-full server
        ([0, 0], [5.0, 5.0], [5], {1}),  # same start: the later launch dies
        ([0, 0], [5.0, 5.0], [8], {0, 1}),  # cannot kill more than it runs
    ],
)
def test_youngest_first_through_the_agent(
    server: list[int], start: list[float], primary: list[int], expected: set[int]
) -> None:
    n = max(server) + 1
    agents = SimAgents(np.full(n, 8), np.full(n, 2), AgentSettings())
    primary = (primary + [0] * n)[:n]
    assert _tick(agents, 100.0, primary, server, start) == expected


def test_the_per_round_cap_limits_kills_per_agent_tick_not_per_step() -> None:
    server, start = [0] * 6, [float(i) for i in range(6)]
    many_ticks = SimAgents(np.array([8]), np.array([2]), AgentSettings(max_kills_per_round=4, tick_s=1.0))
    assert _tick(many_ticks, 100.0, [6], server, start) == set(range(6))  # two ticks of the step
    one_tick = SimAgents(np.array([8]), np.array([2]), AgentSettings(max_kills_per_round=4, tick_s=60.0))
    assert _tick(one_tick, 100.0, [6], server, start) == {2, 3, 4, 5}  # the youngest four, then the next step
    assert _tick(one_tick, 160.0, [6], [0, 0], [0.0, 1.0]) == {0, 1}


def test_cool_down_holds_the_advertised_cores_after_a_kill() -> None:
    agents = SimAgents(np.array([16]), np.array([4]), AgentSettings(cooldown_s=60.0))
    assert agents.advertised.tolist() == [12]
    assert _tick(agents, 0.0, [11], [0, 0], [1.0, 2.0]) == {1}  # 11 + 2 > 12
    assert agents.advertised.tolist() == [1]
    _tick(agents, 30.0, [2], [0], [1.0])  # the primary falls, but the cool-down holds the cores
    assert agents.advertised.tolist() == [1]
    _tick(agents, 61.0, [2], [0], [1.0])  # after it, the cores come back
    assert agents.advertised.tolist() == [10]
    no_cool = SimAgents(np.array([16]), np.array([4]), AgentSettings(cooldown_s=0.0))
    _tick(no_cool, 0.0, [11], [0, 0], [1.0, 2.0])
    _tick(no_cool, 30.0, [2], [0], [1.0])
    assert no_cool.advertised.tolist() == [10]


@pytest.mark.parametrize(("lockstep", "step_s", "cooldown_s"), [
    (False, 60.0, None), (True, 60.0, None), (False, 10.0, None), (True, 10.0, None), (False, 10.0, 0.0),
])
def test_skipping_servers_with_nothing_to_decide_changes_nothing(
    lockstep: bool, step_s: float, cooldown_s: float | None
) -> None:
    """The adapter's shortcuts (servers skipped, idle servers and the tick after a server's last
    kill through the array form of the damping rule) give the kills and advertised cores of
    ``decide`` called for every server with every container; a 10 s step is shorter than the 30 s
    advertise hold, so the threshold rule acts; without a cool-down the tick after the last kill
    can grow the advertised cores again."""
    settings = AgentSettings() if cooldown_s is None else AgentSettings(cooldown_s=cooldown_s)
    rng = np.random.default_rng(5)
    n = 12
    cores, reserve = rng.integers(4, 17, n), rng.integers(1, 4, n)
    if lockstep:  # three tenants of four identical servers each, their primaries moving together
        cores, reserve = np.repeat(cores[:3], 4), np.repeat(reserve[:3], 4)
    a = SimAgents(cores, reserve, settings)
    b = SimAgents(cores, reserve, settings, ask_all=True)
    server = rng.integers(0, n, 40)
    start = rng.uniform(0, 100, 40)
    for step in range(60):
        now = 100.0 + step_s * step
        primary = np.minimum(cores, rng.integers(0, 12, n))
        if lockstep:
            primary = np.minimum(cores, np.repeat(rng.integers(0, 12, 3), 4))
        args = (now, step_s, primary, primary - rng.uniform(0, 1, n), server, start, np.arange(server.size))
        ka, kb = a.tick(*args), b.tick(*args)
        assert ka.tolist() == kb.tolist()
        assert a.advertised.tolist() == b.advertised.tolist()
        assert a.last_change_s.tolist() == b.last_change_s.tolist()
        assert a.cooldown_until_s.tolist() == b.cooldown_until_s.tolist()
        keep = np.ones(server.size, dtype=bool)
        keep[ka] = False
        server, start = server[keep], start[keep]
        if rng.random() < 0.5:  # new tasks within the advertised cores
            room = np.maximum(0, a.advertised - np.bincount(server, minlength=n))
            new = np.repeat(np.arange(n), room)[: int(rng.integers(0, 6))]
            server = np.concatenate([server, new])
            start = np.concatenate([start, np.full(new.size, now)])
    assert b.calls > a.calls  # the skip did skip calls




def test_the_tick_after_the_last_kill_can_still_grow_the_advertised_cores() -> None:
    """Without a cool-down, the tick after a kill is where the advertise hold can run out: the
    shortcut for that tick must run it at its own time, as ``decide`` does."""
    cores, reserve = np.array([10]), np.array([2])  # budget 8
    got = []
    for ask_all in (False, True):
        agents = SimAgents(cores, reserve, AgentSettings(cooldown_s=0.0), ask_all=ask_all)
        agents.advertised[:] = 4  # one below the target 5 (within the threshold)
        agents.last_change_s[:] = 100.0 - 29.5  # the 30 s hold runs out 0.5 s into the step
        server = np.zeros(6, dtype=np.int64)  # primary 3 + 6 tasks > 8: one kill
        kills = agents.tick(100.0, 60.0, np.array([3]), np.array([2.5]), server, np.arange(6.0), np.arange(6))
        got.append((kills.tolist(), agents.advertised.tolist(), agents.last_change_s.tolist()))
    assert got[0] == got[1]
    assert got[0][1] == [5] and got[0][2] == [101.0]  # grown at the tick after the kill
