"""Independent checker of a capacity plan: shares no code with the solver (stdlib only).

It takes the raw inventory rows, the raw ``R.json`` document and the raw ``A.json`` document and
recomputes everything from scratch:
  1. every server named by the plan exists, and appears in one place only (the assignment map and
     the per-reservation server lists agree; no server is listed twice);
  2. unavailable servers hold nothing;
  3. a server only serves a reservation that lists its hardware type with a positive RRU value, and a
     shared buffer only holds its own hardware type;
  4. every reservation not reported in ``unmet`` keeps ``sum RRU - max over MSBs of RRU >= request``
     (its capacity after the loss of any single MSB), and its datacenter affinity within tolerance;
  5. every shared buffer ``shared-buffer:<hw>`` holds at least ``ceil(fraction * available servers of
     hw)`` servers, unless it is reported in ``unmet``;
  6. the figures the plan reports for each reservation match the recomputed ones.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

TOLERANCE = 1e-6  # equal to the solver's domain.CAPACITY_TOLERANCE_RRU (a test compares them)


def check_plan(
    inventory: Mapping[str, Sequence[Any]], reservations_doc: Mapping[str, Any], plan_doc: Mapping[str, Any]
) -> list[str]:
    """Violations found (empty list: the plan is valid)."""
    problems: list[str] = []
    servers = [str(s) for s in inventory["server"]]
    hw = dict(zip(servers, (str(h) for h in inventory["hardware"]), strict=True))
    msb = dict(zip(servers, (str(m) for m in inventory["msb"]), strict=True))
    dc = dict(zip(servers, (str(d) for d in inventory["datacenter"]), strict=True))
    avail = dict(zip(servers, (_truthy(a) for a in inventory["available"]), strict=True))
    settings = reservations_doc.get("settings") or {}
    fraction = float(settings.get("random_failure_buffer", 0.02))
    theta = float(settings.get("affinity_tolerance", 0.1))
    requests = {r["id"]: r for r in reservations_doc["reservations"]}
    assignment: Mapping[str, Any] = plan_doc.get("assignment", {})
    unmet = {u["id"] for u in plan_doc.get("unmet", []) if u.get("constraint") != "datacenter-affinity"}
    unmet_aff = {u["id"] for u in plan_doc.get("unmet", [])}
    # 1. one place per server, known servers, lists agree with the map
    listed: dict[str, str] = {}
    for rid, fig in (plan_doc.get("reservations") or {}).items():
        for s in fig.get("servers", []):
            if s in listed:
                problems.append(f"server {s} is listed in both {listed[s]} and {rid}")
            listed[s] = rid
            if assignment.get(s) != rid:
                problems.append(f"server {s} is listed in {rid} but assigned to {assignment.get(s)}")
    members: dict[str, list[str]] = defaultdict(list)
    for s, e in assignment.items():
        if s not in hw:
            problems.append(f"server {s} is not in the inventory")
            continue
        if e is None:
            continue
        members[e].append(s)
        # 2. unavailable servers hold nothing
        if not avail[s]:
            problems.append(f"unavailable server {s} is assigned to {e}")
        # 3. eligibility
        if e.startswith("shared-buffer:"):
            if e != f"shared-buffer:{hw[s]}":
                problems.append(f"server {s} of hardware {hw[s]} is in {e}")
        elif e not in requests:
            problems.append(f"server {s} is assigned to unknown reservation {e}")
        elif float(requests[e]["rru"].get(hw[s], 0) or 0) <= 0:
            problems.append(f"server {s} of hardware {hw[s]} cannot serve {e} (no RRU value)")
        elif s in listed and listed[s] != e:
            pass  # already reported above
        elif plan_doc.get("reservations") and e in plan_doc["reservations"] and s not in listed:
            problems.append(f"server {s} is assigned to {e} but missing from its server list")
    # 4. capacity after the worst MSB, affinity, reported figures
    for rid, req in requests.items():
        per_msb: dict[str, float] = defaultdict(float)
        per_dc: dict[str, float] = defaultdict(float)
        for s in members.get(rid, []):
            v = float(req["rru"].get(hw[s], 0) or 0)
            per_msb[msb[s]] += v
            per_dc[dc[s]] += v
        total = sum(per_msb.values())
        after = total - max(per_msb.values(), default=0.0)
        want = float(req["capacity_rru"])
        if rid not in unmet and after + TOLERANCE < want:
            problems.append(f"reservation {rid}: {after:g} RRU after losing its worst MSB < {want:g} requested")
        aff = req.get("datacenter_affinity")
        if aff and rid not in unmet_aff and total > 0:
            for d, share in aff.items():
                if abs(per_dc.get(d, 0.0) / total - float(share)) > theta + TOLERANCE:
                    problems.append(f"reservation {rid}: datacenter {d} share {per_dc.get(d, 0.0) / total:.3f} "
                                    f"outside {share} +/- {theta}")  # fmt: skip
        fig = (plan_doc.get("reservations") or {}).get(rid)
        if fig is not None:
            for key, mine in (("capacity_rru", total), ("capacity_after_worst_msb_loss_rru", after)):
                if key in fig and abs(float(fig[key]) - mine) > 1e-6 * max(1.0, abs(mine)):
                    problems.append(f"reservation {rid}: reports {key}={fig[key]}, recomputed {mine}")
    # 5. shared buffer per hardware type
    avail_per_hw: dict[str, int] = defaultdict(int)
    for s in servers:
        if avail[s]:
            avail_per_hw[hw[s]] += 1
    for h, n in avail_per_hw.items():
        name = f"shared-buffer:{h}"
        need = math.ceil(fraction * n - 1e-9)
        have = len(members.get(name, []))
        if have < need and name not in unmet:
            problems.append(f"{name} holds {have} servers, {need} required ({fraction:.1%} of {n} available)")
    return problems


def _truthy(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return bool(v)
    return str(v).strip().lower() in ("true", "1", "yes", "t", "y")
