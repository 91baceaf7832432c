"""Adapter: every simulated server runs the node agent's own decision (``agent.decide.decide``).

The scheduling simulator does not choose what to kill, nor how many cores YARN may use on a server:
each server is a node whose agent decides, with the production function and its defaults (reserve,
youngest container first, at most ``max_kills_per_round`` kills per agent tick, cool-down after a
kill during which the advertised cores never grow, damping). This module only translates:

- simulator -> agent: a ``NodeView`` per server (primary cores rounded up as the agent does, one
  ``ContainerView`` per running task holding one core, its launch time as process start and its
  launch sequence + 2 as container number: the simulator has no ApplicationMasters, and the agent
  kills container 1 of an attempt last); memory is not simulated (capacity without limit, no use);
- agent -> simulator: the kills (container numbers back to task indices) and the advertised cores,
  which are the server's YARN capacity until the next decision.

Ticks: the agent decides every ``tick_s`` (1 s by default); one simulator step of ``step_s`` holds
``step_s / tick_s`` ticks. Within a step the adapter runs ticks until a tick kills nothing (later
ticks of the step would see the same node: the killed tasks have gone, the primary has not moved),
so the per-round cap limits kills per tick, as on a node, not per step. The tick after a server's
last kill, once its tasks no longer eat into the reserve (or none is left), cannot kill: it runs
with the idle servers' array form below, at its own time.

Which servers are asked: a server is asked when its primary + tasks exceed ``cores - reserve`` (a
deficit), or when its advertised cores differ from the target, except in a cool-down when the
target is above them (the cool-down holds them). For any other server ``decide`` would return the
advertised cores unchanged with no kill, so the call is skipped. Asked servers that cannot kill
(no deficit, or a deficit and no task: the primary alone eats into the reserve) go through
``agent.decide.advertise_without_kills``, the array form of the same damping functions
``decide`` calls, all at once; ``test_agent_nodes`` checks both against
calling ``decide`` for every server with every container.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.attribute import ContainerView, NodeView
from agent.decide import DecideState, Policy, advertise_without_kills, decide, harvestable

_NO_LIMIT_MB = 1e15
_MAX_VIEWS = 200_000  # container views kept between steps (a task's never changes), then dropped


@dataclass(frozen=True)
class AgentSettings:
    """The agent's settings the simulator exposes (defaults: the agent's own)."""

    max_kills_per_round: int = Policy.max_kills_per_round
    cooldown_s: float = Policy.cooldown_s
    tick_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_kills_per_round < 1 or self.cooldown_s < 0 or not self.tick_s > 0:
            raise ValueError("max_kills_per_round must be >= 1, cooldown_s >= 0 and tick_s > 0")


class SimAgents:
    """One agent state per simulated server; ``tick`` runs the agents of one simulator step."""

    def __init__(
        self, cores: np.ndarray, reserve: np.ndarray, settings: AgentSettings, *, ask_all: bool = False
    ):
        self.cores = np.asarray(cores, dtype=np.int64)
        self.reserve = np.asarray(reserve, dtype=np.int64)
        self.settings = settings
        self.ask_all = ask_all  # call decide for every server, always with every container (the reference)
        n = self.cores.shape[0]
        self.advertised = np.maximum(0, self.cores - self.reserve)
        self.last_change_s = np.full(n, -math.inf)
        self.cooldown_until_s = np.full(n, -math.inf)
        self._policies: dict[tuple[int, int], Policy] = {}
        # Memory is not simulated: the agent advertises the whole (unlimited) memory all along, so a
        # tick never counts it as a change (which would restart the advertise hold time).
        self._memory_mb = int(harvestable(_NO_LIMIT_MB, 0, 0))
        self._views: dict[tuple[int, float], ContainerView] = {}  # per (launch sequence, start): its view
        self.calls = 0

    def _policy(self, s: int) -> Policy:
        key = (int(self.cores[s]), int(self.reserve[s]))
        p = self._policies.get(key)
        if p is None:
            p = Policy(
                capacity_cores=float(key[0]),
                capacity_memory_mb=_NO_LIMIT_MB,
                reserve_cores=float(key[1]),
                reserve_memory_mb=0.0,
                max_kills_per_round=self.settings.max_kills_per_round,
                cooldown_s=self.settings.cooldown_s,
                stale_after_s=math.inf,
            )
            self._policies[key] = p
        return p

    def tick(
        self,
        now_s: float,
        step_s: float,
        primary_cores: np.ndarray,
        primary_raw: np.ndarray,
        server: np.ndarray,
        start_s: np.ndarray,
        seq: np.ndarray,
    ) -> np.ndarray:
        """Run the agents for one step; return the indices (into the task arrays) of the kills.

        ``primary_cores``: the primary's cores rounded up, per server; ``primary_raw``: unrounded.
        ``server``, ``start_s``, ``seq``: the running tasks. ``advertised`` holds the result.
        """
        n = self.cores.shape[0]
        used = np.bincount(server, minlength=n)
        budget = self.cores - self.reserve
        target = np.maximum(0, budget - primary_cores)
        # In a cool-down the advertised cores never grow, and they stay put when equal to the target:
        # only a deficit or a shrink asks the agent then.
        held = (now_s < self.cooldown_until_s) & (target >= self.advertised)
        ask = (primary_cores + used > budget) | ((self.advertised != target) & ~held)
        if self.ask_all:
            ask[:] = True
        servers = np.flatnonzero(ask)
        if servers.size == 0:
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(server, kind="stable")
        bounds = np.searchsorted(server[order], np.arange(n + 1))
        rounds = max(1, int(step_s // self.settings.tick_s))
        deficit = primary_cores + used > budget
        if self.ask_all:
            full, idle = servers, servers[:0]
        else:
            # A server with a deficit and no task (its primary alone eats into the reserve) kills
            # nothing either: only its advertised cores shrink, as for the servers without a deficit.
            kills = deficit[servers] & (used[servers] > 0)
            full, idle = servers[kills], servers[~kills]
        victims: list[int] = []
        settle: dict[int, list[tuple[int, bool]]] = {}  # round -> (server, deficit left) whose tick kills nothing
        for s in full.tolist():
            tasks = order[bounds[s] : bounds[s + 1]]
            victims.extend(self._run(s, tasks, now_s, rounds, primary_cores, primary_raw, start_s, seq, settle))
        for r, got in settle.items():
            # The tick after the last kill kills nothing (no deficit left, or no task left): its
            # advertised cores through the same array form as the idle servers', at that tick's time.
            done = np.asarray([x for x, _ in got], dtype=np.int64)
            left = np.asarray([d for _, d in got], dtype=bool)
            adv, last = advertise_without_kills(
                self.cores[done], self.reserve[done], primary_cores[done], self.advertised[done],
                self.last_change_s[done], self.cooldown_until_s[done], now_s + r * self.settings.tick_s,
                self._policy(int(done[0])), left,
            )
            self.advertised[done] = adv
            self.last_change_s[done] = last
        if idle.size:
            # These kill nothing, and their advertised cores and cool-down do not depend on the
            # containers: the agent's own array form of its damping rule (``advertise_without_kills``,
            # the functions ``decide`` calls) runs them all at once. ``ask_all`` calls ``decide``
            # itself for every server with every container, and the test of this rule compares the two.
            adv, last = advertise_without_kills(
                self.cores[idle], self.reserve[idle], primary_cores[idle], self.advertised[idle],
                self.last_change_s[idle], self.cooldown_until_s[idle], now_s,
                self._policy(int(idle[0])),  # for its damping settings, the same on every server
                deficit[idle],
            )
            self.advertised[idle] = adv
            self.last_change_s[idle] = last
        return np.asarray(victims, dtype=np.int64)

    def _run(
        self,
        s: int,
        tasks: np.ndarray,
        now_s: float,
        rounds: int,
        primary_cores: np.ndarray,
        primary_raw: np.ndarray,
        start_s: np.ndarray,
        seq: np.ndarray,
        settle: dict[int, list[tuple[int, bool]]],
    ) -> list[int]:
        """The agent of server ``s`` for one step (ticks until one kills nothing); returns the
        indices of the tasks it killed and keeps its state. A tick that cannot kill (the tasks left
        no longer eat into the reserve, or none is left) is not run here: the server goes into
        ``settle`` under that tick's round, for ``tick`` to run through the array form."""
        views: dict[str, ContainerView] = {}
        task_of: dict[str, int] = {}
        known = self._views
        if len(known) > _MAX_VIEWS:
            known.clear()
        for i, q, t0 in zip(tasks.tolist(), seq[tasks].tolist(), start_s[tasks].tolist(), strict=True):
            view_i = known.get((q, t0))  # each task: one core from its launch
            if view_i is None:
                cid = _task_id(q)
                view_i = known[(q, t0)] = ContainerView(
                    container_id=cid, cpu_cores=1.0, memory_mb=0.0, start_time=t0, processes=((q, t0),), pgids=(),
                    alloc_cores=1.0,
                )
            views[view_i.container_id] = view_i
            task_of[view_i.container_id] = i
        state = DecideState(
            advertised_cores=int(self.advertised[s]),
            advertised_memory_mb=self._memory_mb,
            last_change_s=float(self.last_change_s[s]),
            cooldown_until_s=float(self.cooldown_until_s[s]),
        )
        policy = self._policy(s)
        budget = int(self.cores[s] - self.reserve[s])
        victims: list[int] = []
        for r in range(rounds):
            view = NodeView(
                timestamp=now_s + r * self.settings.tick_s,
                window_s=self.settings.tick_s,
                node_cpu_cores=float(self.cores[s]),
                node_memory_mb=_NO_LIMIT_MB,
                primary_cpu_raw=float(primary_raw[s]),
                primary_cpu_cores=int(primary_cores[s]),
                primary_memory_mb=0,
                secondary_cpu_cores=float(len(views)),
                secondary_memory_mb=0.0,
                datanode_cpu_cores=0.0,
                datanode_memory_mb=0.0,
                containers=tuple(views.values()),
            )
            decision = decide(view, now_s + r * self.settings.tick_s, policy, state)
            self.calls += 1
            state = decision.state
            for k in decision.kills:
                victims.append(task_of[k.container_id])
                del views[k.container_id]
            if not decision.kills:
                break
            deficit = int(primary_cores[s]) + len(views) > budget
            if r + 1 < rounds and not self.ask_all and (not views or not deficit):
                settle.setdefault(r + 1, []).append((s, deficit))
                break
        self.advertised[s] = state.advertised_cores
        self.last_change_s[s] = state.last_change_s
        self.cooldown_until_s[s] = state.cooldown_until_s
        return victims


def _task_id(seq: int) -> str:
    """A YARN container id for a simulated task: container number ``seq + 2``, never 1 (an AM)."""
    return f"container_0_0_0_{seq + 2}"
