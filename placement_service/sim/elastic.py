"""Elastic servers of a capacity region inside a simulated datacenter (issue 15).

``elastic_datacenter`` adds to a datacenter of primary tenants every server of a RAS region that
was lent out as elastic capacity at some time of a replay (``capacity.ras.scenario.replay`` with an
``ElasticLog``), the way the capacity loop exports them (``capacity.ras.online.harvestable_columns``):

- tenant ``elastic:<entity>``, the pool the server was first lent from (``elastic:shared-buffer:<hw>``
  or ``elastic:unassigned``); a server keeps that tenant for the whole run even when a later
  re-solve moves it to another pool (the simulator's inventory is fixed);
- environment ``elastic:<msb>``, the region's rack, cores, memory and storage;
- CPU history: the primary tenant of an elastic server is idle by construction, so each pool's
  series is a constant ``idle_cpu`` over the primary series' slots (it sets the pool's grid column);
- reimages: every **revocation** is a reimage event of the revoked server (the contract of
  ``harvest ras revocations``), so revocations wipe its replicas and, through the first month of
  events, set the pool's reimage rate and with it its grid row;
- presence: a server outside the elastic set (revoked and in a reservation, down in an outage, not
  yet released) takes no new replicas (``PresenceSchedule``, applied through the placer's busy flag).

Times: the replay's clock (seconds from its start) is put at the primary series' start.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from placement_service.capacity.ras.domain import Region
from placement_service.capacity.ras.online import harvestable_columns
from placement_service.capacity.ras.scenario import ElasticLog
from placement_service.core.types import Inventory, ReimageEvents, TenantSeries
from placement_service.sim.datacenter import SimDatacenter, SimInputError, build_datacenter
from placement_service.sim.durability import PresenceSchedule

DAY_S = 86400.0
IDLE_CPU = 0.02
"""CPU of an elastic server's (absent) primary tenant: the OS and the agent."""


def elastic_inventory(region: Region, log: ElasticLog) -> Inventory:
    """Every server that was ever elastic in ``log``, with its first pool as tenant."""
    first: dict[str, str] = dict(log.initial)
    for _, server, in_set, pool in log.changes:
        if in_set and server not in first:
            first[server] = pool
    ever = set(first)
    mask = np.array([s in ever for s in region.server], dtype=bool)
    cols = harvestable_columns(replace(region, available=mask), {s: None for s in ever})
    servers = tuple(str(s) for s in cols["server"])
    return Inventory(
        server=servers, tenant=tuple(first[s] for s in servers),
        environment=tuple(str(e) for e in cols["environment"]), rack=tuple(str(r) for r in cols["rack"]),
        cores=np.array(cols["cores"], dtype=float), memory_mb=np.array(cols["memory_mb"], dtype=float),
        storage_gb=np.array(cols["storage_gb"], dtype=float), hardware=tuple(str(h) for h in cols["hardware"]),
        datacenter=tuple(str(d) for d in cols["datacenter"]), msb=tuple(str(m) for m in cols["msb"]),
    )  # fmt: skip


def _concat(a: tuple[str, ...], b: tuple[str, ...], n_a: int, n_b: int) -> tuple[str, ...]:
    return a + b if len(a) == n_a and len(b) == n_b else ()


def elastic_datacenter(
    primary: SimDatacenter,
    region: Region,
    log: ElasticLog,
    *,
    days: float = 365.0,
    idle_cpu: float = IDLE_CPU,
    name: str | None = None,
) -> tuple[SimDatacenter, PresenceSchedule]:
    """``primary`` plus the region's elastic servers of ``log`` (module docstring), and their presence.

    ``primary``'s reimages should cover ``days`` (e.g. ``generate_datacenter(..., reimage_days=365)``)
    so that neither they nor the revocations are bootstrapped."""
    el = elastic_inventory(region, log)
    if len(el) == 0:
        raise SimInputError("the replay lent out no elastic server")
    clash = sorted(set(el.server) & set(primary.inventory.server))
    if clash:
        raise SimInputError(f"elastic servers share names with the primary datacenter: {clash[:5]}")
    p = primary.inventory
    n_p, n_e = len(p), len(el)
    inv = Inventory(
        server=p.server + el.server, tenant=p.tenant + el.tenant, environment=p.environment + el.environment,
        rack=p.rack + el.rack, cores=np.concatenate([p.cores, el.cores]),
        memory_mb=np.concatenate([p.memory_mb, el.memory_mb]), storage_gb=np.concatenate([p.storage_gb, el.storage_gb]),
        hardware=_concat(p.hardware, el.hardware, n_p, n_e), datacenter=_concat(p.datacenter, el.datacenter, n_p, n_e),
        msb=_concat(p.msb, el.msb, n_p, n_e),
    )  # fmt: skip
    pools = tuple(sorted(set(el.tenant)))
    s = primary.series
    series = TenantSeries(
        tenants=s.tenants + pools, start_s=s.start_s, interval_s=s.interval_s,
        cpu=np.vstack([np.asarray(s.cpu, dtype=np.float64), np.full((len(pools), s.n_slots), float(idle_cpu))]),
        long_gaps=s.long_gaps,
    )  # fmt: skip
    t0 = s.start_s
    rev_t = np.array([t0 + t for t, *_ in log.revocations], dtype=np.float64)
    rev_s = tuple(server for _, server, *_ in log.revocations)
    old = primary.reimages or ReimageEvents(np.zeros(0), ())
    ts = np.concatenate([np.asarray(old.timestamp_s, dtype=np.float64), rev_t])
    servers = np.array(old.server + rev_s, dtype=object)
    order = np.argsort(ts, kind="stable")
    events = ReimageEvents(ts[order], tuple(servers[order].tolist()))
    window = max(primary.reimage_window_s or 0.0, days * DAY_S)
    dc = build_datacenter(name or f"{primary.name}+elastic", inv, series, events, reimage_window_s=window)
    index = inv.index()
    pres_t = [0.0] * sum(1 for x in el.server if x not in log.initial)
    pres_s = [index[x] for x in el.server if x not in log.initial]
    pres_in = [False] * len(pres_t)
    for t, server, in_set, _ in log.changes:
        pres_t.append(float(t))
        pres_s.append(index[server])
        pres_in.append(bool(in_set))
    order_p = np.argsort(np.array(pres_t, dtype=np.float64), kind="stable")
    presence = PresenceSchedule(
        np.array(pres_t, dtype=np.float64)[order_p], np.array(pres_s, dtype=np.int64)[order_p],
        np.array(pres_in, dtype=bool)[order_p],
    )  # fmt: skip
    return dc, presence
