"""Query load balancing (shards onto servers, fewest new shard copies within a load band) and its POP.

The exact model (a MILP, one binary per (server, shard) pair):
    r[i, j] in [0, 1]  share of shard j's queries served by server i
    x[i, j] in {0, 1}  server i holds a copy of shard j
    minimise   sum_{i,j} x[i, j] * (1 - T[i, j])              (copies that must be moved in; T = previous)
    subject to (1 - eps) * avg <= sum_j load[j] * r[i, j] <= (1 + eps) * avg    for every server i
               sum_j memory[j] * x[i, j] <= max_memory                          for every server i
               r[i, j] <= x[i, j];  sum_i r[i, j] = 1;  sum_i x[i, j] >= 1
with ``avg = sum load / servers``. The generator follows the paper's benchmark: Zipf-like loads
``round(1e6 / (rank + 1) ** z)`` with ``z ~ U(0.25, 0.75)`` drawn per round over a seeded shuffled
ranking, memory 1 per shard, 16 per server, a 5% band, the first placement ``shard j -> server j mod n``.

POP: servers are partitioned at random into k equal groups (``partition``); each shard stays with
the group of the server that holds most of it while the group's load stays within half the band of
``total load / k``; the excess goes to groups below their share, a shard that overflows a group split
(a virtual shard carrying the part of its load that fits). Every sub-problem keeps the *global* band
(``LoadProblem.average``), so the union of the sub-solutions is feasible. The sub-problems are the
same model, solved unchanged; coalescing scales each virtual shard's ``r`` by its share of the shard
and takes the union of the copies. A global repair (``repair``) then solves the unchanged model over
the whole cluster on a small neighbourhood of that plan (the copies held, POP's, and the support of
the full model's LP relaxation), which recovers the transfers a group could not see.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from placement_service.capacity.highs import highs_for
from placement_service.capacity.pop.partition import partition


@dataclass(frozen=True)
class LoadProblem:
    load: np.ndarray  # per shard
    memory: np.ndarray  # per shard
    previous: np.ndarray  # bool [servers, shards]: server holds a copy now
    max_memory: float = 16.0
    tolerance: float = 0.05
    average: float | None = None  # the band's centre; None: this problem's own sum load / servers

    def band_average(self) -> float:
        return float(self.load.sum()) / self.previous.shape[0] if self.average is None else self.average


@dataclass(frozen=True)
class LoadResult:
    r: np.ndarray  # [servers, shards]
    x: np.ndarray  # bool [servers, shards]
    status: str
    moves: int  # copies added (objective)
    bound: float  # lower bound on the moves (MIP dual bound; NaN for POP)
    wall_s: float
    parts_wall_s: tuple[float, ...] = ()
    repair_dropped: int = 0  # new copies the global repair dropped (POP)


def generate_loads(n_shards: int, rng: np.random.Generator, order: np.ndarray) -> np.ndarray:
    """One round's loads: Zipf-like with an exponent drawn from U(0.25, 0.75), over ranking ``order``."""
    z = 0.25 + 0.5 * rng.random()
    load = np.rint(1e6 / np.power(np.arange(n_shards) + 1.0, z))
    out = np.empty(n_shards)
    out[order] = load
    return out


def initial_placement(n_servers: int, n_shards: int) -> np.ndarray:
    t = np.zeros((n_servers, n_shards), dtype=bool)
    t[np.arange(n_shards) % n_servers, np.arange(n_shards)] = True
    return t


def solve_exact(p: LoadProblem, time_limit_s: float = 60.0, mip_rel_gap: float = 0.05,
                allowed: np.ndarray | None = None, start: LoadResult | None = None) -> LoadResult:  # fmt: skip
    """The MILP above with HiGHS (one thread). ``allowed`` (bool [servers, shards]) restricts the copies
    to those pairs (the others fixed at 0: a neighbourhood of the full model, used by ``repair``);
    ``start`` is a feasible point given to HiGHS as its first incumbent."""
    t0 = time.monotonic()
    n_srv, n_sh = p.previous.shape
    nv = n_srv * n_sh  # r block then x block, index i * n_sh + j
    cost = np.concatenate([np.zeros(nv), (~p.previous).ravel().astype(float)])
    avg = p.band_average()
    eps = p.tolerance * avg
    rows, cols, vals, lo, hi = [], [], [], [], []
    k = 0
    ii = np.repeat(np.arange(n_srv), n_sh)
    jj = np.tile(np.arange(n_sh), n_srv)
    # band per server
    rows.append(ii)
    cols.append(ii * n_sh + jj)
    vals.append(p.load[jj])
    lo.append(np.full(n_srv, avg - eps))
    hi.append(np.full(n_srv, avg + eps))
    k += n_srv
    # memory per server
    rows.append(k + ii)
    cols.append(nv + ii * n_sh + jj)
    vals.append(p.memory[jj].astype(float))
    lo.append(np.full(n_srv, -np.inf))
    hi.append(np.full(n_srv, p.max_memory))
    k += n_srv
    # r <= x
    e = np.arange(nv)
    rows += [k + e, k + e]
    cols += [e, nv + e]
    vals += [np.ones(nv), -np.ones(nv)]
    lo.append(np.full(nv, -np.inf))
    hi.append(np.zeros(nv))
    k += nv
    # sum_i r = 1 ; sum_i x >= 1
    rows += [k + jj, k + n_sh + jj]
    cols += [ii * n_sh + jj, nv + ii * n_sh + jj]
    vals += [np.ones(nv), np.ones(nv)]
    lo += [np.ones(n_sh), np.ones(n_sh)]
    hi += [np.ones(n_sh), np.full(n_sh, np.inf)]
    k += 2 * n_sh
    a = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(k, 2 * nv))
    h = highs_for(time_limit_s=time_limit_s, threads=1, seed=0, output=False, mip_rel_gap=float(mip_rel_gap))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = 2 * nv, k
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(2 * nv)
    upper = np.ones(2 * nv)
    if allowed is not None:
        upper[:nv] = upper[nv:] = np.asarray(allowed, dtype=bool).ravel()
    lp.col_upper_ = upper
    lp.row_lower_ = np.concatenate(lo)
    lp.row_upper_ = np.concatenate(hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = 2 * nv, k
    lp.integrality_ = [highspy.HighsVarType.kContinuous] * nv + [highspy.HighsVarType.kInteger] * nv
    h.passModel(lp)
    if start is not None:
        sol0 = highspy.HighsSolution()
        sol0.col_value = np.concatenate([start.r.ravel(), start.x.ravel().astype(float)]).tolist()
        sol0.value_valid = True
        h.setSolution(sol0)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return LoadResult(np.zeros((n_srv, n_sh)), np.zeros((n_srv, n_sh), bool), status, -1,
                          float(info.mip_dual_bound), time.monotonic() - t0)  # fmt: skip
    sol = np.asarray(h.getSolution().col_value)
    r = sol[:nv].reshape(n_srv, n_sh)
    x = sol[nv:].reshape(n_srv, n_sh) > 0.5
    moves = int(np.sum(x & ~p.previous))
    return LoadResult(r, x, status, moves, float(info.mip_dual_bound), time.monotonic() - t0)


@dataclass(frozen=True)
class LoadPart:
    servers: np.ndarray
    shards: np.ndarray  # real shard per virtual shard of the part
    share: np.ndarray  # share of the real shard's load each virtual shard carries


SLACKS = (0.5, 0.0)  # group slack tried in turn, as a fraction of the tolerance (0: every group exactly its share)


def split_parts(p: LoadProblem, k: int, seed: int, slack: float = SLACKS[0]) -> list[LoadPart]:
    """Random equal server groups; shards kept with their group within a slack, the excess moved.

    Steps (``target = total load / k``, ``slack = tolerance / 2 x target``):
    1. every shard's home is the group holding most of its copies; a group keeps its home shards,
       smallest first, while its load stays within ``target + slack`` (the global band leaves every
       server ``tolerance`` of room, so a group a little off its share needs no transfer);
    2. the shards left over, largest first, go first to a group that already holds a copy (as much
       as keeps it within ``target + slack``: no transfer), then to the group with the most room
       below ``target``: whole when that keeps the group within ``target + slack``, else split so
       the group reaches ``target`` (a virtual shard; its other part placed the same way);
    3. if a group ends below ``target - slack`` (rare), the strict split is used instead: every group
       exactly ``target``, home shards smallest first, the overflowing one split.
    The sub-problems keep the global band (``LoadProblem.average``), so their union is feasible.
    """
    n_srv, n_sh = p.previous.shape
    group = partition(n_srv, k, seed)
    target = float(p.load.sum()) / k
    per_group = np.array([p.previous[group == g].sum(axis=0) for g in range(k)])  # [k, shards]
    home = np.full(n_sh, -1)
    has = per_group.sum(axis=0) > 0
    home[has] = np.argmax(per_group[:, has], axis=0)
    pieces = None
    for sl in (slack * p.tolerance * target, 0.0):
        pieces = _fill(p, home, per_group > 0, k, target, sl)
        if pieces is not None:
            break
    assert pieces is not None  # the strict fill (slack 0) always places everything
    parts = []
    for g in range(k):
        sh = np.array([j for j, _ in pieces[g]], dtype=np.int64)
        share = np.array([s for _, s in pieces[g]])
        parts.append(LoadPart(np.flatnonzero(group == g), sh, share))
    return parts


def _fill(p: LoadProblem, home: np.ndarray, holds: np.ndarray, k: int, target: float,
          slack: float) -> list[list[tuple[int, float]]] | None:  # fmt: skip
    """Steps 1-2 of ``split_parts`` with ``slack``; None when a group ends below ``target - slack``."""
    left = p.load.astype(float).copy()
    filled = np.zeros(k)
    pieces: list[list[tuple[int, float]]] = [[] for _ in range(k)]

    def put(g: int, j: int, amount: float) -> None:
        if amount <= 0:
            return
        pieces[g].append((j, amount / p.load[j]))
        filled[g] += amount
        left[j] -= amount

    for g in range(k):  # home shards, smallest first
        mine = np.flatnonzero(home == g)
        for j in mine[np.argsort(p.load[mine], kind="stable")]:
            if slack > 0:
                if filled[g] + left[j] > target + slack:
                    break
                put(g, int(j), left[j])
            else:
                if filled[g] >= target - 1e-9:
                    break
                put(g, int(j), min(target - filled[g], left[j]))
    for j in np.argsort(-left, kind="stable"):  # the rest: onto the groups with room, most room first
        while left[j] > 1e-9 * max(1.0, p.load[j]):
            # a group already holding a copy of the shard takes it first (no transfer), up to target + slack
            free = np.flatnonzero(holds[:, j] & (filled < target + slack - 1e-9 * target))
            if slack > 0 and len(free):
                g = int(free[np.argmax(target + slack - filled[free])])
                put(g, int(j), min(left[j], target + slack - filled[g]))
                continue
            g = int(np.argmax(target - filled))
            room = target - filled[g]
            if room <= 1e-9 * target:
                if slack <= 0:
                    break
                put(g, int(j), left[j])  # every group at its share: the rest onto the emptiest
                continue
            put(g, int(j), left[j] if filled[g] + left[j] <= target + slack else room)
    if slack > 0 and np.any(filled < target - slack - 1e-9 * target):
        return None
    return pieces


def solve_pop(p: LoadProblem, k: int, seed: int = 0, time_limit_s: float = 60.0,
              mip_rel_gap: float = 0.05, repair_plan: bool = True,
              slacks: tuple[float, ...] = SLACKS) -> LoadResult:  # fmt: skip
    """POP: the exact model on each group (sequentially here; ``parts_wall_s`` gives each part's time),
    then the global repair (``repair``) unless ``repair_plan`` is false. A group slack whose split
    leaves a sub-problem infeasible is retried with the next, tighter one (``SLACKS``)."""
    t0 = time.monotonic()
    n_srv, n_sh = p.previous.shape
    r = np.zeros((n_srv, n_sh))
    x = np.zeros((n_srv, n_sh), dtype=bool)
    walls: list[float] = []
    status = "feasible"
    for slack in slacks:
        r[:], x[:] = 0.0, False
        status = "feasible"
        for part in split_parts(p, k, seed, slack):
            sub = LoadProblem(p.load[part.shards] * part.share, p.memory[part.shards],
                              p.previous[np.ix_(part.servers, part.shards)], p.max_memory, p.tolerance,
                              p.band_average())  # fmt: skip
            res = solve_exact(sub, time_limit_s, mip_rel_gap)
            walls.append(res.wall_s)
            if res.moves < 0:
                status = f"incomplete: a part is {res.status}"
                break
            for col, (j, s) in enumerate(zip(part.shards, part.share, strict=True)):
                r[part.servers, j] += res.r[:, col] * s
                x[part.servers, j] |= res.x[:, col]
        if status == "feasible":
            break
    moves = int(np.sum(x & ~p.previous))
    out = LoadResult(r, x, status, moves, float("nan"), time.monotonic() - t0, tuple(walls))
    return repair(p, out, time_limit_s, mip_rel_gap) if repair_plan and status == "feasible" else out


def repair(p: LoadProblem, pop: LoadResult, time_limit_s: float = 60.0, mip_rel_gap: float = 0.05) -> LoadResult:
    """Global repair of a POP plan: the full model on a small neighbourhood of POP's plan.

    POP balances each group on its own, so a server short of load can only take copies of shards
    placed in its group; seen from the whole cluster a copy from another group is often cheaper.
    Steps:
    1. the LP relaxation of the full model in ``r`` alone (with ``x = r`` it is the MILP's relaxation:
       minimise ``sum (1 - T) r`` within the band, memory and coverage rows): its support names the
       copies the whole cluster would like, a few dozen beyond the copies held now;
    2. the unchanged MILP over every server and shard with the copies limited to: held now, POP's,
       and the LP's support; POP's plan is the start, so the result never moves more;
    3. kept when it moves fewer shards and the checker finds no violation (else POP's plan stays).
    """
    from scipy.optimize import linprog

    t0 = time.monotonic()
    if pop.moves < 0:
        return pop
    n_srv, n_sh = p.previous.shape
    avg = p.band_average()
    eps = p.tolerance * avg
    ii = np.repeat(np.arange(n_srv), n_sh)
    jj = np.tile(np.arange(n_sh), n_srv)
    col = np.arange(n_srv * n_sh)
    band = sp.csr_matrix((p.load[jj], (ii, col)), shape=(n_srv, n_srv * n_sh))
    memory = sp.csr_matrix((p.memory[jj].astype(float), (ii, col)), shape=(n_srv, n_srv * n_sh))
    cover = sp.csr_matrix((np.ones(n_srv * n_sh), (jj, col)), shape=(n_sh, n_srv * n_sh))
    lp = linprog((~p.previous).ravel().astype(float), A_ub=sp.vstack([band, -band, memory]),
                 b_ub=np.concatenate([np.full(n_srv, avg + eps), np.full(n_srv, eps - avg),
                                      np.full(n_srv, p.max_memory)]),
                 A_eq=cover, b_eq=np.ones(n_sh), bounds=(0, 1), method="highs")  # fmt: skip
    allowed = p.previous | pop.x
    if lp.status == 0:
        allowed |= lp.x.reshape(n_srv, n_sh) > 1e-6
    res = solve_exact(p, time_limit_s, mip_rel_gap, allowed=allowed, start=pop)
    wall = pop.wall_s + time.monotonic() - t0
    if res.moves < 0 or res.moves >= pop.moves or check(p, res):
        return LoadResult(pop.r, pop.x, pop.status, pop.moves, pop.bound, wall, pop.parts_wall_s)
    return LoadResult(res.r, res.x, pop.status, res.moves, float("nan"), wall, pop.parts_wall_s,
                      pop.moves - res.moves)  # fmt: skip


def check(p: LoadProblem, res: LoadResult) -> list[str]:
    """Violations of the band, memory, coverage and copy constraints."""
    out = []
    avg = p.band_average()
    srv_load = res.r @ p.load
    bad = np.flatnonzero(np.abs(srv_load - avg) > p.tolerance * avg * (1 + 1e-6) + 1e-6)
    if len(bad):
        out.append(f"{len(bad)} server(s) outside the {p.tolerance:.0%} band, e.g. server {bad[0]}: "
                   f"{srv_load[bad[0]]:.0f} vs average {avg:.0f}")  # fmt: skip
    mem = res.x.astype(float) @ p.memory
    if np.any(mem > p.max_memory + 1e-9):
        out.append(f"memory above {p.max_memory} on {int(np.sum(mem > p.max_memory + 1e-9))} server(s)")
    if np.any(np.abs(res.r.sum(axis=0) - 1) > 1e-6):
        out.append("some shard's queries are not fully served")
    if np.any((res.r > 1e-9) & ~res.x):
        out.append("a server serves a shard it holds no copy of")
    return out
