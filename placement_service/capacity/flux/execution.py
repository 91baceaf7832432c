"""The execution plan: a DAG of resize, shift and supply actions in three phases per step.

For the step into timestep t (pure: plan document in, actions out):
0. ``supply`` (increase): new hardware of (r, h) is installed first;
1. ``resize`` up: every service whose target is above its current size goes to max(current,
   target) = target; after the supply increase of its pool and the previous step's checkpoint;
2. ``shift``: product p's share in region r goes to x[p, r, t]; after every upsize of a service
   that serves p (in any region: traffic leaving one region lands in another);
3. ``resize`` down: to the target; after every shift of a product the service serves;
4. ``supply`` (decrease): hardware of (r, h) leaves after the downsizes of that pool;
5. ``manual`` checkpoint of the step: after every action of the step.
Resizes of review-flagged services carry ``review = True`` (held until an operator approves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EPS = 1e-6
STEP_S = 7 * 24 * 3600.0  # one planning cycle (a week) between timesteps


@dataclass(frozen=True)
class Action:
    id: str
    kind: str  # resize | shift | supply | manual
    timestamp: float
    payload: Mapping[str, Any]
    antecedents: tuple[str, ...] = ()
    review: bool = False
    phase: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)


def build_dag(doc: Mapping[str, Any], *, start_ts: float = 0.0, steps: int | None = None,
              plan_id: str = "plan") -> list[Action]:  # fmt: skip
    times = list(doc["timesteps"])
    n_steps = len(times) - 1 if steps is None else min(steps, len(times) - 1)
    cap: dict[tuple[str, str, str, str], float] = {}
    for row in doc["capacity"]:
        cap[(row["service"], row["region"], row["hardware"], row["t"])] = float(row["amount"])
    share: dict[tuple[str, str, str], float] = {
        (r["product"], r["region"], r["t"]): float(r["share"]) for r in doc["traffic"]
    }
    sup: dict[tuple[str, str, str], float] = {
        (r["region"], r["hardware"], r["t"]): float(r["available"]) for r in doc["supply"]
    }
    services = {sv["name"]: sv for sv in doc["services"]}
    keys = sorted({(s, r, h) for (s, r, h, _t) in cap})
    products = sorted({p for (p, _r, _t) in share})
    regions, hardware = list(doc["regions"]), list(doc["hardware"])
    serves: dict[str, set[str]] = {}
    for name, sv in services.items():
        for per_p in (sv.get("phi") or {}).values():
            for p, v in per_p.items():
                if float(v) > 0:
                    serves.setdefault(name, set()).add(p)
    out: list[Action] = []
    prev_checkpoint: str | None = None
    for k in range(1, n_steps + 1):
        t0, t1 = times[k - 1], times[k]
        ts = start_ts + (k - 1) * STEP_S
        pre = f"{plan_id}/{t1}"
        step_ids: list[str] = []
        base_dep = (prev_checkpoint,) if prev_checkpoint else ()
        sup_up: dict[tuple[str, str], str] = {}
        for r in regions:
            for h in hardware:
                a, b = sup.get((r, h, t0), 0.0), sup.get((r, h, t1), 0.0)
                if b > a + EPS:
                    aid = f"{pre}/supply-up/{r}/{h}"
                    sup_up[(r, h)] = aid
                    out.append(Action(aid, "supply", ts, {"region": r, "hardware": h, "available": b, "t": t1},
                                      base_dep, phase="install"))  # fmt: skip
                    step_ids.append(aid)
        ups_of: dict[str, list[str]] = {}
        downs: list[tuple[str, str, str, float]] = []
        for s, r, h in keys:
            if services.get(s, {}).get("opt_out"):
                continue
            a, b = cap.get((s, r, h, t0), 0.0), cap.get((s, r, h, t1), 0.0)
            if b > a + EPS:
                aid = f"{pre}/upsize/{s}/{r}/{h}"
                deps = base_dep + ((sup_up[(r, h)],) if (r, h) in sup_up else ())
                out.append(Action(aid, "resize", ts + 1, {"service": s, "region": r, "hardware": h, "amount": b,
                                                          "from": a, "t": t1}, deps,
                                  review=bool(services.get(s, {}).get("review")), phase="upsize"))  # fmt: skip
                ups_of.setdefault(s, []).append(aid)
                step_ids.append(aid)
            elif b < a - EPS:
                downs.append((s, r, h, b))
        shifts_of: dict[str, list[str]] = {}
        for p in products:
            ups = sorted({u for s, ps in serves.items() if p in ps for u in ups_of.get(s, [])})
            for r in regions:
                a, b = share.get((p, r, t0), 0.0), share.get((p, r, t1), 0.0)
                if abs(b - a) > 1e-9:
                    aid = f"{pre}/shift/{p}/{r}"
                    out.append(Action(aid, "shift", ts + 2, {"product": p, "region": r, "share": b, "from": a,
                                                             "t": t1}, tuple(ups) or base_dep, phase="shift"))  # fmt: skip
                    shifts_of.setdefault(p, []).append(aid)
                    step_ids.append(aid)
        downs_in: dict[tuple[str, str], list[str]] = {}
        for s, r, h, b in downs:
            aid = f"{pre}/downsize/{s}/{r}/{h}"
            deps_l = sorted({d for p in serves.get(s, set()) for d in shifts_of.get(p, [])})
            deps = tuple(deps_l) or base_dep
            out.append(Action(aid, "resize", ts + 3, {"service": s, "region": r, "hardware": h, "amount": b,
                                                      "from": cap.get((s, r, h, t0), 0.0), "t": t1}, deps,
                              review=bool(services.get(s, {}).get("review")), phase="downsize"))  # fmt: skip
            downs_in.setdefault((r, h), []).append(aid)
            step_ids.append(aid)
        for r in regions:
            for h in hardware:
                a, b = sup.get((r, h, t0), 0.0), sup.get((r, h, t1), 0.0)
                if b < a - EPS:
                    aid = f"{pre}/supply-down/{r}/{h}"
                    out.append(Action(aid, "supply", ts + 4, {"region": r, "hardware": h, "available": b, "t": t1},
                                      tuple(downs_in.get((r, h), [])) or base_dep, phase="decommission"))  # fmt: skip
                    step_ids.append(aid)
        cid = f"{pre}/checkpoint"
        out.append(Action(cid, "manual", ts + 5, {"checkpoint": t1, "actions": len(step_ids)},
                          tuple(step_ids) or base_dep, phase="checkpoint"))  # fmt: skip
        prev_checkpoint = cid
    return out
