from __future__ import annotations

import dataclasses

import numpy as np

from placement_service.capacity.ras.domain import Request
from placement_service.capacity.ras.online import (
    emergency_grant,
    harvestable_columns,
    harvestable_inventory,
    online_move,
    revocation_events,
)


def _after_worst(problem, assignment, rid, avail=None):  # type: ignore[no-untyped-def]
    region = problem.region
    req = next(r for r in problem.requests if r.id == rid)
    idx = region.index()
    members = [idx[s] for s, e in assignment.items() if e == rid and (avail is None or avail[idx[s]])]
    value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
    per = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
    return per.sum() - per.max()


def test_online_mover_replaces_from_the_shared_buffer(small_problem, small_plan):
    region = small_problem.region
    rid = max(small_plan.reservations, key=lambda r: len(small_plan.reservations[r]["servers"]))  # type: ignore[arg-type]
    failed = list(small_plan.reservations[rid]["servers"][:2])  # type: ignore[index]
    avail = region.available.copy()
    for s in failed:
        avail[region.index()[s]] = False
    live = dataclasses.replace(region, available=avail)
    res = online_move(live, small_problem.requests, small_plan.assignment, failed)
    assert {old for old, _ in res.replacements} == set(failed)
    first = {}
    for old, new in res.replacements:
        first.setdefault(old, new)
        assert res.assignment[new] == rid
        assert small_plan.assignment[new] is None or small_plan.assignment[new].startswith("shared-buffer:")
    # the buffer is used first: the first replacement comes from it
    assert small_plan.assignment[res.replacements[0][1]].startswith("shared-buffer:")
    assert set(res.revoked) == {new for _, new in res.replacements}
    assert all(res.assignment[s] is None for s in failed)
    req = next(r for r in small_problem.requests if r.id == rid)
    assert _after_worst(small_problem, res.assignment, rid, avail) >= req.capacity_rru - 1e-9


def test_emergency_grant_meets_the_request_after_any_msb_loss(small_problem, small_plan):
    req = Request("urgent", capacity_rru=10, rru={"hw01": 1.0, "hw02": 2.0})
    res = emergency_grant(small_problem.region, req, small_plan.assignment)
    assert res.unmet == ()
    problem = dataclasses.replace(small_problem, requests=(req,))
    assert _after_worst(problem, res.assignment, "urgent") >= 10
    for s in res.revoked:  # only servers that were unassigned (elastic) were taken
        assert small_plan.assignment[s] is None


def test_emergency_grant_explains_when_it_cannot(small_problem, small_plan):
    req = Request("urgent", capacity_rru=1e5, rru={"hw01": 1.0})
    res = emergency_grant(small_problem.region, req, small_plan.assignment)
    assert res.unmet and "urgent" in res.unmet[0]


def test_harvestable_export_follows_the_inventory_contract(small_problem, small_plan):
    cols = harvestable_columns(small_problem.region, small_plan.assignment)
    for k in ("server", "tenant", "environment", "rack", "cores", "memory_mb", "storage_gb", "hardware",
              "datacenter", "msb"):  # fmt: skip
        assert len(cols[k]) == len(small_plan.harvestable)
    assert set(cols["server"]) == set(small_plan.harvestable)
    assert all(str(t).startswith("elastic:") for t in cols["tenant"])
    assert any(str(t).startswith("elastic:shared-buffer:") for t in cols["tenant"])
    assert all(float(c) > 0 for c in cols["cores"])  # type: ignore[arg-type]
    inv = harvestable_inventory(small_problem.region, small_plan.assignment)
    assert len(inv) == len(small_plan.harvestable) and inv.tenant == tuple(cols["tenant"])
    assert inv.msb and len(inv.msb) == len(inv)
    ev = revocation_events(["a", "b"], 100.0)
    assert ev == {"timestamp": [100.0, 100.0], "server": ["a", "b"]}


def test_elastic_export_gives_each_msb_its_own_environment(small_problem, small_plan):
    # one environment for every elastic server made HDFS-H's strict placement fail every block
    cols = harvestable_columns(small_problem.region, small_plan.assignment)
    assert {e for e in cols["environment"]} == {f"elastic:{m}" for m in cols["msb"]}
    assert len(set(cols["environment"])) >= 3
