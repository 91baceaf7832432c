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
2. Blocks with every replica live above ``risk_max``, riskiest first, at most
   ``max_moves_frac`` of the blocks per pass (the network and disk of a move are paid on the
   primary tenants' servers: the cap bounds them). A block short of a replica is re-replication's
   work, not a move's: its estimate leaves the missing tenant out, so it would rank first, and
   during a reimage storm the pass would spend its budget moving the survivors of just-wiped
   blocks onto the quietest tenants, the ones a rolling reimage may take next (a 4M-block year
   lost blocks this way: docs/bench/cobusy.md, "Short blocks").
3. For each: the replica to give up is the one whose removal leaves the lowest risk of the rest
   (the tenant that contributes most). A new replica is placed with the others as ``existing``
   (every grid rule of the placer holds: distinct rows, columns and environments, busy and full
   servers skipped; no relaxation: a move that would relax is not made) and the given-up server
   ``excluded``, on the tenant with the lowest estimate (risk target 0: a block at risk goes as
   far under the threshold as the grid allows, unlike a re-replication).
4. The move is kept only when the new risk is at most ``1 / gain`` of the old one; then the old
   replica's space is released. Otherwise the new replica's space is released and nothing changes.

**Watching the busy tenants** (:func:`move_busy_now`, e.g. every hour between the daily passes;
hourly by default in the simulator, ``sim.policy.WATCH_EVERY_HOURS``, which says why). The
estimates are a day old at best, and a tenant idle for weeks can turn busy for days within minutes
(on the generated datacenter at 40% utilization, the one block a daily pass left to fail had a
tenant never busy in ten days turn busy 20 minutes after the pass, a second turn busy seven hours
later, the third half an hour after that). What the history cannot say, the present does: a block
with every replica live and all but one on a tenant busy now is one burst from unreadable. For each such
block, a busy replica moves to a tenant not busy now (the others kept as ``existing``, every grid
rule held, no relaxation), dropping first the busy replica whose removal leaves the lowest
estimate. The new replica goes, like a re-replication's, to any idle tenant that keeps the block
under the placer's risk target, not to the lowest estimate, which would add to the replicas the
quietest tenants already hold (docs/bench/cobusy.md, "Short blocks"). The copy reads the replica
that is not busy, so the
primary tenants the move touches are all idle. Few blocks qualify where the estimates placed them
well (about 0.1% a day on the generated datacenter at 40%), so the watch needs no budget.

**The budget and the exposure rule** (both passes). A move copies a block: a read on the source's
primary tenant (the given-up replica for a daily pass, the idle replica for the watch) and a write
on the new replica's. ``MoveBudget`` bounds the bytes each primary tenant sends and receives per day
(``MoveConfig.budget_mb_per_server_day`` times its servers; default ``MOVE_BUDGET_MB_PER_SERVER_DAY``,
2 GB a server: 8 blocks of 256 MB, under 0.2 Mbit/s on average), shared by the passes of a day: a
move whose source or target tenant has spent its day's budget is not made (``refused_budget``).
A move must also never raise the durability exposure it was meant to leave alone: the new server's
exposure (its tenant's grid row, the reimage-frequency rank, then the reimages seen on the server,
``ReplicaPlacer.reimages_seen``) must be at most the given-up server's, or the new replica is
released and nothing changes (``refused_exposure``).

Pure policy over the core placer, two adapters: the simulator drives it (``sim.policy.CobusyMover``),
and the service over a real HDFS (``server.mover.ServiceMover``: the NameNode's block map, moves by
raising a file's replication by one and setting it back, the shim placing and dropping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement_service.core.cobusy import CobusyModel
from placement_service.core.placement import COBUSY_RISK_TARGET, ReplicaPlacer
from placement_service.core.types import PlacementError, PolicyError

MOVE_BUDGET_MB_PER_SERVER_DAY = 2048.0
"""Default move budget: each primary tenant sends and receives at most this many MB of moved
replicas per day per server it has (module docstring)."""


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
    budget_mb_per_server_day: float | None = MOVE_BUDGET_MB_PER_SERVER_DAY
    """Each primary tenant's daily budget of moved bytes (sent and received), per server of the
    tenant (``MoveBudget``); None: no budget."""

    def __post_init__(self) -> None:
        if not (0.0 <= self.risk_max <= 1.0 and self.gain >= 1.0 and 0.0 <= self.max_moves_frac <= 1.0):
            raise PolicyError("MoveConfig: risk_max and max_moves_frac in [0, 1], gain >= 1")
        b = self.budget_mb_per_server_day
        if b is not None and not (math.isfinite(b) and b >= 0.0):
            raise PolicyError(f"MoveConfig: budget_mb_per_server_day must be a number >= 0 (or None), got {b}")


class MoveBudget:
    """The bytes each primary tenant may still move today (module docstring): ``limit_mb[t]`` per
    day for tenant ``t`` (order of ``placer.tenant_names``), reset when :meth:`at_day` enters a new day."""

    def __init__(self, placer: ReplicaPlacer, mb_per_server_day: float) -> None:
        servers = np.bincount(placer.tenant_of(np.arange(len(placer.inventory))),
                              minlength=len(placer.tenant_names)).astype(np.float64)
        self.limit_mb = servers * float(mb_per_server_day)
        self.used_mb = np.zeros_like(self.limit_mb)
        self.day = -1

    def at_day(self, day: int) -> None:
        """Start day ``day`` (a new day resets what every tenant spent)."""
        if day != self.day:
            self.day = int(day)
            self.used_mb[:] = 0.0

    def allows(self, tenants: list[int], mb: float) -> bool:
        return all(t < 0 or self.used_mb[t] + mb <= self.limit_mb[t] + 1e-9 for t in tenants)

    def charge(self, tenants: list[int], mb: float) -> None:
        for t in tenants:
            if t >= 0:
                self.used_mb[t] += mb


def _exposure(placer: ReplicaPlacer, server: int) -> tuple[int, float]:
    """A server's durability exposure: its tenant's grid row (reimage-frequency rank; -1 outside the
    grid ranks lowest) and the reimages seen on it."""
    row = int(placer.batch_view().server_cell[server])
    return (row // 3 if row >= 0 else -1, placer.reimages_seen(placer.inventory.server[server]))


def _admit(placer: ReplicaPlacer, budget: MoveBudget | None, target: str, new: int, old: int,
           tenants: list[int], block_mb: float) -> str | None:
    """The last checks of a move whose new replica ``target`` (server index ``new``) is placed:
    each tenant's byte budget, then the durability exposure against the replica at ``old``. On a
    refusal the new replica's space is given back and the reason returned (``"budget"`` or
    ``"exposure"``); else the budget is charged and None returned (the caller completes the move)."""
    if budget is not None and not budget.allows(tenants, block_mb):
        placer.release(target, block_mb)
        return "budget"
    if _raises_exposure(placer, new, old):
        placer.release(target, block_mb)
        return "exposure"
    if budget is not None:
        budget.charge(tenants, block_mb)
    return None


def _raises_exposure(placer: ReplicaPlacer, new: int, old: int) -> bool:
    return _exposure(placer, new) > _exposure(placer, old)


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
    refused_budget: int = 0
    """Moves not made because the source's or the target's tenant had spent its day's budget."""
    refused_exposure: int = 0
    """Moves not made because the new server's durability exposure was above the old one's."""

    @staticmethod
    def nothing() -> MoveReport:
        """The report of a pass that found nothing to move."""
        empty = np.zeros(0, dtype=np.int64)
        return MoveReport(0, 0, 0, 0.0, 0.0, empty, empty)


def _risk_without(model: CobusyModel, row: np.ndarray, cols: list[int]) -> np.ndarray:
    """The estimate of a block's other tenants (``row``: its tenants, -1 missing) when each of
    ``cols`` in turn is given up."""
    return model.joint_many(np.array([[t if x != j else -1 for x, t in enumerate(row.tolist())] for j in cols],
                                     dtype=np.int64))


def move_at_risk(
    placer: ReplicaPlacer,
    replicas: np.ndarray,
    config: MoveConfig,
    rng: np.random.Generator,
    budget: MoveBudget | None = None,
) -> MoveReport:
    """One pass of the module's procedure; ``replicas`` [block, k] holds inventory rows (-1:
    missing) and is updated in place for the moved replicas. ``budget``: the day's move budget
    (module docstring), charged for every move made."""
    model = placer.cobusy
    if model is None:
        raise PolicyError("move_at_risk: the placer has no co-busy estimates")
    rep = replicas
    if rep.ndim != 2:
        raise PolicyError(f"move_at_risk: replicas must be [block, k], got shape {rep.shape}")
    tenants = placer.tenant_of(rep)
    risk = model.joint_many(tenants)
    before = float(risk.sum())
    # Only blocks with every replica live (step 2 of the module docstring says why).
    hot = np.flatnonzero((risk > config.risk_max) & (rep >= 0).all(axis=1)) if rep.shape[1] >= 2 else np.zeros(0, np.int64)
    order = hot[np.argsort(-risk[hot], kind="stable")]
    max_moves = math.ceil(config.max_moves_frac * len(rep))
    names = placer.inventory.server
    block_mb = placer.config.block_size_mb
    k = rep.shape[1]
    tried = refused_budget = refused_exposure = 0
    moved_b: list[int] = []
    moved_k: list[int] = []
    for b in order[:max_moves].tolist():
        row = rep[b]
        held = [j for j in range(k) if row[j] >= 0]
        tried += 1
        # 3. the replica whose removal leaves the lowest risk
        drop = held[int(np.argmin(_risk_without(model, tenants[b], held)))]
        src_t = int(tenants[b][drop])  # the copy reads the given-up replica
        if budget is not None and not budget.allows([src_t], block_mb):
            refused_budget += 1
            continue
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
        refusal = _admit(placer, budget, res.targets[0], new, int(row[drop]), [src_t, int(trial[drop])], block_mb)
        if refusal is not None:
            refused_budget += refusal == "budget"
            refused_exposure += refusal == "exposure"
            continue
        placer.release(old, block_mb)
        row[drop] = new
        tenants[b] = trial
        risk[b] = new_risk
        moved_b.append(b)
        moved_k.append(drop)
    return MoveReport(
        len(hot), tried, len(moved_b), before, float(risk.sum()),
        np.array(moved_b, dtype=np.int64), np.array(moved_k, dtype=np.int64), refused_budget, refused_exposure,
    )


def blocks_one_idle(replicas: np.ndarray, server_busy: np.ndarray) -> np.ndarray:
    """Rows of ``replicas`` [block, k >= 2] (inventory rows, -1 missing) with every replica live,
    exactly one of them on a server not busy (``server_busy``: per inventory row). A block short of
    replicas is left to re-replication, as in :func:`move_at_risk`."""
    table = np.append(np.asarray(server_busy, dtype=bool), False).view(np.uint8)  # -1 -> not busy
    rep = replicas
    nb = np.zeros(rep.shape[0], dtype=np.uint8)
    nl = np.zeros(rep.shape[0], dtype=np.uint8)
    for k in range(rep.shape[1]):
        col = rep[:, k]
        nb += table[col]
        nl += (col >= 0).view(np.uint8)
    return np.flatnonzero((nl == rep.shape[1]) & (nl >= 2) & (nb + 1 == nl))


def move_busy_now(
    placer: ReplicaPlacer,
    replicas: np.ndarray,
    busy: np.ndarray,
    rng: np.random.Generator,
    risk_target: float | None = None,
    budget: MoveBudget | None = None,
) -> MoveReport:
    """The watch of the module docstring (``budget``: the day's move budget, as in
    :func:`move_at_risk`): ``busy`` holds, per tenant (order of
    ``placer.tenant_names``), whether it is busy now. Updates ``replicas`` in place and reports
    the blocks with one idle replica (``at_risk``), those tried and moved; ``risk_before`` and
    ``risk_after`` sum the estimates over those blocks (0 without co-busy estimates).
    ``risk_target``: the co-busy risk target of the new replica's choice (``ReplicaPlacer.place``);
    default (None) the placer's re-replication target, uniform among the idle tenants that keep
    the block under it; 0 takes the lowest estimate."""
    rep = replicas
    if rep.ndim != 2:
        raise PolicyError(f"move_busy_now: replicas must be [block, k], got shape {rep.shape}")
    names = placer.inventory.server
    tenant_busy = np.asarray(busy, dtype=bool)
    if tenant_busy.shape != (len(placer.tenant_names),):
        raise PolicyError(
            f"move_busy_now: busy must hold one flag per tenant ({len(placer.tenant_names)}), got shape "
            f"{tenant_busy.shape}"
        )
    server_busy = tenant_busy[placer.tenant_of(np.arange(len(names)))]
    hot = blocks_one_idle(rep, server_busy)
    if hot.size == 0:
        return MoveReport.nothing()
    model = placer.cobusy
    tenants = placer.tenant_of(rep[hot])
    before = float(model.joint_many(tenants).sum()) if model is not None else 0.0
    # Busy servers are not targets even when the placer does not track busy servers itself.
    avoid = [names[i] for i in np.flatnonzero(server_busy).tolist()]
    block_mb = placer.config.block_size_mb
    k = rep.shape[1]
    moved_b: list[int] = []
    moved_k: list[int] = []
    refused_budget = refused_exposure = 0
    for i, b in enumerate(hot.tolist()):
        row = rep[b]
        held = [j for j in range(k) if row[j] >= 0]
        busy_cols = [j for j in held if server_busy[row[j]]]
        idle = [j for j in held if not server_busy[row[j]]]
        src_t = int(tenants[i][idle[0]]) if idle else -1  # the copy reads the idle replica
        if budget is not None and not budget.allows([src_t], block_mb):
            refused_budget += 1
            continue
        if model is not None:
            risks = _risk_without(model, tenants[i], busy_cols)
            order = [busy_cols[x] for x in np.argsort(risks, kind="stable").tolist()]
        else:
            order = [busy_cols[x] for x in rng.permutation(len(busy_cols)).tolist()]
        for drop in order:
            keep = [names[row[x]] for x in held if x != drop]
            old = names[row[drop]]
            try:
                res = placer.place(None, 1, existing=keep, excluded=[old, *avoid], rng=rng, risk_target=risk_target)
            except PlacementError:
                continue
            new = placer.server_index(res.targets[0])
            if res.relaxed or server_busy[new]:
                placer.release(res.targets[0], block_mb)
                continue
            new_t = int(placer.tenant_of(np.array([new]))[0])
            refusal = _admit(placer, budget, res.targets[0], new, int(row[drop]), [src_t, new_t], block_mb)
            if refusal is not None:
                refused_budget += refusal == "budget"
                refused_exposure += refusal == "exposure"
                continue
            placer.release(old, block_mb)
            row[drop] = new
            tenants[i, drop] = new_t
            moved_b.append(b)
            moved_k.append(drop)
            break
    after = float(model.joint_many(tenants).sum()) if model is not None else 0.0
    return MoveReport(
        int(hot.size), int(hot.size), len(moved_b), before, after,
        np.array(moved_b, dtype=np.int64), np.array(moved_k, dtype=np.int64), refused_budget, refused_exposure,
    )


def merge_reports(a: MoveReport, b: MoveReport) -> MoveReport:
    """Two passes over the same blocks as one report (counts and risks added, moves concatenated)."""
    return MoveReport(
        a.at_risk + b.at_risk, a.tried + b.tried, a.moved + b.moved,
        a.risk_before + b.risk_before, a.risk_after + b.risk_after,
        np.concatenate([a.moved_blocks, b.moved_blocks]), np.concatenate([a.moved_columns, b.moved_columns]),
        a.refused_budget + b.refused_budget, a.refused_exposure + b.refused_exposure,
    )


# The mover's schedule: one place for the simulator (HDFS-H-cobusy-mover) and any other adapter.
MOVE_EVERY_DAYS = 1.0
"""HDFS-H-cobusy-mover: one pass a day (the service's re-clustering is daily)."""
MOVE_MAX_FRAC_PER_DAY = 0.05
"""HDFS-H-cobusy-mover: at most 5% of the blocks move per day (2% left single failures on Azure at 41%, docs/bench/cobusy.md)."""
WATCH_EVERY_HOURS = 1.0
"""HDFS-H-cobusy-mover: every this many hours between the daily passes, blocks with one idle replica
left move a busy one (``core.mover.move_busy_now``); 0: no watch. Hourly by default since
2026-11-28: it brought the failed accesses up to 40.8% to 0 in every run (the daily passes alone
failed 1 per million in 1 run of 15 at 40.1%), and four 4M-block durability years with it took as
many blocks to one replica as without it (7,729 / 7,839 / 7,717 / 7,738 against 7,782 / 7,844),
losing 2 / 0 / 0 / 0 blocks (docs/bench/cobusy.md, "The watch on by default")."""


def mover_config(
    every_days: float, risk_max: float = MoveConfig.risk_max, max_frac_per_day: float = MOVE_MAX_FRAC_PER_DAY,
    budget_mb_per_server_day: float | None = MoveConfig.budget_mb_per_server_day,
) -> MoveConfig:
    """HDFS-H-cobusy-mover's per-pass settings for a pass every ``every_days``: the day's budget
    (``max_frac_per_day`` of the blocks) spread over the passes of a day, and each tenant's daily
    byte budget (``core.mover.MoveBudget``; None: none)."""
    if every_days <= 0:
        raise ValueError(f"--move-every-days must be > 0, got {every_days:g}")
    return MoveConfig(risk_max=risk_max, max_moves_frac=max_frac_per_day * every_days,
                      budget_mb_per_server_day=budget_mb_per_server_day)
