"""What every plan the capacity service publishes must keep (checked by ``loop.py`` before each publish).

1. **Before any plan, nothing is lent and only a solve publishes.** The online paths (Online Mover,
   emergency path) change a plan; with none yet, they record the signal or the request and the first
   solve takes it in. (An online change to the empty plan would lend out the whole region.)
2. **No reservation gets less than the last good plan gave it.** For each reservation ``r``, with
   ``cap(A, r)`` its capacity after the loss of its worst MSB under assignment ``A``, counted on the
   servers alive now (failed ones count for nothing)::

       cap(new, r) >= min(requested(r), cap(last, r)) - tolerance

   so a failure may take capacity away only as far as no replacement was found, never a publish.
3. **No server is lent that a reservation needs.** A server ``r`` held in the last good plan is not
   lent (unassigned or shared buffer) in the new one while ``r`` is short of its request.

A plan that breaks one of them is not published: the last good plan stays, the refusal is an event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from placement_service.capacity.ras.domain import (
    CAPACITY_TOLERANCE_RRU,
    SHARED_BUFFER_PREFIX,
    Region,
    Request,
)

TOLERANCE_RRU = 1e-6 + CAPACITY_TOLERANCE_RRU


def _lent(entity: str | None) -> bool:
    return entity is None or entity.startswith(SHARED_BUFFER_PREFIX)


def _codes(region: Region, ids: dict[str, int], assignment: Mapping[str, str | None]) -> np.ndarray:
    """Per server of the region: the index of its reservation in ``ids``, or -1 (lent, or none)."""
    return np.array([ids.get(assignment.get(s) or "", -1) for s in region.server], dtype=np.int64)


def _capacity(region: Region, req: Request, members: np.ndarray) -> float:
    if len(members) == 0:
        return 0.0
    value = np.array([float(req.rru.get(h, 0.0)) for h in region.hardware_names])
    per_msb = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
    return float(per_msb.sum() - per_msb.max())


def capacity_after_worst_msb(region: Region, req: Request, assignment: Mapping[str, str | None],
                             alive: np.ndarray) -> float:
    """RRU of ``req``'s alive servers in ``assignment`` minus its largest MSB's share."""
    codes = _codes(region, {req.id: 0}, assignment)
    return _capacity(region, req, np.flatnonzero((codes == 0) & alive))


def publish_violations(live: Region, requests: Sequence[Request], last: Mapping[str, str | None] | None,
                       new: Mapping[str, str | None], source: str) -> list[str]:
    """Why ``new`` must not be published after ``last`` (``None``: no plan yet); empty when it may.

    ``live``: the region with failed servers unavailable; ``source``: ``solve``, ``mover`` or ``grant``.
    """
    if last is None:
        if source != "solve":
            return [f"no plan yet: only a solve publishes the first plan, not the {source} (nothing is lent "
                    "before it)"]  # fmt: skip
        return []
    alive = live.available.astype(bool)
    ids = {r.id: k for k, r in enumerate(requests)}
    code_new, code_last = _codes(live, ids, new), _codes(live, ids, last)
    lent_new = np.array([_lent(new.get(s)) for s in live.server], dtype=bool)
    out = []
    for k, req in enumerate(requests):
        now = _capacity(live, req, np.flatnonzero((code_new == k) & alive))
        before = _capacity(live, req, np.flatnonzero((code_last == k) & alive))
        floor = min(req.capacity_rru, before)
        if now < floor - TOLERANCE_RRU:
            out.append(f"reservation {req.id}: {now:g} RRU after the worst MSB loss, less than the last good "
                       f"plan's {before:g} (requested {req.capacity_rru:g})")  # fmt: skip
        if now < req.capacity_rru - TOLERANCE_RRU:
            lent = np.flatnonzero((code_last == k) & alive & lent_new)
            if len(lent):
                out.append(f"reservation {req.id}: short ({now:g} of {req.capacity_rru:g} RRU) while its servers "
                           f"{[live.server[i] for i in lent[:5]]} would be lent out")  # fmt: skip
    return out
