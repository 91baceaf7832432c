"""Explanations for requests that no plan can satisfy, found before solving.

A request is hopeless when even ALL available servers it may use fall short after the loss of the
worst MSB for it:  sum_F cap_F - max_F cap_F < C_r, with cap_F the RRU of every eligible available
server in MSB F (within the datacenters its affinity allows). Such requests are reported in ``unmet``
and left out of the solve (they would otherwise drain whole hardware pools). Contradictory affinity
(shares that cannot add up to 1 within the tolerance, unknown datacenters) is dropped with a message
and the request is solved without it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from placement_service.capacity.ras.domain import Region, Request, Settings, Unmet


def precheck(
    region: Region, requests: tuple[Request, ...], settings: Settings
) -> tuple[tuple[Request, ...], list[Unmet]]:
    """Requests to solve (possibly with affinity dropped) and the explanations found."""
    unmet: list[Unmet] = []
    kept: list[Request] = []
    hw_of = {h: k for k, h in enumerate(region.hardware_names)}
    dc_names = set(region.datacenter_names)
    avail = region.available.astype(bool)
    theta = settings.affinity_tolerance
    for req in requests:
        known = [h for h, v in req.rru.items() if h in hw_of and v > 0]
        if not known:
            unmet.append(Unmet(req.id, (
                f"eligibility: none of its hardware types {sorted(req.rru)} exists in the region "
                f"(region has {list(region.hardware_names)})"
            ), "eligibility", req.capacity_rru))  # fmt: skip
            continue
        if req.datacenter_affinity is not None:
            aff = dict(req.datacenter_affinity)
            unknown = sorted(d for d, s in aff.items() if d not in dc_names and s > 0)
            total = sum(aff.values())
            lo = sum(max(0.0, s - theta) for s in aff.values())
            reason = ""
            if unknown:
                reason = f"datacenter-affinity: unknown datacenter(s) {unknown}; affinity ignored"
            elif lo > 1 + 1e-9 or total + theta * len(aff) < 1 - 1e-9:
                reason = (
                    f"datacenter-affinity: shares add up to {total:.3f}, which cannot equal 1 within the "
                    f"tolerance {theta}; affinity ignored"
                )
            if reason:
                unmet.append(Unmet(req.id, reason, "datacenter-affinity", 0.0))
                req = replace(req, datacenter_affinity=None)
        value = np.zeros(len(region.hardware_names))
        for h in known:
            value[hw_of[h]] = req.rru[h]
        ok = avail & (value[region.hardware] > 0)
        if req.datacenter_affinity is not None:
            allowed = np.array([req.datacenter_affinity.get(d, 0.0) > 0 for d in region.datacenter_names])
            ok &= allowed[region.datacenter]
        per_msb = np.bincount(region.msb[ok], weights=value[region.hardware[ok]], minlength=len(region.msb_names))
        best = float(per_msb.sum() - per_msb.max()) if len(per_msb) else 0.0
        if best + 1e-9 < req.capacity_rru:
            worst = int(np.argmax(per_msb))
            unmet.append(Unmet(req.id, (
                f"capacity: asks {req.capacity_rru:g} RRU after the loss of any MSB, but all "
                f"{int(ok.sum())} available eligible servers ({', '.join(sorted(known))}) give at most "
                f"{best:g} RRU (total {per_msb.sum():g}, of which {per_msb.max():g} in MSB "
                f"{region.msb_names[worst]}); short by {req.capacity_rru - best:g} RRU even with every server"
            ), "capacity", req.capacity_rru - best))  # fmt: skip
            continue
        kept.append(req)
    return tuple(kept), unmet
