from __future__ import annotations

from placement_service.capacity.ras.domain import Request, Settings
from placement_service.capacity.ras.precheck import precheck


def test_hopeless_and_contradictory_requests_are_explained(small_region):
    st = Settings()
    reqs = (
        Request("fine", 5, {"hw00": 1.0}),
        Request("too-big", 1e6, {"hw00": 1.0, "hw01": 1.0}),
        Request("no-hw", 5, {"quantum": 1.0}),
        Request("bad-aff", 5, {"hw00": 1.0}, datacenter_affinity={"dc0": 0.5}),
        Request("ghost-dc", 5, {"hw00": 1.0}, datacenter_affinity={"nowhere": 1.0}),
    )
    kept, unmet = precheck(small_region, reqs, st)
    by_id = {u.id: u for u in unmet}
    assert [r.id for r in kept] == ["fine", "bad-aff", "ghost-dc"]
    assert by_id["too-big"].constraint == "capacity" and by_id["too-big"].shortfall > 0
    assert "MSB" in by_id["too-big"].reason and "even with every server" in by_id["too-big"].reason
    assert by_id["no-hw"].constraint == "eligibility" and "quantum" in by_id["no-hw"].reason
    assert "cannot equal 1" in by_id["bad-aff"].reason
    assert "unknown datacenter" in by_id["ghost-dc"].reason
    # contradictory affinity is dropped, the request itself is still solved
    assert all(r.datacenter_affinity is None for r in kept if r.id in ("bad-aff", "ghost-dc"))


def test_capacity_bound_is_exact_at_the_edge(small_region):
    import numpy as np

    avail = small_region.available & (small_region.hardware == 0)
    per_msb = np.bincount(small_region.msb[avail], minlength=len(small_region.msb_names))
    best = float(per_msb.sum() - per_msb.max())
    kept, unmet = precheck(small_region, (Request("edge", best, {"hw00": 1.0}),), Settings())
    assert kept and not unmet
    kept, unmet = precheck(small_region, (Request("edge", best + 1, {"hw00": 1.0}),), Settings())
    assert not kept and unmet[0].shortfall == 1
