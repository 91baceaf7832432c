"""Replay of server outages through the Online Mover, with periodic re-solves (failure scenarios).

Each outage takes a server down at ``start_s`` and brings it back at ``end_s``. While it is down
its reservation gets a replacement from the shared buffer at once (Online Mover); the replacement's
elastic loan is revoked. A repaired server comes back unassigned (harvestable). Every
``resolve_every_s`` the solver re-optimises with the current assignment as the previous one, which
refills the shared buffer. The replay reports how often the buffer covered a failure, how many
loans were revoked, and whether any reservation ever fell below its request after the worst MSB.

With an ``ElasticLog`` the replay also records the elastic set over time, as the capacity loop
(``loop.py``) would publish it: the servers that are available and lent out (shared buffer or
unassigned) at the start, every revocation (the Online Mover's replacements, and servers a re-solve
moves from the elastic set into a reservation, the loop's rule) with the pool it was taken from, and
every change of membership (a revocation, an elastic server's own outage, a repaired server coming
back unassigned, a re-solve releasing a server). The simulator replays that as wipes and absences
(``placement_service/sim/elastic.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from placement_service.capacity.ras.domain import (
    SHARED_BUFFER_PREFIX,
    Problem,
    elastic_pool,
)
from placement_service.capacity.ras.online import online_move
from placement_service.capacity.ras.solve import solve

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outage:
    server: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class ReplayStats:
    outages: int
    hit_reservation: int  # outages of servers that held a reservation
    replaced_from_buffer: int
    replaced_from_unassigned: int
    not_replaced: int
    revoked: int
    short_after_outage: int  # outages after which the hit reservation is below request after the worst MSB
    resolves: int
    resolve_moves: int
    resolve_moves_in_use: int
    min_shared_buffer_servers: int


@dataclass
class ElasticLog:
    """The elastic set through a replay (times in the outages' clock, seconds).

    ``initial``: server -> pool (``elastic:<entity>``) of the servers elastic at the start;
    ``revocations``: (time, server, pool, source) with source ``mover`` or ``re-solve``;
    ``changes``: (time, server, in_set, pool) every time a server enters or leaves the elastic set
    or moves to another pool within it (``in_set`` true, the new pool); revocations appear in both lists.
    """

    initial: dict[str, str] = field(default_factory=dict)
    revocations: list[tuple[float, str, str, str]] = field(default_factory=list)
    changes: list[tuple[float, str, bool, str]] = field(default_factory=list)


def _elastic_set(
    servers: tuple[str, ...], avail: np.ndarray, current: Mapping[str, str | None]
) -> dict[str, str]:
    """Available servers lent out (shared buffer or unassigned) -> their pool."""
    out = {}
    for i, s in enumerate(servers):
        e = current.get(s)
        if avail[i] and (e is None or e.startswith(SHARED_BUFFER_PREFIX)):
            out[s] = elastic_pool(e)
    return out


def _record(log: ElasticLog, t: float, before: dict[str, str], after: dict[str, str],
            revoked: set[str], source: str) -> None:  # fmt: skip
    for s in sorted(before.keys() - after.keys()):
        if s in revoked:
            log.revocations.append((t, s, before[s], source))
        log.changes.append((t, s, False, before[s]))
    for s in sorted(after):
        if before.get(s) != after[s]:  # joined, or moved to another pool (a re-solve)
            log.changes.append((t, s, True, after[s]))


def _short(problem: Problem, assignment: Mapping[str, str | None], avail: np.ndarray, rid: str) -> int:
    """1 when reservation ``rid`` is below its request after the loss of its worst MSB, else 0."""
    region = problem.region
    idx = region.index()
    short = 0
    for req in problem.requests:
        if req.id != rid:
            continue
        value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
        members = [idx[s] for s, e in assignment.items() if e == req.id and avail[idx[s]]]
        per = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
        if per.sum() - per.max() < req.capacity_rru - 1e-9:
            short += 1
    return short


def replay(
    problem: Problem, assignment: Mapping[str, str | None], outages: Sequence[Outage], *,
    resolve_every_s: float | None = None, log: ElasticLog | None = None,
) -> ReplayStats:  # fmt: skip
    """Replay ``outages`` (module docstring); ``log`` collects the elastic set over time when given."""
    region = problem.region
    idx = region.index()
    avail = region.available.astype(bool).copy()
    current = dict(assignment)
    events = sorted(
        [(o.start_s, 1, o.server) for o in outages if o.server in idx]
        + [(o.end_s, 0, o.server) for o in outages if o.server in idx]
    )  # ends sort before starts at the same time
    n_buffer = sum(1 for e in current.values() if e and e.startswith(SHARED_BUFFER_PREFIX))
    stats = dict(outages=0, hit_reservation=0, replaced_from_buffer=0, replaced_from_unassigned=0, not_replaced=0,
                 revoked=0, short_after_outage=0, resolves=0, resolve_moves=0, resolve_moves_in_use=0,
                 min_shared_buffer_servers=n_buffer)  # fmt: skip
    next_resolve = events[0][0] + resolve_every_s if (events and resolve_every_s) else float("inf")
    lent = _elastic_set(region.server, avail, current) if log is not None else {}
    if log is not None:
        log.initial = dict(lent)
    for t, kind, server in events:
        while t >= next_resolve:
            plan = solve(replace(problem, region=replace(region, available=avail.copy()), previous=current))
            current = dict(plan.assignment)
            if log is not None:  # the loop's rule: available servers taken from the elastic set are revoked
                after = _elastic_set(region.server, avail, current)
                _record(log, next_resolve, lent, after, set(lent) - set(after), "re-solve")
                lent = after
            stats["resolves"] += 1
            stats["resolve_moves"] += int(plan.summary["moves"])  # type: ignore[call-overload]
            stats["resolve_moves_in_use"] += int(plan.summary["moves_in_use"])  # type: ignore[call-overload]
            next_resolve += resolve_every_s or float("inf")
        i = idx[server]
        if kind == 0:  # repaired: back, unassigned (harvestable)
            avail[i] = True
            if log is not None:
                after = _elastic_set(region.server, avail, current)
                _record(log, t, lent, after, set(), "repair")
                lent = after
            continue
        if not avail[i]:
            continue
        stats["outages"] += 1
        before = current.get(server)
        avail[i] = False
        live = replace(region, available=avail.copy())
        was = dict(current)
        res = online_move(live, problem.requests, current, [server])
        current = dict(res.assignment)
        if before is not None and not before.startswith(SHARED_BUFFER_PREFIX):
            stats["hit_reservation"] += 1
            if res.replacements:
                new = res.replacements[0][1]  # the first replacement tells where it came from
                key = "replaced_from_buffer" if (was.get(new) or "").startswith(SHARED_BUFFER_PREFIX) else (
                    "replaced_from_unassigned")  # fmt: skip
                stats[key] += 1
            else:
                stats["not_replaced"] += 1
            stats["short_after_outage"] += _short(problem, current, avail, before)
        stats["revoked"] += len(res.revoked)
        if log is not None:
            after = _elastic_set(region.server, avail, current)
            _record(log, t, lent, after, set(res.revoked), "mover")
            lent = after
        n_buffer = sum(1 for e in current.values() if e and e.startswith(SHARED_BUFFER_PREFIX))
        stats["min_shared_buffer_servers"] = min(stats["min_shared_buffer_servers"], n_buffer)
    return ReplayStats(**stats)
