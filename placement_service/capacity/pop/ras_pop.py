"""POP applied to RAS: k sub-regions, each solved by ``ras.solve.solve`` unchanged, then coalesced.

Partition (pure, seeded):
  - clients are the solvable reservations (after the full problem's precheck); the largest are split
    into halves (client splitting on the request in servers, threshold ``t``); a piece asks ``share``
    of the request's capacity after the loss of any MSB, and because ``sum - max`` is superadditive,
    pieces that each meet their share meet the whole request together (affinity shares likewise, being
    averages); pieces are placed on parts largest first, onto the part whose most loaded hardware
    type (relative to the part's supply of it) stays lowest, in seeded order;
  - servers are split per equivalence class hardware x datacenter x MSB, so every sub-problem sees
    every MSB with 1/k of each class: a reservation's previous servers go with it (to its pieces, in
    proportion to their shares) so that servers that need not move stay, and the class's other
    servers fill each part up to its ``class size / k`` (remainders spread in seeded order);
  - a rare class (fewer servers than k: a few machines of an old generation left in one MSB) is not
    split: its servers that a reservation held go with that reservation's pieces, the others stay
    together in the part holding the fewest servers of their hardware type so far. Parts then differ
    by a few servers of that class; the pieces' after-MSB-loss guarantee does not depend on every part
    seeing every class, and the global repair below sees every server;
  - the shared buffer is split per hardware type: each part holds ``ceil(fraction * its servers)``.
Coalesce: pieces' servers are summed back onto their reservation, then a global repair pass on the
full aggregated problem (``ras.repair.round_and_repair`` from the coalesced counts: surplus from
rounding in several parts given back, requests left short in one part topped up from spare servers of
any part, shared buffers trimmed to the region's need), changed counts applied to concrete servers
keeping every server that may stay. The objective is the full model's, the bound the full model's LP.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from placement_service.capacity.pop.partition import PopError, partition, split_clients, split_resource
from placement_service.capacity.ras import ras_model
from placement_service.capacity.ras.aggregate import Aggregate, aggregate
from placement_service.capacity.ras.domain import Method, Problem, Region, Request, Settings, SolverReport
from placement_service.capacity.ras.plan import Plan, build_plan
from placement_service.capacity.ras.precheck import precheck
from placement_service.capacity.ras.repair import round_and_repair

logger = logging.getLogger(__name__)

PIECE_SEP = "~pop"


@dataclass(frozen=True)
class PartSpec:
    """One sub-problem: its servers (indices into the region), its (virtual) requests, previous owners."""

    index: int
    servers: np.ndarray
    requests: tuple[Request, ...]
    previous: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartResult:
    """What one sub-problem's solve returns (small: only the servers it assigned)."""

    index: int
    status: str
    objective: float
    bound: float
    gap: float
    wall_s: float
    assignment: Mapping[str, str]
    unmet: tuple[str, ...] = ()


@dataclass(frozen=True)
class Partitioned:
    parts: tuple[PartSpec, ...]
    owner: Mapping[str, str]  # virtual request id -> real request id
    requests: tuple[Request, ...]  # solvable requests (after precheck)
    pre_unmet: tuple[object, ...]
    split_clients: int  # extra virtual clients created


def class_key(region: Region) -> np.ndarray:
    """Equivalence class key hardware x datacenter x MSB per server (the aggregation's classes)."""
    n_dc, n_msb = len(region.datacenter_names), len(region.msb_names)
    return (region.hardware.astype(np.int64) * n_dc + region.datacenter) * n_msb + region.msb


def max_k(region: Region) -> tuple[int, str]:
    """Largest k every sub-problem can see every class with: the smallest class's size, and its name."""
    avail = region.available.astype(bool)
    key = class_key(region)[avail]
    if len(key) == 0:
        return 0, "no available server"
    uniq, counts = np.unique(key, return_counts=True)
    i = int(np.argmin(counts))
    n_dc, n_msb = len(region.datacenter_names), len(region.msb_names)
    k = int(uniq[i])
    name = (f"{region.hardware_names[k // (n_dc * n_msb)]} x {region.datacenter_names[(k // n_msb) % n_dc]} x "
            f"{region.msb_names[k % n_msb]}")  # fmt: skip
    return int(counts[i]), name


def subregion(region: Region, idx: np.ndarray) -> Region:
    """The servers ``idx`` of ``region`` (names and codes kept; pass-through columns dropped)."""
    return replace(
        region, server=tuple(region.server[i] for i in idx), hardware=region.hardware[idx],
        datacenter=region.datacenter[idx], msb=region.msb[idx], rack=region.rack[idx],
        available=region.available[idx], in_use=region.in_use[idx], extra={},
    )  # fmt: skip


def _eligible_cells(region: Region, req: Request) -> np.ndarray:
    """Bool per (hardware, datacenter) cell: may serve ``req`` (RRU value > 0, datacenter allowed)."""
    hw_ok = np.array([req.rru.get(h, 0) > 0 for h in region.hardware_names])
    if req.datacenter_affinity is None:
        dc_ok = np.ones(len(region.datacenter_names), dtype=bool)
    else:
        dc_ok = np.array([req.datacenter_affinity.get(d, 0) > 0 for d in region.datacenter_names])
    return (hw_ok[:, None] & dc_ok[None, :]).ravel()


def _demand_per_cell(region: Region, req: Request, supply: np.ndarray) -> np.ndarray:
    """The request in servers spread over its eligible (hardware, datacenter) cells: by datacenter
    affinity share when it has one, then by the cells' supply."""
    n_dc = len(region.datacenter_names)
    w = np.where(_eligible_cells(region, req), supply, 0.0).reshape(-1, n_dc)
    if w.sum() <= 0:
        return w.ravel()
    if req.datacenter_affinity is not None:
        share = np.array([req.datacenter_affinity.get(d, 0.0) for d in region.datacenter_names])
        per_dc = w.sum(axis=0)
        w = w / np.maximum(per_dc, 1e-12) * share
    return (w / w.sum() * req.capacity_rru / req.mean_rru()).ravel()


PIECE_LIMIT = 0.25  # a piece asks at most this share of its eligible servers in one part (auto split)
MIN_PIECE_SERVERS = 20.0  # pieces of fewer servers are not split further (affinity shares need room)


def build_parts(problem: Problem, k: int, split_threshold: float = 0.0, seed: int = 0) -> Partitioned:
    """Partition ``problem`` into ``k`` sub-problems (see the module docstring)."""
    region = problem.region
    if k < 1:
        raise PopError(f"--pop-k must be >= 1, got {k}")
    n_avail = int(region.available.sum())
    if k > n_avail:
        raise PopError(f"--pop-k {k} is larger than the region's {n_avail} available servers: every sub-problem "
                       f"needs servers, so k <= {n_avail}")  # fmt: skip
    requests, pre_unmet = precheck(region, problem.requests, problem.settings)
    avail = region.available.astype(bool)
    n_dc = len(region.datacenter_names)
    cell = region.hardware.astype(np.int64) * n_dc + region.datacenter
    supply = np.bincount(cell[avail], minlength=len(region.hardware_names) * n_dc).astype(float)
    # the splitting attribute: the largest share of one part's (hardware, datacenter) cell the request
    # asks, so halving the largest also caps what a piece may take from one part (PIECE_LIMIT)
    per_part = np.maximum(supply / k, 1.0)
    demand = np.array([float((_demand_per_cell(region, r, supply) / per_part).max(initial=0.0)) for r in requests])
    size = np.array([r.capacity_rru / r.mean_rru() for r in requests])
    pieces = split_clients(demand, split_threshold, PIECE_LIMIT, demand * MIN_PIECE_SERVERS / np.maximum(size, 1e-9))
    n_pieces = np.bincount([p.client for p in pieces], minlength=len(requests))
    virtual: list[Request] = []
    owner: dict[str, str] = {}
    for p in pieces:
        req = requests[p.client]
        vid = req.id if n_pieces[p.client] == 1 else f"{req.id}{PIECE_SEP}{p.piece}"
        owner[vid] = req.id
        virtual.append(replace(req, id=vid, capacity_rru=req.capacity_rru * p.share))
    weight = np.array([_demand_per_cell(region, v, supply) for v in virtual]).reshape(len(virtual), -1)
    part_of = partition(len(virtual), k, seed, weight=weight, supply=supply)
    # servers: previous owners' servers follow their reservation's pieces, the rest fill each part
    rid_to_pieces: dict[str, list[int]] = {}
    for j, p in enumerate(pieces):
        rid_to_pieces.setdefault(requests[p.client].id, []).append(j)
    server_part = np.full(len(region), -1, dtype=np.int64)
    server_prev: dict[int, str] = {}
    idx_of = region.index()
    prev_by_res: dict[str, list[int]] = {}
    for s, e in problem.previous.items():
        i = idx_of.get(s)
        if e is not None and i is not None and avail[i] and e in rid_to_pieces:
            prev_by_res.setdefault(e, []).append(i)
    key = class_key(region)
    for rid, servers in prev_by_res.items():
        arr = np.array(sorted(servers, key=lambda i: (key[i], i)), dtype=np.int64)
        js = rid_to_pieces[rid]
        shares = np.array([pieces[j].share for j in js])
        # interleaved (largest deficit first) so every piece gets its share of every class and MSB
        given = np.zeros(len(js))
        for t, i in enumerate(arr):
            j = int(np.argmax(shares / shares.sum() * (t + 1) - given))
            given[j] += 1
            server_part[i] = part_of[js[j]]
            server_prev[int(i)] = virtual[js[j]].id
    rng = np.random.default_rng(seed + 1)
    n_hw = len(region.hardware_names)
    hw_in_part = np.zeros((k, n_hw), dtype=np.int64)  # servers of each hardware type per part so far
    classes, sizes = np.unique(key[avail], return_counts=True)
    rare = classes[sizes < k]
    for c in np.concatenate([classes[sizes >= k], rare]):  # common classes first: rare ones fill in after
        members = np.flatnonzero(avail & (key == c))
        h = int(region.hardware[members[0]])
        if c in rare:
            # a rare class (fewer servers than parts) is not split: servers a reservation held go with
            # its pieces (above), the others stay together in the part with the fewest of its hardware
            rest = members[server_part[members] < 0]
            if len(rest):
                j = int(np.lexsort((rng.permutation(k), hw_in_part[:, h]))[0])
                server_part[rest] = j
            hw_in_part[:, h] += np.bincount(server_part[members], minlength=k)
            continue
        target = split_resource(len(members), k, rng)
        placed = np.bincount(server_part[members][server_part[members] >= 0], minlength=k)
        rest = members[server_part[members] < 0]
        rest = rest[rng.permutation(len(rest))]
        deficit = np.maximum(0, target - placed).astype(float)
        if len(rest) == 0:
            hw_in_part[:, h] += np.bincount(server_part[members], minlength=k)
            continue
        if deficit.sum() <= 0:
            deficit = np.ones(k)
        give = np.floor(deficit * len(rest) / deficit.sum()).astype(np.int64)
        frac = deficit * len(rest) / deficit.sum() - give
        for j in np.argsort(-frac, kind="stable")[: len(rest) - int(give.sum())]:
            give[j] += 1
        server_part[rest] = np.repeat(np.arange(k), give)
        hw_in_part[:, h] += np.bincount(server_part[members], minlength=k)
    for s, e in problem.previous.items():  # shared-buffer servers keep their buffer within their part
        i = idx_of.get(s)
        if e is not None and i is not None and avail[i] and e not in rid_to_pieces and e.startswith("shared-buffer:"):
            server_prev[i] = e
    parts = []
    for j in range(k):
        idx = np.flatnonzero(server_part == j)
        reqs = tuple(v for v, p in zip(virtual, part_of, strict=True) if p == j)
        prev = {region.server[i]: server_prev[int(i)] for i in idx if int(i) in server_prev}
        parts.append(PartSpec(j, idx, reqs, prev))
    return Partitioned(tuple(parts), owner, requests, tuple(pre_unmet), len(pieces) - len(requests))


def solve_part(region: Region, spec: PartSpec, settings: Settings) -> PartResult:
    """Solve one sub-problem with the RAS model's own ``solve`` (runs on a Dask worker)."""
    from placement_service.capacity.ras.solve import solve

    sub = Problem(subregion(region, spec.servers), spec.requests, settings, spec.previous)
    plan = solve(sub)
    s = plan.solver
    return PartResult(
        index=spec.index, status=s.status, objective=s.objective, bound=s.bound, gap=s.gap, wall_s=s.wall_s,
        assignment={k: v for k, v in plan.assignment.items() if v is not None},
        unmet=tuple(u.id for u in plan.unmet if u.constraint != "datacenter-affinity"),
    )  # fmt: skip


def full_lp_bound(region: Region, requests: tuple[Request, ...], settings: Settings,
                  previous: Mapping[str, str | None], time_limit_s: float) -> dict[str, float | str]:
    """LP relaxation of the full aggregated problem: a lower bound on every plan's objective."""
    t0 = time.monotonic()
    agg = aggregate(Problem(region, requests, settings, previous))
    model = ras_model.build(agg, requests, settings)
    res = ras_model.solve(model, relax=True, time_limit_s=time_limit_s, settings=settings)
    return {"lp_bound": res.bound, "status": res.status, "wall_s": time.monotonic() - t0}


def _pair_index(agg: Aggregate) -> tuple[np.ndarray, np.ndarray]:
    n_ent = agg.n_entities
    keys = agg.pair_class * n_ent + agg.pair_entity
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def counts_of(agg: Aggregate, region: Region, entity: np.ndarray) -> np.ndarray:
    """Counts per (class, entity) pair of a per-server entity index (-1 none); ineligible pairs dropped."""
    keys, order = _pair_index(agg)
    ok = (entity >= 0) & (agg.server_class >= 0)
    k = agg.server_class[ok] * agg.n_entities + entity[ok]
    pos = np.searchsorted(keys, k)
    pos = np.minimum(pos, len(keys) - 1)
    hit = keys[pos] == k if len(keys) else np.zeros(len(k), bool)
    y = np.zeros(agg.n_pairs, dtype=np.int64)
    np.add.at(y, order[pos[hit]], 1)
    return y


def _trim_buffers(agg: Aggregate, y: np.ndarray) -> None:
    """Each shared buffer down to the region's need (parts each rounded their share up)."""
    R = agg.n_reservations
    for h in range(agg.n_entities - R):
        pairs = np.flatnonzero(agg.pair_entity == R + h)
        extra = int(y[pairs].sum()) - int(agg.buffer_need[h])
        for p in pairs[np.argsort(-(y[pairs] - agg.pair_prev[pairs]), kind="stable")]:
            if extra <= 0:
                break
            take = int(min(extra, max(0, y[p] - agg.pair_prev[p])))
            y[p] -= take
            extra -= take


def apply_counts(region: Region, agg: Aggregate, entity: np.ndarray, y_old: np.ndarray, y_new: np.ndarray) -> None:
    """Change ``entity`` (per server, in place) from counts ``y_old`` to ``y_new``, moving as few as possible.

    Removals take servers the entity did not hold before first, idle before in-use; additions take
    free servers of the class the entity held before first, then never-assigned idle, then in-use.
    """
    delta = y_new - y_old
    if not delta.any():
        return
    in_use = region.in_use.astype(bool)
    prev = agg.prev_entity
    cls = agg.server_class
    changed = np.flatnonzero(delta)
    by_class = np.argsort(cls, kind="stable")
    bounds = np.searchsorted(cls[by_class], np.arange(agg.n_classes + 1))
    for p in sorted(changed, key=lambda p: delta[p]):  # removals (negative) first
        c, e, d = int(agg.pair_class[p]), int(agg.pair_entity[p]), int(delta[p])
        servers = by_class[bounds[c] : bounds[c + 1]]
        if d < 0:
            mine = servers[entity[servers] == e]
            order = np.lexsort((in_use[mine], prev[mine] == e))
            entity[mine[order[: -d]]] = -1
        else:
            free = servers[entity[servers] == -1]
            order = np.lexsort((in_use[free], prev[free] != -1, prev[free] != e))
            take = free[order[:d]]
            entity[take] = e


def coalesce_ras(
    problem: Problem, parted: Partitioned, results: Mapping[int, PartResult]
) -> tuple[dict[str, str | None], Aggregate, np.ndarray, dict[str, object]]:
    """Concatenate the parts' assignments onto real reservations, then the global repair pass."""
    t0 = time.monotonic()
    region, st = problem.region, problem.settings
    agg = aggregate(Problem(region, parted.requests, st, problem.previous))
    ent_of = {n: i for i, n in enumerate(agg.entity_names)}
    idx_of = region.index()
    entity = np.full(len(region), -1, dtype=np.int64)
    for res in results.values():
        for s, v in res.assignment.items():
            e = ent_of.get(parted.owner.get(v, v))
            if e is not None:
                entity[idx_of[s]] = e
    y0 = counts_of(agg, region, entity)
    y = round_and_repair(agg, y0.astype(float), st)
    _trim_buffers(agg, y)
    apply_counts(region, agg, entity, y0, y)
    short = violators(agg, y, st.affinity_tolerance)
    n_short, fixed = len(short), 0
    # as in the parts, ``auto`` first runs as lp-round (seconds), then branch-and-bound for what is left
    for method in [Method.LP_ROUND, Method.AUTO] if st.method == Method.AUTO else [st.method]:
        if not len(short):
            break
        fixed += _resolve_violators(problem, parted, agg, entity, short, method)
        y = counts_of(agg, region, entity)
        short = violators(agg, y, st.affinity_tolerance)
    names = agg.entity_names
    assignment = {s: (names[e] if e >= 0 else None) for s, e in zip(region.server, entity, strict=True)}
    info = {"phase": "pop-coalesce-repair", "wall_s": time.monotonic() - t0,
            "servers_changed_by_repair": int(np.abs(y - y0).sum()), "reservations_resolved": n_short,
            "reservations_fixed_by_resolve": fixed}  # fmt: skip
    return assignment, agg, y, info


def violators(agg: Aggregate, y: np.ndarray, theta: float) -> np.ndarray:
    """Reservations short after their worst MSB or outside their datacenter affinity, from the counts."""
    R = agg.n_reservations
    res = agg.pair_entity < R
    contrib = agg.pair_value[res] * y[res]
    ent = agg.pair_entity[res]
    cls = agg.pair_class[res]
    per_msb = np.bincount(ent * agg.n_msb + agg.class_msb[cls], weights=contrib, minlength=R * agg.n_msb)
    per_msb = per_msb.reshape(R, agg.n_msb)
    total = per_msb.sum(axis=1)
    bad = total - per_msb.max(axis=1, initial=0.0) < agg.capacity_rru - 1e-6
    per_dc = np.bincount(ent * agg.n_dc + agg.class_dc[cls], weights=contrib, minlength=R * agg.n_dc).reshape(R, agg.n_dc)
    has = ~np.isnan(agg.dc_share[:, 0]) if agg.n_dc else np.zeros(R, bool)
    share = per_dc / np.maximum(total, 1e-12)[:, None]
    off = np.abs(np.where(np.isnan(agg.dc_share), 0.0, share - agg.dc_share)) > theta + 1e-6
    bad |= has & (total > 0) & off.any(axis=1)
    return np.flatnonzero(bad)


def _resolve_violators(problem: Problem, parted: Partitioned, agg: Aggregate, entity: np.ndarray,
                       short: np.ndarray, method: Method) -> int:  # fmt: skip
    """Second global repair: what the greedy repair could not fix (a datacenter share just outside its
    tolerance, a request short where no single server helps) is solved again by the RAS model itself
    (with ``method``), on the violating reservations' servers plus every unassigned server, their
    servers as previous. ``entity`` changes only when fewer reservations are left short; returns how
    many fewer."""
    from placement_service.capacity.ras.solve import solve

    region = problem.region
    avail = region.available.astype(bool)
    # the violators and their neighbours: every reservation holding servers in a (hardware, datacenter)
    # cell a violator may use, so the model can shift servers between them (nothing fixed)
    n_dc = len(region.datacenter_names)
    cell = region.hardware.astype(np.int64) * n_dc + region.datacenter
    cells = np.zeros(len(region.hardware_names) * n_dc, dtype=bool)
    for r in short:
        cells |= _eligible_cells(region, parted.requests[int(r)])
    held = (entity >= 0) & (entity < agg.n_reservations)
    group = np.union1d(short, np.unique(entity[held & cells[cell]]))
    mine = np.isin(entity, group)
    idx = np.flatnonzero(avail & (mine | (entity == -1)))
    names = agg.entity_names
    reqs = tuple(parted.requests[int(r)] for r in group)
    previous = {region.server[i]: names[entity[i]] for i in idx if entity[i] >= 0}
    st = replace(problem.settings, time_limit_s=min(60.0, problem.settings.time_limit_s), random_failure_buffer=0.0,
                 fix_satisfied=False)  # fmt: skip
    before = {names[int(r)] for r in short}
    plan = solve(Problem(subregion(region, idx), reqs, replace(st, method=method), previous))
    after = {u.id for u in plan.unmet if u.constraint in ("capacity", "datacenter-affinity")}
    logger.info("pop: re-solved (%s) %d reservation(s) around %d left short: %d short after", method.value,
                len(reqs), len(short), len(after))  # fmt: skip
    if len(after) >= len(before):  # no better than before: keep what we had
        return 0
    ent_of = {n: i for i, n in enumerate(names)}
    for i in idx:
        e = plan.assignment.get(region.server[i])
        entity[i] = ent_of[e] if e in ent_of and not e.startswith("shared-buffer:") else -1
    return len(before) - len(after)


def finish_plan(
    problem: Problem, parted: Partitioned, results: Mapping[int, PartResult], failed: Mapping[int, str],
    bound: Mapping[str, float | str] | None, k: int, t_start: float, phases: list[dict[str, object]],
) -> tuple[Plan, dict[str, object]]:  # fmt: skip
    """The coalesced plan, its full-model objective and gap to the full LP bound, and the POP report."""
    assignment, agg, y, info = coalesce_ras(problem, parted, results)
    phases.append(info)
    model = ras_model.build(agg, parted.requests, problem.settings)
    obj = ras_model.objective(model, ras_model.complete(model, y))
    lp = float(bound["lp_bound"]) if bound and isinstance(bound.get("lp_bound"), float) else float("nan")
    lp = lp if np.isfinite(lp) else float("nan")  # an LP stopped by its time limit bounds nothing
    gap = max(0.0, (obj - lp) / max(abs(obj), 1e-9)) if np.isfinite(lp) else float("nan")
    status = "feasible" if not failed else "incomplete"
    report = SolverReport(status=status, method=f"pop:k={k}", objective=obj, bound=lp, lp_bound=lp, gap=gap,
                          wall_s=time.monotonic() - t_start, phases=tuple(phases))  # fmt: skip
    need = {h: int(agg.buffer_need[i]) for i, h in enumerate(problem.region.hardware_names)}
    plan = build_plan(problem.region, problem.requests, problem.settings, assignment, problem.previous, report,
                      list(parted.pre_unmet), need)  # type: ignore[arg-type]  # fmt: skip
    pop = {
        "pop_k": k,
        "split_clients": parted.split_clients,
        "parts": [
            {"part": r.index, "status": r.status, "objective": r.objective, "bound": r.bound, "gap": r.gap,
             "wall_s": r.wall_s, "clients": len(parted.parts[r.index].requests),
             "servers": len(parted.parts[r.index].servers), "unmet_in_part": list(r.unmet)}
            for r in sorted(results.values(), key=lambda r: r.index)
        ] + [{"part": j, "status": "incomplete", "error": msg, "clients": len(parted.parts[j].requests),
              "servers": len(parted.parts[j].servers)} for j, msg in sorted(failed.items())],
        "incomplete_parts": sorted(failed),
        "complete": not failed,
        "full_lp_bound": dict(bound) if bound else None,
    }  # fmt: skip
    if failed:
        pop["incomplete_note"] = (
            f"sub-problem(s) {sorted(failed)} did not finish; their {sum(len(parted.parts[j].requests) for j in failed)} "
            "(virtual) reservations were placed by the global repair pass only, not by the model"
        )
    return plan, pop

