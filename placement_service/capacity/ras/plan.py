"""The plan: per-server assignment and the figures the ``A.json`` contract reports.

Per reservation r (RRU): ``capacity_rru = sum of its servers' RRU``, ``cap_F`` per MSB,
``capacity_after_worst_msb_loss_rru = capacity_rru - max_F cap_F`` (its embedded buffer is the max),
``max_msb_share = max_F cap_F / capacity_rru``. Figures are computed from the concrete servers, never
from the model, so they are what the checker will find.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from placement_service.capacity.ras.domain import (
    CAPACITY_TOLERANCE_RRU,
    SHARED_BUFFER_PREFIX,
    Region,
    Request,
    Settings,
    SolverReport,
    Unmet,
    shared_buffer_name,
)


@dataclass(frozen=True)
class Plan:
    """Result of a solve (or of an online change): assignment, figures, moves, unmet, elastic set."""

    assignment: Mapping[str, str | None]
    reservations: Mapping[str, Mapping[str, object]]
    shared_buffers: Mapping[str, Mapping[str, object]]
    moves: tuple[Mapping[str, object], ...]
    unmet: tuple[Unmet, ...]
    harvestable: tuple[str, ...]
    solver: SolverReport
    summary: Mapping[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the final repair did (topup.py)
    rack_spread_breaches: tuple[Mapping[str, object], ...] = ()  # reservations above their rack limit
    inventory_warnings: tuple[str, ...] = ()  # e.g. racks that span MSBs

    def to_json(self) -> dict[str, object]:
        s = self.solver
        return {
            "assignment": dict(self.assignment),
            "reservations": {k: dict(v) for k, v in self.reservations.items()},
            "shared_buffers": {k: dict(v) for k, v in self.shared_buffers.items()},
            "moves": [dict(m) for m in self.moves],
            "unmet": [
                {"id": u.id, "reason": u.reason, "constraint": u.constraint, "shortfall": u.shortfall}
                for u in self.unmet
            ],
            "harvestable": list(self.harvestable),
            "solver": {
                "status": s.status, "method": s.method, "objective": s.objective, "bound": s.bound,
                "lp_bound": s.lp_bound, "gap": s.gap, "wall_s": s.wall_s, "phases": [dict(p) for p in s.phases],
            },  # fmt: skip
            "summary": dict(self.summary),
            "notes": list(self.notes),
            "rack_spread_breaches": [dict(b) for b in self.rack_spread_breaches],
            "inventory_warnings": list(self.inventory_warnings),
        }


def reservation_figures(
    region: Region, req: Request, members: np.ndarray
) -> dict[str, object]:
    """Figures of one reservation from the indices of its servers."""
    value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
    v = value[region.hardware[members]]
    per_msb = np.bincount(region.msb[members], weights=v, minlength=len(region.msb_names))
    per_dc = np.bincount(region.datacenter[members], weights=v, minlength=len(region.datacenter_names))
    total = float(v.sum())
    worst = float(per_msb.max()) if len(per_msb) else 0.0
    return {
        "requested_rru": req.capacity_rru,
        "capacity_rru": total,
        "capacity_after_worst_msb_loss_rru": total - worst,
        "embedded_buffer_rru": worst,
        "max_msb_share": worst / total if total > 0 else 0.0,
        "worst_msb": region.msb_names[int(np.argmax(per_msb))] if total > 0 else None,
        "datacenter_rru": {region.datacenter_names[d]: float(x) for d, x in enumerate(per_dc) if x > 0},
        "servers": sorted(region.server[i] for i in members),
    }


def build_plan(
    region: Region,
    requests: tuple[Request, ...],
    settings: Settings,
    assignment: Mapping[str, str | None],
    previous: Mapping[str, str | None],
    solver: SolverReport,
    pre_unmet: list[Unmet],
    buffer_need: Mapping[str, int],
) -> Plan:
    """Figures, moves, unmet requests (with reasons) and the harvestable set of an assignment."""
    idx = region.index()
    members: dict[str, list[int]] = {}
    for s, e in assignment.items():
        if e is not None:
            members.setdefault(e, []).append(idx[s])
    unmet = list(pre_unmet)
    unmet_ids = {u.id for u in pre_unmet if u.constraint != "datacenter-affinity"}
    figures: dict[str, dict[str, object]] = {}
    free_mask = region.available.astype(bool) & np.array([assignment.get(s) is None for s in region.server])
    buffer_servers = 0.0
    requested_servers = 0.0
    for req in requests:
        fig = reservation_figures(region, req, np.array(members.get(req.id, []), dtype=np.int64))
        figures[req.id] = fig
        if req.id in unmet_ids:
            continue
        after = float(fig["capacity_after_worst_msb_loss_rru"])  # type: ignore[arg-type]
        if after + CAPACITY_TOLERANCE_RRU < req.capacity_rru:
            value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
            free = [i for i in np.flatnonzero(free_mask & (value[region.hardware] > 0))]
            mine = np.array(members.get(req.id, []), dtype=np.int64)
            per_msb = np.bincount(region.msb[mine], weights=value[region.hardware[mine]], minlength=len(region.msb_names))
            top = float(per_msb.max()) if len(per_msb) else 0.0
            aff = req.datacenter_affinity
            helpful = [i for i in free if (len(mine) == 0 or per_msb[region.msb[i]] < top - CAPACITY_TOLERANCE_RRU)
                       and (not aff or aff.get(region.datacenter_names[region.datacenter[i]], 0.0) > 0)]
            unmet.append(Unmet(req.id, (
                f"capacity: {after:g} RRU left after losing its worst MSB ({fig['worst_msb'] or 'none held'}), "
                f"{req.capacity_rru:g} requested; short by {req.capacity_rru - after:g} RRU. Eligible hardware "
                f"{sorted(h for h, v in req.rru.items() if v > 0)}: {len(free)} unassigned server(s) left, in "
                f"{len({int(region.msb[i]) for i in free})} MSB(s), {len(helpful)} of them outside its largest "
                f"MSB (and in an allowed datacenter); the rest is held by other reservations and the shared buffer"
            ), "capacity", req.capacity_rru - after))  # fmt: skip
        if req.datacenter_affinity is not None and float(fig["capacity_rru"]) > 0:  # type: ignore[arg-type]
            total = float(fig["capacity_rru"])  # type: ignore[arg-type]
            dc_rru: Mapping[str, float] = fig["datacenter_rru"]  # type: ignore[assignment]
            for d, share in req.datacenter_affinity.items():
                got = dc_rru.get(d, 0.0) / total
                if abs(got - share) > settings.affinity_tolerance + 1e-6:
                    unmet.append(Unmet(req.id, (
                        f"datacenter-affinity: datacenter {d} holds {got:.1%} of its capacity, asked "
                        f"{share:.1%} +/- {settings.affinity_tolerance:.1%} (off by "
                        f"{abs(got - share) - settings.affinity_tolerance:.1%})"
                    ), "datacenter-affinity", abs(got - share) - settings.affinity_tolerance))  # fmt: skip
        mean = req.mean_rru()
        buffer_servers += float(fig["embedded_buffer_rru"]) / mean  # type: ignore[arg-type]
        requested_servers += req.capacity_rru / mean
    shared: dict[str, dict[str, object]] = {}
    for h, need in buffer_need.items():
        name = shared_buffer_name(h)
        have = len(members.get(name, []))
        shared[name] = {"hardware": h, "servers": have, "required": int(need)}
        if have < need:
            unmet.append(Unmet(name, (
                f"shared-buffer: holds {have} servers of hardware {h}, {need} required "
                f"({settings.random_failure_buffer:.1%} of its available servers); short by {need - have}: "
                f"every server of {h} is taken by reservations"
            ), "shared-buffer", float(need - have)))  # fmt: skip
    moves = []
    in_use = region.in_use.astype(bool)
    avail = region.available.astype(bool)
    for s, before in previous.items():
        i = idx.get(s)
        if i is None or before is None or not avail[i]:
            continue
        after_e = assignment.get(s)
        if after_e != before:
            moves.append({"server": s, "from": before, "to": after_e, "in_use": bool(in_use[i])})
    harvestable = tuple(
        s for s in region.server
        if avail[idx[s]] and (assignment.get(s) is None or str(assignment.get(s)).startswith(SHARED_BUFFER_PREFIX))
    )  # fmt: skip
    n_avail = int(avail.sum())
    summary = {
        "servers": len(region),
        "available": n_avail,
        "assigned": sum(1 for e in assignment.values() if e is not None),
        "moves": len(moves),
        "moves_in_use": sum(1 for m in moves if m["in_use"]),
        "moves_frac": len(moves) / max(1, n_avail),
        "moves_in_use_frac": sum(1 for m in moves if m["in_use"]) / max(1, n_avail),
        "newly_assigned": sum(1 for s, e in assignment.items() if e is not None and previous.get(s) is None)
        if previous else 0,
        "harvestable": len(harvestable),
        "embedded_buffer_servers": buffer_servers,
        "embedded_buffer_frac": buffer_servers / max(1e-9, requested_servers + buffer_servers),
        "unmet": len(unmet),
    }
    return Plan(
        assignment=dict(assignment), reservations=figures, shared_buffers=shared, moves=tuple(moves),
        unmet=tuple(unmet), harvestable=harvestable, solver=solver, summary=summary,
    )  # fmt: skip


def replan(
    region: Region,
    requests: tuple[Request, ...],
    settings: Settings,
    assignment: Mapping[str, str | None],
    previous: Mapping[str, str | None],
    label: str,
) -> Plan:
    """Figures of an assignment changed outside the solver (Online Mover, emergency path)."""
    avail = region.available.astype(bool)
    need = {
        h: int(np.ceil(settings.random_failure_buffer * int(np.sum(avail & (region.hardware == k))) - 1e-9))
        for k, h in enumerate(region.hardware_names)
    }
    report = SolverReport(status=label, method=label, objective=float("nan"), bound=float("nan"),
                          lp_bound=float("nan"), gap=float("nan"), wall_s=0.0)  # fmt: skip
    return build_plan(region, requests, settings, assignment, previous, report, [], need)
