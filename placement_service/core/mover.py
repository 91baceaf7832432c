"""Moving replicas of blocks whose tenants turned likely to be busy together.

``ReplicaPlacer(cobusy=...)`` chooses a block's tenants by the co-busy estimates of the history it
has at write time. Tenants change: a VM idle for weeks runs at 100% for days, a quiet server starts
a nightly batch. Blocks written before the change keep their replicas where the old estimates put
them, and when every replica's tenant is busy at once, the block cannot be read without eating into
a primary tenant's reserve. The service re-fits the estimates daily on a trailing window of the
history; this module uses them to move the few replicas that matter.

Procedure, given the refitted estimates (already in the placer, ``ReplicaPlacer.set_cobusy``) and
every block's replica servers:

1. Risk of a block: the estimated probability that all of its replicas' tenants are busy at once
   (``CobusyModel.joint_many``; a missing replica is left out).
2. Blocks with at least two replicas above ``risk_max``, riskiest first, at most
   ``max_moves_frac`` of the blocks per pass (the network and disk of a move are paid on the
   primary tenants' servers: the cap bounds them). A block with one replica left (or none) is
   re-replication's work, not a move's.
3. For each: the replica to give up is the one whose removal leaves the lowest risk of the rest
   (the tenant that contributes most). A new replica is placed with the others as ``existing``
   (every grid rule of the placer holds: distinct rows, columns and environments, busy and full
   servers skipped; no relaxation: a move that would relax is not made) and the given-up server
   ``excluded``, on the tenant with the lowest estimate (risk target 0: a block at risk goes as
   far under the threshold as the grid allows, unlike a re-replication).
4. The move is kept only when the new risk is at most ``1 / gain`` of the old one; then the old
   replica's space is released. Otherwise the new replica's space is released and nothing changes.

Pure policy over the core placer: the simulator drives it (``sim.policy.CobusyMover``); in a
cluster the moves are HDFS block moves (the Balancer's ``replaceBlock``), not yet wired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement_service.core.placement import COBUSY_RISK_TARGET, ReplicaPlacer
from placement_service.core.types import PlacementError, PolicyError


@dataclass(frozen=True)
class MoveConfig:
    risk_max: float = COBUSY_RISK_TARGET
    """Estimated probability that every replica's tenant is busy at once above which a block moves
    (the placer's risk target for re-replications: a block repaired under it is not moved).
    1e-5 let one block through on PlanetLab at 31.5% (estimated 5.8e-6 the day before its three
    tenants were busy together); with 1e-6 four runs each of PlanetLab at 21% and 31.5% and Azure
    at 40.8% failed no access (docs/bench/cobusy.md)."""
    gain: float = 2.0
    """A move is kept only when it divides the block's risk by at least this much."""
    max_moves_frac: float = 0.05
    """At most this share of the blocks (rounded up) moves per pass."""

    def __post_init__(self) -> None:
        if not (0.0 <= self.risk_max <= 1.0 and self.gain >= 1.0 and 0.0 <= self.max_moves_frac <= 1.0):
            raise PolicyError("MoveConfig: risk_max and max_moves_frac in [0, 1], gain >= 1")


@dataclass(frozen=True)
class MoveReport:
    at_risk: int
    """Blocks above ``risk_max`` before the pass."""
    tried: int
    moved: int
    """Replicas moved (one per block at most)."""
    risk_before: float
    """Sum over the blocks of the estimated risk, before and after the pass (expected failed reads
    per read of every block once)."""
    risk_after: float
    moved_blocks: np.ndarray
    """The moved blocks (rows of ``replicas``), in the order they moved."""
    moved_columns: np.ndarray
    """For each moved block, the column of ``replicas`` that now holds the new server."""


def move_at_risk(
    placer: ReplicaPlacer,
    replicas: np.ndarray,
    config: MoveConfig,
    rng: np.random.Generator,
) -> MoveReport:
    """One pass of the module's procedure; ``replicas`` [block, k] holds inventory rows (-1:
    missing) and is updated in place for the moved replicas."""
    model = placer.cobusy
    if model is None:
        raise PolicyError("move_at_risk: the placer has no co-busy estimates")
    rep = replicas
    if rep.ndim != 2:
        raise PolicyError(f"move_at_risk: replicas must be [block, k], got shape {rep.shape}")
    tenants = placer.tenant_of(rep)
    risk = model.joint_many(tenants)
    before = float(risk.sum())
    hot = np.flatnonzero((risk > config.risk_max) & ((rep >= 0).sum(axis=1) >= 2))
    order = hot[np.argsort(-risk[hot], kind="stable")]
    budget = math.ceil(config.max_moves_frac * len(rep))
    names = placer.inventory.server
    block_mb = placer.config.block_size_mb
    k = rep.shape[1]
    tried = 0
    moved_b: list[int] = []
    moved_k: list[int] = []
    for b in order[:budget].tolist():
        row = rep[b]
        held = [j for j in range(k) if row[j] >= 0]
        tried += 1
        # 3. the replica whose removal leaves the lowest risk
        rest = np.array([[tenants[b, i] if i != j else -1 for i in range(k)] for j in held], dtype=np.int64)
        drop = held[int(np.argmin(model.joint_many(rest)))]
        keep = [names[row[i]] for i in held if i != drop]
        old = names[row[drop]]
        try:
            res = placer.place(None, 1, existing=keep, excluded=[old], rng=rng, risk_target=0.0)
        except PlacementError:
            continue
        new = placer.server_index(res.targets[0])
        trial = tenants[b].copy()
        trial[drop] = placer.tenant_of(np.array([new]))[0]
        new_risk = float(model.joint_many(trial[None, :])[0])
        if res.relaxed or new_risk * config.gain > risk[b]:
            placer.release(res.targets[0], block_mb)
            continue
        placer.release(old, block_mb)
        row[drop] = new
        tenants[b] = trial
        risk[b] = new_risk
        moved_b.append(b)
        moved_k.append(drop)
    return MoveReport(
        len(hot), tried, len(moved_b), before, float(risk.sum()),
        np.array(moved_b, dtype=np.int64), np.array(moved_k, dtype=np.int64),
    )
