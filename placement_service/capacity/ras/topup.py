"""Final server-level repair after a solve: top-up, shortfall sharing and the rack-spread breaches.

1. **Top-up.** A reservation is never declared unmet while eligible unassigned servers remain that
   would raise its capacity after the loss of its worst MSB: for every reservation short by more
   than ``CAPACITY_TOLERANCE_RRU`` (the same tolerance the plan's figures and the independent
   checker use), unassigned available eligible servers are added one at a time, each the one that
   keeps the most capacity after the worst MSB loss (within the datacenter affinity when possible),
   until it is whole or no server helps any more.
2. **Sharing the shortfall when not everything fits** (an overfull region). The stated rule:
   higher ``priority`` first (a short reservation takes servers from reservations of a strictly
   lower priority, whole or not); within one priority level, the short reservations end with about
   the same *fraction* of their requests (proportional sharing): a server moves from a better-served
   reservation of the same priority (whole or short) to the worst-served one while that raises the
   smaller of the two fractions. Each move keeps the most capacity after the worst MSB loss on both
   sides. A second top-up follows (a donor may now use a free server that helped nobody before).
3. **Rack spread.** Every reservation above its ``rack_spread_limit`` after the repair is reported,
   one breach each (the rack phase lowers these where it can; the report says where it could not).

Pure: numbers in, assignment out. Used by ``solve.solve`` after the rack phase.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from placement_service.capacity.ras.domain import (
    CAPACITY_TOLERANCE_RRU,
    SHARED_BUFFER_PREFIX,
    Region,
    Request,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RackBreach:
    """A reservation whose largest rack holds more than its rack-spread limit of the request."""

    id: str
    rack: str
    share: float  # RRU in that rack / requested RRU
    limit: float


@dataclass
class _Res:
    req: Request
    value: np.ndarray  # RRU per hardware code
    members: list[int]

    def per_msb(self, region: Region) -> np.ndarray:
        m = np.array(self.members, dtype=np.int64)
        return np.bincount(region.msb[m], weights=self.value[region.hardware[m]], minlength=len(region.msb_names))

    def after(self, region: Region) -> float:
        per = self.per_msb(region)
        return float(per.sum() - per.max()) if len(per) else 0.0

    def fraction(self, region: Region) -> float:
        return min(1.0, self.after(region) / self.req.capacity_rru) if self.req.capacity_rru > 0 else 1.0


def _allowed_dc(region: Region, req: Request) -> np.ndarray:
    if not req.datacenter_affinity:
        return np.ones(len(region.datacenter_names), dtype=bool)
    return np.array([req.datacenter_affinity.get(d, 0.0) > 0 for d in region.datacenter_names])


def _best_add(region: Region, r: _Res, candidates: np.ndarray) -> tuple[int | None, float]:
    """The candidate giving the most capacity after the worst MSB, and that capacity."""
    if len(candidates) == 0:
        return None, r.after(region)
    per = r.per_msb(region)
    total, top = float(per.sum()), float(per.max()) if len(per) else 0.0
    v = r.value[region.hardware[candidates]]
    after = total + v - np.maximum(top, per[region.msb[candidates]] + v)
    if r.req.datacenter_affinity:
        m = np.array(r.members, dtype=np.int64)
        per_dc = np.bincount(region.datacenter[m], weights=r.value[region.hardware[m]],
                             minlength=len(region.datacenter_names))  # fmt: skip
        share = np.array([r.req.datacenter_affinity.get(d, 0.0) for d in region.datacenter_names])
        dcs = region.datacenter[candidates]
        over = per_dc[dcs] + v > (share[dcs] + 0.1) * (total + v) + 1e-9
        after = after - 1e-3 * over  # prefer servers that keep the shares; never refuse one that helps
    rack_count = np.bincount(region.rack[np.array(r.members, dtype=np.int64)], minlength=len(region.rack_names))
    score = after - 1e-7 * rack_count[region.rack[candidates]]
    i = int(np.argmax(score))
    return int(candidates[i]), float(after[i])


def finish(
    region: Region,
    requests: tuple[Request, ...],
    assignment: Mapping[str, str | None],
    skip: set[str],
) -> tuple[dict[str, str | None], list[str]]:
    """Top-up, then shortfall sharing; returns the new assignment and what was done (log lines).

    ``skip``: requests already declared unmeetable before the solve (they hold nothing).
    """
    out = dict(assignment)
    idx = region.index()
    avail = region.available.astype(bool)
    free = avail & np.array([out.get(s) is None for s in region.server])
    notes: list[str] = []
    res: dict[str, _Res] = {}
    for req in requests:
        if req.id in skip:
            continue
        value = np.array([float(req.rru.get(h, 0.0)) for h in region.hardware_names])
        members = [idx[s] for s, e in out.items() if e == req.id and s in idx]
        res[req.id] = _Res(req, value, members)
    prio = {rid: int(r.req.priority) for rid, r in res.items()}

    def eligible(r: _Res) -> np.ndarray:
        return free & (r.value[region.hardware] > 0) & _allowed_dc(region, r.req)[region.datacenter]

    def give(r: _Res, i: int) -> None:
        r.members.append(i)
        free[i] = False
        out[region.server[i]] = r.req.id

    def top_up() -> None:
        """Unassigned servers to short reservations, highest priority and lowest fraction first."""
        added = 0
        for r in sorted(res.values(), key=lambda x: (-prio[x.req.id], x.fraction(region))):
            while r.after(region) + CAPACITY_TOLERANCE_RRU < r.req.capacity_rru:
                before = r.after(region)
                i, after = _best_add(region, r, np.flatnonzero(eligible(r)))
                if i is None or after <= before + 1e-12:
                    break
                give(r, i)
                added += 1
        if added:
            notes.append(f"top-up: {added} unassigned server(s) added to reservations short after the solve")
            logger.info("top-up: %d unassigned server(s) added", added)

    # 1. top-up from unassigned servers
    top_up()
    # 2. share the shortfall: priority first, then proportional within a priority level; 3. top-up again
    if _share(region, res, prio, out, notes):
        top_up()
    return out, notes


def _share(region: Region, res: dict[str, _Res], prio: dict[str, int], out: dict[str, str | None],
           notes: list[str]) -> int:  # fmt: skip
    """Move servers to the worst-off short reservation of the highest priority (see module doc).

    One step moves a *bundle*: a reservation spread evenly over MSBs gains nothing from one more
    server (its largest MSB grows with it), so servers are taken one by one, each filling the
    target's emptiest MSB, until its capacity after the worst MSB loss rises; the bundle is undone if
    it never does, or if a donor of the same priority would end below the target's old fraction.
    """
    moved = 0
    n_msb = len(region.msb_names)
    blocked: set[str] = set()
    for _ in range(20_000):
        frac = {rid: r.fraction(region) for rid, r in res.items()}
        short = [r for r in res.values() if r.req.id not in blocked
                 and r.after(region) + CAPACITY_TOLERANCE_RRU < r.req.capacity_rru]  # fmt: skip
        if not short:
            break
        target = min(short, key=lambda r: (-prio[r.req.id], frac[r.req.id]))
        f_t = frac[target.req.id]
        t_dc = _allowed_dc(region, target.req)
        bundle: list[tuple[_Res, int]] = []
        for _step in range(n_msb + 1):
            best: tuple[tuple[float, float, float], _Res, int] | None = None
            per_t = target.per_msb(region)
            total_t, top_t = float(per_t.sum()), float(per_t.max()) if len(per_t) else 0.0
            for d in res.values():
                if d is target or not d.members:
                    continue
                same = prio[d.req.id] == prio[target.req.id]
                if prio[d.req.id] > prio[target.req.id] or (same and frac[d.req.id] <= f_t + 1e-9):
                    continue
                m = np.array(d.members, dtype=np.int64)
                vt = target.value[region.hardware[m]]
                ok = (vt > 0) & t_dc[region.datacenter[m]]
                if not ok.any():
                    continue
                m, vt = m[ok], vt[ok]
                t_after = total_t + vt - np.maximum(top_t, per_t[region.msb[m]] + vt)
                per_d = d.per_msb(region)
                left = np.repeat(per_d[None, :], len(m), axis=0)
                left[np.arange(len(m)), region.msb[m]] -= d.value[region.hardware[m]]
                d_after = left.sum(axis=1) - left.max(axis=1)
                d_frac = np.minimum(1.0, d_after / d.req.capacity_rru) if d.req.capacity_rru > 0 else np.ones(len(m))
                if same:
                    keep = d_frac > f_t + 1e-9
                    if not keep.any():
                        continue
                    m, t_after, d_frac = m[keep], t_after[keep], d_frac[keep]
                score = np.stack([t_after, -per_t[region.msb[m]], d_frac], axis=1)
                k = int(np.lexsort((score[:, 2], score[:, 1], score[:, 0]))[-1])
                cand = (float(score[k, 0]), float(score[k, 1]), float(score[k, 2]))
                if best is None or cand > best[0]:
                    best = (cand, d, int(m[k]))
            if best is None:
                break
            _, d, i = best
            d.members.remove(i)
            target.members.append(i)
            bundle.append((d, i))
            if target.fraction(region) > f_t + 1e-9:
                break
        if not bundle:
            blocked.add(target.req.id)
            continue
        if target.fraction(region) <= f_t + 1e-9:  # the bundle did not help: undo it
            for d, i in reversed(bundle):
                target.members.remove(i)
                d.members.append(i)
            blocked.add(target.req.id)
            continue
        for _d, i in bundle:
            out[region.server[i]] = target.req.id
        moved += len(bundle)
        blocked.clear()
    if moved:
        logger.info("shortfall sharing moved %d server(s)", moved)
        notes.append(f"shortfall sharing: {moved} server(s) moved between reservations "
                     f"(higher priority first, then the same fraction of each request)")  # fmt: skip
    return moved


def rack_breaches(
    region: Region, requests: tuple[Request, ...], assignment: Mapping[str, str | None], default_limit: float
) -> list[RackBreach]:
    """Every reservation whose largest rack holds more than its limit of the requested RRU."""
    idx = region.index()
    members: dict[str, list[int]] = {}
    for s, e in assignment.items():
        if e is not None and not e.startswith(SHARED_BUFFER_PREFIX) and s in idx:
            members.setdefault(e, []).append(idx[s])
    out: list[RackBreach] = []
    for req in requests:
        m = np.array(members.get(req.id, []), dtype=np.int64)
        if len(m) == 0 or req.capacity_rru <= 0:
            continue
        limit = req.rack_spread_limit if req.rack_spread_limit is not None else default_limit
        value = np.array([float(req.rru.get(h, 0.0)) for h in region.hardware_names])
        per_rack = np.bincount(region.rack[m], weights=value[region.hardware[m]], minlength=len(region.rack_names))
        k = int(np.argmax(per_rack))
        share = float(per_rack[k]) / req.capacity_rru
        if share > limit + 1e-9:
            out.append(RackBreach(req.id, region.rack_names[k], share, limit))
    return out


def racks_spanning_msbs(rack: list[str] | tuple[str, ...], msb: list[str] | tuple[str, ...]) -> dict[str, list[str]]:
    """Racks that appear in more than one MSB in an inventory (rack -> its MSBs, sorted)."""
    seen: dict[str, set[str]] = {}
    for k, f in zip(rack, msb, strict=True):
        seen.setdefault(str(k), set()).add(str(f))
    return {k: sorted(v) for k, v in sorted(seen.items()) if len(v) > 1}
