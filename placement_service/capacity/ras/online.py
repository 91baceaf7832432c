"""Online paths between solves: the Online Mover, the emergency path and the elastic export.

- Online Mover: a failed server of a reservation is replaced at once by a server of the shared
  buffer (any hardware type the reservation accepts), chosen to keep the most capacity after the
  loss of the worst MSB; when no buffer server fits, an unassigned one is used. When the buffer
  servers left sit in the reservation's largest MSB, one replacement may not restore its capacity
  after the worst MSB loss: it then takes more until it does. The replacement was
  lent out as elastic capacity, so its loan is revoked (a reimage-like event for the placement core).
- Emergency path: a new request is granted immediately and greedily from unassigned servers (then,
  if allowed, shared-buffer servers): each step adds the eligible server that raises the capacity
  after the worst MSB most, within the datacenter affinity when there is one. The next solve
  replaces this quick answer with an optimised one.
- Elastic export: shared-buffer and unassigned available servers, as an inventory whose tenant is
  ``elastic:<entity>`` (``elastic:shared-buffer:<hw>`` or ``elastic:unassigned``) and whose
  environment is ``elastic:<msb>`` unless the inventory has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from placement_service.capacity.ras.domain import (
    CAPACITY_TOLERANCE_RRU,
    SHARED_BUFFER_PREFIX,
    Region,
    Request,
    elastic_pool,
)
from placement_service.core.types import Inventory


@dataclass(frozen=True)
class OnlineResult:
    """New assignment, the (failed/target, replacement) pairs, the revoked elastic servers, what failed."""

    assignment: Mapping[str, str | None]
    replacements: tuple[tuple[str, str], ...]
    revoked: tuple[str, ...]
    unmet: tuple[str, ...]


def _value_of(region: Region, req: Request) -> np.ndarray:
    return np.array([float(req.rru.get(h, 0.0)) for h in region.hardware_names])


def _pick(region: Region, req: Request, members: list[int], candidates: np.ndarray) -> int | None:
    """The candidate that keeps the most capacity after the worst MSB (ties: fewest in its rack)."""
    if len(candidates) == 0:
        return None
    value = _value_of(region, req)
    per_msb = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
    total, top = per_msb.sum(), per_msb.max() if len(per_msb) else 0.0
    v = value[region.hardware[candidates]]
    after = total + v - np.maximum(top, per_msb[region.msb[candidates]] + v)
    if req.datacenter_affinity:
        per_dc = np.bincount(region.datacenter[members], weights=value[region.hardware[members]],
                             minlength=len(region.datacenter_names))  # fmt: skip
        share = np.array([req.datacenter_affinity.get(d, 0.0) for d in region.datacenter_names])
        over = per_dc[region.datacenter[candidates]] + v > share[region.datacenter[candidates]] * (total + v) + 1e-9
        after = after - 1e6 * over
    racks = np.bincount(region.rack[members], minlength=len(region.rack_names)) if members else None
    tie = -racks[region.rack[candidates]] * 1e-6 if racks is not None else 0.0
    return int(candidates[int(np.argmax(after + tie))])


def online_move(
    region: Region,
    requests: tuple[Request, ...],
    assignment: Mapping[str, str | None],
    failed: list[str],
) -> OnlineResult:
    """Replace each failed reservation server from the shared buffer (then unassigned servers)."""
    idx = region.index()
    by_id = {r.id: r for r in requests}
    out = dict(assignment)
    down = np.zeros(len(region), dtype=bool)
    for s in failed:
        if s in idx:
            down[idx[s]] = True
    avail = region.available.astype(bool) & ~down
    replacements: list[tuple[str, str]] = []
    revoked: list[str] = []
    unmet: list[str] = []
    # entities as integer codes (-1: none), so each step is a vectorised integer comparison
    names = sorted({e for e in out.values() if e is not None})
    code_of = {e: k for k, e in enumerate(names)}
    entity = np.array([code_of.get(out.get(s) or "", -1) for s in region.server], dtype=np.int64)
    in_buffer = np.isin(entity, [k for k, e in enumerate(names) if e.startswith(SHARED_BUFFER_PREFIX)])
    for s in failed:
        e = out.get(s)
        if s not in idx:
            continue
        out[s] = None
        entity[idx[s]] = -1
        in_buffer[idx[s]] = False
        if e is None or e.startswith(SHARED_BUFFER_PREFIX) or e not in by_id:
            continue
        req = by_id[e]
        value = _value_of(region, req)
        ok = avail & (value[region.hardware] > 0)
        code = code_of[e]
        # one replacement at least, more while the loss of the worst MSB would leave it short
        for step in range(len(region)):
            members = np.flatnonzero(entity == code)
            per = np.bincount(region.msb[members], weights=value[region.hardware[members]],
                              minlength=len(region.msb_names))  # fmt: skip
            if step > 0 and per.sum() - per.max() >= req.capacity_rru - CAPACITY_TOLERANCE_RRU:
                break
            choice = _pick(region, req, members.tolist(), np.flatnonzero(ok & in_buffer))
            if choice is None:
                choice = _pick(region, req, members.tolist(), np.flatnonzero(ok & (entity == -1)))
            if choice is None:
                unmet.append(f"{e}: no shared-buffer or unassigned server of {sorted(req.rru)} left to replace {s}")
                break
            name = region.server[choice]
            out[name] = e
            entity[choice] = code
            in_buffer[choice] = False
            replacements.append((s, name))
            revoked.append(name)
    return OnlineResult(out, tuple(replacements), tuple(revoked), tuple(unmet))


def emergency_grant(
    region: Region, request: Request, assignment: Mapping[str, str | None], *, use_shared_buffer: bool = False
) -> OnlineResult:
    """Grant ``request`` now from unassigned (then optionally shared-buffer) servers, greedily."""
    idx = region.index()
    out = dict(assignment)
    value = _value_of(region, request)
    entity = np.array([out.get(s) or "" for s in region.server], dtype=object)
    ok = region.available.astype(bool) & (value[region.hardware] > 0)
    if request.datacenter_affinity:
        allowed = np.array([request.datacenter_affinity.get(d, 0.0) > 0 for d in region.datacenter_names])
        ok &= allowed[region.datacenter]
    members = [idx[s] for s, e in out.items() if e == request.id and s in idx]
    revoked: list[str] = []
    pools = [ok & (entity == "")]
    if use_shared_buffer:
        pools.append(ok & np.array([str(x).startswith(SHARED_BUFFER_PREFIX) for x in entity]))
    taken = np.zeros(len(region), dtype=bool)
    for pool in pools:
        while True:
            per_msb = np.bincount(region.msb[members], weights=value[region.hardware[members]],
                                  minlength=len(region.msb_names))  # fmt: skip
            if per_msb.sum() - per_msb.max() >= request.capacity_rru - CAPACITY_TOLERANCE_RRU:
                return OnlineResult(out, (), tuple(revoked), ())
            choice = _pick(region, request, members, np.flatnonzero(pool & ~taken))
            if choice is None:
                break
            taken[choice] = True
            members.append(choice)
            out[region.server[choice]] = request.id
            revoked.append(region.server[choice])
    per_msb = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
    after = float(per_msb.sum() - per_msb.max()) if members else 0.0
    return OnlineResult(out, (), tuple(revoked), (
        f"{request.id}: emergency path reached {after:g} of {request.capacity_rru:g} RRU after the worst MSB "
        f"loss; not enough free eligible servers (the next solve may move servers to meet it)",
    ))  # fmt: skip


def harvestable_columns(region: Region, assignment: Mapping[str, str | None]) -> dict[str, list[object]]:
    """The elastic set in the data contract's inventory columns (+ hardware, datacenter, msb)."""
    rows = [
        i for i, s in enumerate(region.server)
        if region.available[i] and (assignment.get(s) is None or str(assignment.get(s)).startswith(SHARED_BUFFER_PREFIX))
    ]  # fmt: skip
    extra = region.extra

    def col(name: str, default: object) -> list[object]:
        values = extra.get(name)
        return [values[i] if values is not None else default for i in rows]

    return {
        "server": [region.server[i] for i in rows],
        "tenant": [elastic_pool(assignment.get(region.server[i])) for i in rows],
        # without an environment column: one per MSB (elastic servers of one MSB fail together), so
        # HDFS-H can spread a block's replicas over elastic servers of different MSBs
        "environment": col("environment", None) if "environment" in extra else
        [f"elastic:{region.msb_names[region.msb[i]]}" for i in rows],
        "rack": [region.rack_names[region.rack[i]] for i in rows],
        "cores": col("cores", 0.0),
        "memory_mb": col("memory_mb", 0.0),
        "storage_gb": col("storage_gb", 0.0),
        "hardware": [region.hardware_names[region.hardware[i]] for i in rows],
        "datacenter": [region.datacenter_names[region.datacenter[i]] for i in rows],
        "msb": [region.msb_names[region.msb[i]] for i in rows],
    }


def harvestable_inventory(region: Region, assignment: Mapping[str, str | None]) -> Inventory:
    """The elastic set as the placement core's ``Inventory`` (same rows as ``harvestable_columns``)."""
    cols = harvestable_columns(region, assignment)
    return Inventory(
        server=tuple(str(s) for s in cols["server"]), tenant=tuple(str(t) for t in cols["tenant"]),
        environment=tuple(str(e) for e in cols["environment"]), rack=tuple(str(r) for r in cols["rack"]),
        cores=np.array(cols["cores"], dtype=float), memory_mb=np.array(cols["memory_mb"], dtype=float),
        storage_gb=np.array(cols["storage_gb"], dtype=float), hardware=tuple(str(h) for h in cols["hardware"]),
        datacenter=tuple(str(d) for d in cols["datacenter"]), msb=tuple(str(m) for m in cols["msb"]),
    )  # fmt: skip


def revocation_events(servers: tuple[str, ...] | list[str], timestamp_s: float) -> dict[str, list[object]]:
    """Revoked elastic loans as reimage-like events (``timestamp, server``) for the placement core."""
    return {"timestamp": [float(timestamp_s)] * len(servers), "server": list(servers)}
