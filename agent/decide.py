"""Stage 3, decide: the pure policy of one tick (numbers in, decisions out, no I/O).

Per resource r in {cores, MB}:

    budget_r      = capacity_r - reserve_r                       (what primary + secondary may use)
    deficit_r     = primary_r + secondary_footprint_r - budget_r (> 0: the reserve is eaten into)
    harvestable_r = max(0, capacity_r - primary_r - reserve_r)   (what YARN may hand out in total)

With a headroom forecast (``growth_cores`` > 0, cores the primary is forecast to take back within
the hour), the cores target is ``min(harvestable, allocated) + max(0, harvestable - allocated -
growth)`` (``core/headroom_policy.advertised_cores``, the simulator's YARN-H-forecast's safe cores):
``capacity - reserve - primary - growth``, never below what running containers hold.

When a deficit is positive, containers are killed youngest first, skipping any that would not
shrink a resource in deficit, until every deficit is <= 0 (never more) or ``max_kills_per_round``
is reached. An ApplicationMaster (container 1 of an attempt: killing it fails the whole attempt, and
MapReduce gives up after two) is killed only when no task container is left to kill instead: none
chosen this round and none still dying from an earlier one (the next round sees what they freed). Containers already being killed (``dying``) count as freed, so a slow exit does not
cause a second, unneeded kill on the next tick.

The advertised amount (the node resource YARN sees) is damped so it does not flap:
1. a deficit or a kill shrinks it to the target at once (the safe side);
2. during the cool-down after a kill it never grows (the scheduler must not refill the node) and
   any shrink applies at once (the primary is still climbing; a one-way move cannot flap);
3. otherwise it moves when the change is larger than the threshold, or when the last change is at least
   ``advertise_hold_s`` old.
A missing or stale sample advertises nothing, kills nothing and says so.

DataNode busy flag: set when primary CPU > ``busy_cpu_cores``, cleared only below
``busy_cpu_cores - busy_clear_margin_cores`` (hysteresis).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agent.attribute import ContainerView, NodeView, is_application_master
from placement_service.core.headroom_policy import advertised_cores

_EPS = 1e-9


@dataclass(frozen=True)
class Policy:
    capacity_cores: float
    capacity_memory_mb: float
    reserve_cores: float
    reserve_memory_mb: float
    max_kills_per_round: int = 4
    cooldown_s: float = 60.0
    advertise_threshold_cores: float = 1.0
    advertise_threshold_memory_mb: float = 1024.0
    advertise_hold_s: float = 30.0
    busy_cpu_cores: float = math.inf
    busy_clear_margin_cores: float = 0.5
    stale_after_s: float = 3.0

    @classmethod
    def from_config(cls, config: object) -> Policy:
        names = cls.__dataclass_fields__.keys()
        return cls(**{name: getattr(config, name) for name in names})


@dataclass(frozen=True)
class DecideState:
    """What the policy remembers between ticks."""

    advertised_cores: int = 0
    advertised_memory_mb: int = 0
    last_change_s: float = -math.inf
    cooldown_until_s: float = -math.inf
    busy: bool = False


@dataclass(frozen=True)
class Kill:
    container_id: str
    processes: tuple[tuple[int, float], ...]  # (pid, create_time)
    pgids: tuple[int, ...]
    cores: float  # footprint freed
    memory_mb: float
    reason: str


@dataclass(frozen=True)
class Decision:
    timestamp: float
    stale: bool
    kills: tuple[Kill, ...]
    advertise_cores: int
    advertise_memory_mb: int
    target_cores: int
    target_memory_mb: int
    busy: bool
    deficit_cores: float
    deficit_memory_mb: float
    secondary_cores: float  # footprint of the live (not dying) containers
    secondary_memory_mb: float
    reasons: tuple[str, ...]
    state: DecideState = field(repr=False, default_factory=DecideState)


def _youngest_first(containers: Collection[ContainerView]) -> list[ContainerView]:
    """Youngest first, ApplicationMasters last (killing one fails a whole job attempt; the RM's
    over-commit preemption never picks one either)."""
    return sorted(containers, key=lambda c: (not is_application_master(c.container_id), c.age_key()),
                  reverse=True)


def _pick_kills(live: list[ContainerView], deficit_cores: float, deficit_mb: float, policy: Policy,
                budget_cores: float, budget_mb: float, primary_cores: int,
                primary_mb: int, tasks_dying: bool = False) -> tuple[list[Kill], float, float]:
    """Youngest first until both deficits are <= 0; returns kills and the deficits left.

    ApplicationMasters come last, and only in a round that kills no task container while none is
    dying (``tasks_dying``): a task that is killed instead, or is already exiting, may be enough."""
    kills: list[Kill] = []
    for container in _youngest_first(live):
        if deficit_cores <= _EPS and deficit_mb <= _EPS:
            break
        if len(kills) >= policy.max_kills_per_round:
            break
        if is_application_master(container.container_id) and (tasks_dying or kills):
            break  # AMs sort last: the rest are AMs too
        helps_cores = deficit_cores > _EPS and container.footprint_cores > _EPS
        helps_mb = deficit_mb > _EPS and container.footprint_memory_mb > _EPS
        if not (helps_cores or helps_mb):
            continue
        short = []
        if deficit_cores > _EPS:
            short.append(f"{deficit_cores:.2f} cores")
        if deficit_mb > _EPS:
            short.append(f"{deficit_mb:.0f} MB")
        reason = (
            f"reserve short by {' and '.join(short)} (primary {primary_cores} cores / {primary_mb} MB + "
            f"secondary > capacity - reserve = {budget_cores:g} cores / {budget_mb:.0f} MB); "
            f"youngest live container (started {container.start_time:.3f}), frees "
            f"{container.footprint_cores:.2f} cores / {container.footprint_memory_mb:.0f} MB"
        )
        kills.append(Kill(container.container_id, container.processes, container.pgids,
                          container.footprint_cores, container.footprint_memory_mb, reason))
        deficit_cores -= container.footprint_cores
        deficit_mb -= container.footprint_memory_mb
    return kills, deficit_cores, deficit_mb


def damp(current: Any, target: Any, threshold: float, now_s: float, last_change_s: Any,
         cooldown_until_s: Any, hold_s: float, force_shrink: Any = False) -> Any:
    """One resource's advertised value after the damping rules (see module docstring).

    Written with operators that act element-wise on numpy arrays (the simulator runs every idle
    server of a step through it at once) and stay plain Python on scalars (one node per tick, where
    ``decide`` calls it): one implementation for both."""
    shrink, grow = target < current, target > current
    in_cooldown = now_s < cooldown_until_s
    passes = (abs(target - current) > threshold) | (now_s - last_change_s >= hold_s)
    take = (shrink & (force_shrink | in_cooldown | passes)) | (grow & (in_cooldown ^ True) & passes)
    return current + (target - current) * take


def harvestable(capacity: Any, primary: Any, reserve: Any) -> Any:
    """What YARN may hand out in total: ``max(0, floor(capacity - primary - reserve))`` (whole
    units), element-wise on arrays as on scalars."""
    return np.maximum(np.floor(np.asarray(capacity) - primary - reserve + _EPS), 0).astype(np.int64)


def advertise_without_kills(capacity_cores: np.ndarray, reserve_cores: np.ndarray, primary_cores: np.ndarray,
                              advertised_cores: np.ndarray, last_change_s: np.ndarray,
                              cooldown_until_s: np.ndarray, now_s: float,
                              policy: Policy, primary_deficit: np.ndarray | bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``decide``'s advertised cores and last-change time for many nodes at once, for nodes that
    kill nothing this tick and whose memory target does not move: nodes with no deficit, and nodes
    with no container whose primary alone eats into the reserve (``primary_deficit``: per node, a
    forced shrink as ``decide`` applies on a deficit). The same functions ``decide`` uses. Returns
    (advertised cores, last change). The simulator's adapter relies on it; its test compares with
    ``decide`` called node by node."""
    target = harvestable(capacity_cores, primary_cores, reserve_cores)
    adv = damp(advertised_cores, target, policy.advertise_threshold_cores, now_s, last_change_s,
               cooldown_until_s, policy.advertise_hold_s, primary_deficit).astype(np.int64)
    return adv, np.where(adv != advertised_cores, now_s, last_change_s)


def decide(view: NodeView | None, now_s: float, policy: Policy, state: DecideState,
           dying: Collection[str] = (), ignored: Collection[str] = (), growth_cores: int = 0) -> Decision:
    """One tick of policy. ``dying``: ids of containers already signalled and not yet gone.

    ``growth_cores``: cores the primary is forecast to take back within the forecast's horizon
    (``agent.forecast``, ``core/headroom_policy.growth_cores``). The target cores become what running
    containers hold plus the free cores beyond that growth (``core/headroom_policy.advertised_cores``):
    the risky cores are not offered, and no container is killed for a forecast.

    ``ignored``: resources ("cores", "memory") the scheduler is known to over-allocate (see
    ``agent.reclaim.ignored_resources``). Their allocations are not trusted: the deficit counts
    measured use only, and only while the primary has load of that resource; without primary load a
    kill would only make room for the scheduler's next over-allocation (a kill loop).
    """
    reasons: list[str] = []
    # 1. Stale or missing sample: the safe side is to advertise nothing and to flag the DataNode.
    if view is None or now_s - view.timestamp > policy.stale_after_s:
        age = "no sample" if view is None else f"sample is {now_s - view.timestamp:.1f} s old"
        reasons.append(f"stale: {age} (limit {policy.stale_after_s:g} s); harvest nothing, kill nothing")
        changed = state.advertised_cores != 0 or state.advertised_memory_mb != 0
        new_state = replace(state, advertised_cores=0, advertised_memory_mb=0, busy=True,
                            last_change_s=now_s if changed else state.last_change_s)
        return Decision(now_s, True, (), 0, 0, 0, 0, True, 0.0, 0.0, 0.0, 0.0, tuple(reasons), new_state)

    # 2. Footprint of the containers still alive, and how far the reserve is eaten into.
    live = [c for c in view.containers if c.container_id not in dying]
    secondary_cores = sum(c.footprint_cores for c in live)
    secondary_mb = sum(c.footprint_memory_mb for c in live)
    budget_cores = policy.capacity_cores - policy.reserve_cores
    budget_mb = policy.capacity_memory_mb - policy.reserve_memory_mb
    deficit_cores = view.primary_cpu_cores + secondary_cores - budget_cores
    deficit_mb = view.primary_memory_mb + secondary_mb - budget_mb
    if "cores" in ignored:
        measured = view.primary_cpu_cores + sum(c.cpu_cores for c in live) - budget_cores
        deficit_cores = measured if view.primary_cpu_cores > 0 else min(measured, 0.0)
        reasons.append("the scheduler ignores the advertised vcores (allocations above it): cores counted "
                       "as measured, and nothing killed for cores without primary CPU load")
    if "memory" in ignored:
        measured = view.primary_memory_mb + sum(c.memory_mb for c in live) - budget_mb
        deficit_mb = measured if view.primary_memory_mb > 0 else min(measured, 0.0)
        reasons.append("the scheduler ignores the advertised memory (allocations above it): memory counted "
                       "as measured")

    # 3. Kills, youngest first, never more than needed.
    kills: list[Kill] = []
    if deficit_cores > _EPS or deficit_mb > _EPS:
        tasks_dying = any(not is_application_master(c.container_id) for c in view.containers
                          if c.container_id in dying)
        kills, left_cores, left_mb = _pick_kills(live, deficit_cores, deficit_mb, policy, budget_cores,
                                                 budget_mb, view.primary_cpu_cores, view.primary_memory_mb,
                                                 tasks_dying)
        if kills:
            reasons.append(f"killing {len(kills)} container(s) to make the reserve whole")
        am_waits = any(is_application_master(c.container_id) and c.container_id not in {k.container_id for k in kills}
                       for c in live)
        if left_cores > _EPS or left_mb > _EPS:
            if am_waits and (tasks_dying or any(not is_application_master(k.container_id) for k in kills)):
                reasons.append("ApplicationMaster spared this round: task containers killed or exiting may "
                               "free enough")
            elif len(kills) >= policy.max_kills_per_round:
                reasons.append(f"kill limit {policy.max_kills_per_round} per round reached; more next tick")
            else:
                reasons.append("primary alone eats into the reserve: nothing left to kill")
    elif dying:
        reasons.append(f"{len(dying)} container(s) killed recently (exiting, or still listed by YARN)")

    # 4. Target harvestable (whole vcores, whole MB) and the damped advertised value.
    target_cores = int(harvestable(policy.capacity_cores, view.primary_cpu_cores, policy.reserve_cores))
    if growth_cores > 0:
        safe_target = advertised_cores(target_cores, math.ceil(secondary_cores - _EPS), growth_cores)
        if safe_target < target_cores:
            reasons.append(f"forecast: the primary is expected to take {growth_cores} more core(s) within the "
                           f"horizon; {target_cores - safe_target} risky core(s) not offered")
        target_cores = safe_target
    target_mb = int(harvestable(policy.capacity_memory_mb, view.primary_memory_mb, policy.reserve_memory_mb))
    cooldown_until = now_s + policy.cooldown_s if kills else state.cooldown_until_s
    force = bool(kills) or deficit_cores > _EPS or deficit_mb > _EPS
    adv_cores = int(damp(state.advertised_cores, target_cores, policy.advertise_threshold_cores, now_s,
                         state.last_change_s, cooldown_until, policy.advertise_hold_s, force))
    adv_mb = int(damp(state.advertised_memory_mb, target_mb, policy.advertise_threshold_memory_mb, now_s,
                      state.last_change_s, cooldown_until, policy.advertise_hold_s, force))
    if now_s < cooldown_until and (target_cores > adv_cores or target_mb > adv_mb):
        reasons.append(f"cool-down after a kill until {cooldown_until:.0f}: advertised amount held")
    elif (adv_cores, adv_mb) != (target_cores, target_mb):
        reasons.append("advertised amount held until the change passes the threshold or the hold time")
    changed = (adv_cores, adv_mb) != (state.advertised_cores, state.advertised_memory_mb)

    # 5. DataNode busy flag with hysteresis.
    if state.busy:
        busy = view.primary_cpu_raw > policy.busy_cpu_cores - policy.busy_clear_margin_cores
    else:
        busy = view.primary_cpu_raw > policy.busy_cpu_cores
    if busy:
        reasons.append(f"DataNode busy: primary {view.primary_cpu_raw:.2f} cores "
                       f"(threshold {policy.busy_cpu_cores:g})")

    # (a constructor, not dataclasses.replace: this runs once per node per tick, and in the simulator
    # for every server with a deficit per step)
    new_state = DecideState(advertised_cores=adv_cores, advertised_memory_mb=adv_mb,
                            last_change_s=now_s if changed else state.last_change_s,
                            cooldown_until_s=cooldown_until, busy=busy)
    return Decision(
        timestamp=now_s, stale=False, kills=tuple(kills), advertise_cores=adv_cores,
        advertise_memory_mb=adv_mb, target_cores=target_cores, target_memory_mb=target_mb, busy=busy,
        deficit_cores=deficit_cores, deficit_memory_mb=deficit_mb, secondary_cores=secondary_cores,
        secondary_memory_mb=secondary_mb, reasons=tuple(reasons), state=new_state,
    )
