"""Hand-off: one region's Flux targets as RAS reservations, its spare pools as harvestable capacity.

- ``reservations``: one RAS reservation per (service, hardware) with capacity at (region, t):
  ``{"id": "<service>@<hardware>", "capacity_rru": amount, "rru": {hardware: RRU of one server}}``,
  the document ``harvest ras solve --reservations`` reads unchanged;
- ``inventory``: a region inventory sized by the plan's supply, when no real inventory exists
  (tests, demos). Flux's supply is the capacity services may be given; RAS keeps every reservation
  whole after the loss of any one of ``msbs`` MSBs and holds a shared buffer (2% by default), so the
  servers of hardware h are ``1.03 * max(ceil(available / RRU per server * msbs / (msbs - 1)),
  sum over its reservations of max(2, ceil(capacity / RRU per server * msbs / (msbs - 1)) + 1))``
  (whole servers: a small reservation still needs servers in two MSBs), round-robin over the MSBs;
- ``harvestable``: the spare pool of (region, h, t) is ``floor(spare / RRU per server)`` servers of
  h; they are taken from RAS's harvestable (elastic) set when a RAS plan is given, else from the
  inventory's servers of h, and written as the body ``PUT /v1/harvestable`` takes:
  ``{"nodes": [..]}`` (plus a ``pools`` summary the service ignores).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from placement_service.capacity.flux import FluxError


def _pick_t(doc: Mapping[str, Any], t: str | None) -> str:
    times = list(doc["timesteps"])
    if t is None:
        return times[1] if len(times) > 1 else times[0]
    if t not in times:
        raise FluxError(f"timestep {t!r} is not in the plan (timesteps: {times})")
    return t


def reservations(doc: Mapping[str, Any], region: str, t: str | None = None) -> dict[str, Any]:
    if region not in doc["regions"]:
        raise FluxError(f"region {region!r} is not in the plan (regions: {list(doc['regions'])})")
    t = _pick_t(doc, t)
    rru = doc["rru_per_server"]
    out = []
    for row in sorted(doc["capacity"], key=lambda r: (r["service"], r["hardware"])):
        if row["region"] == region and row["t"] == t and float(row["amount"]) > 1e-6:
            h = row["hardware"]
            out.append({"id": f"{row['service']}@{h}", "capacity_rru": round(float(row["amount"]), 6),
                        "rru": {h: float(rru[h])}, "datacenter_affinity": None})  # fmt: skip
    return {"reservations": out, "settings": {}, "source": {"plan_region": region, "t": t}}


def inventory(doc: Mapping[str, Any], region: str, t: str | None = None, *, msbs: int = 6,
              rack_size: int = 20) -> dict[str, list[Any]]:  # fmt: skip
    """Columns of a synthetic region inventory sized by the plan's supply at (region, t)."""
    t = _pick_t(doc, t)
    rru = doc["rru_per_server"]
    cols: dict[str, list[Any]] = {
        k: [] for k in ("server", "hardware", "datacenter", "msb", "rack", "available", "in_use")
    }
    n = 0
    spread = msbs / max(1, msbs - 1)
    per_res: dict[str, int] = {}
    for row in doc["capacity"]:
        if row["region"] == region and row["t"] == t and float(row["amount"]) > 1e-6:
            h = row["hardware"]
            need = max(2, math.ceil(float(row["amount"]) / float(rru[h]) * spread - 1e-9) + 1)
            per_res[h] = per_res.get(h, 0) + need
    for row in doc["supply"]:
        if row["region"] != region or row["t"] != t:
            continue
        h = row["hardware"]
        by_supply = math.ceil(float(row["available"]) / float(rru[h]) * spread - 1e-9)
        count = math.ceil(1.03 * max(by_supply, per_res.get(h, 0)))
        for i in range(count):
            m = i % msbs
            cols["server"].append(f"{region}-{h}-{i:05d}")
            cols["hardware"].append(h)
            cols["datacenter"].append(f"dc{m * 2 // msbs}")
            cols["msb"].append(f"msb{m:02d}")
            cols["rack"].append(f"msb{m:02d}-{h}-rack{(i // msbs) // rack_size:03d}")
            cols["available"].append(True)
            cols["in_use"].append(False)
            n += 1
    if n == 0:
        raise FluxError(f"region {region!r} has no supply at {t!r} in the plan")
    return cols


def harvestable(doc: Mapping[str, Any], region: str, t: str | None, servers: Sequence[str],
                server_hardware: Mapping[str, str], ras_harvestable: Sequence[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``PUT /v1/harvestable`` body for the region's spare pools."""
    t = _pick_t(doc, t)
    rru = doc["rru_per_server"]
    pool_servers: dict[str, int] = {}
    for row in doc.get("spare", []):
        if row["region"] == region and row["t"] == t:
            pool_servers[row["hardware"]] = int(
                math.floor(float(row["amount"]) / float(rru[row["hardware"]]) + 1e-9)
            )
    candidates = list(ras_harvestable) if ras_harvestable is not None else list(servers)
    nodes: list[str] = []
    taken: dict[str, int] = {}
    for s in sorted(candidates, reverse=True):  # the last servers first: the solver fills from the front
        h = server_hardware.get(s)
        if h is None:
            continue
        if taken.get(h, 0) < pool_servers.get(h, 0):
            nodes.append(s)
            taken[h] = taken.get(h, 0) + 1
    pools = [{"hardware": h, "spare_servers": pool_servers.get(h, 0), "harvestable_servers": taken.get(h, 0)}
             for h in sorted(pool_servers)]  # fmt: skip
    return {"nodes": sorted(nodes), "pools": pools, "region": region, "t": t}
